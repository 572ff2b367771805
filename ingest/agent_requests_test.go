package ingest_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// TestRecordedAgentRequestsAreAccepted replays the requests a released
// agent sends (agent/testdata/agent-requests-v1.json, recorded by
// agent's TestAgentRequestsAreRecorded) against this server, each
// signed afresh at its recorded time: a server change that refuses today's
// agents — a field made required, a rule tightened — fails here before it
// ships, so the server can always be upgraded ahead of its fleet
// (docs/operations.md, "Rollback").
func TestRecordedAgentRequestsAreAccepted(t *testing.T) {
	b, err := os.ReadFile("../agent/testdata/agent-requests-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var reqs []struct {
		Path string          `json:"path"`
		At   time.Time       `json:"at"`
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(b, &reqs); err != nil || len(reqs) == 0 {
		t.Fatalf("recorded requests: %v (%d)", err, len(reqs))
	}
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Epoch: reqs[0].At})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	for i, r := range reqs {
		if d := r.At.Sub(h.Clock.Now()); d > 0 {
			h.Clock.Advance(d)
		}
		res := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Path: r.Path, Body: r.Body})
		if res.Status/100 != 2 {
			t.Fatalf("recorded request %d (%s at %s): %s, want it accepted", i, r.Path, r.At.Format(time.TimeOnly), res)
		}
	}
}
