package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/protocol"
)

// update rewrites testdata/agent-requests-v1.json from the agent of this
// tree: `go test ./agent -run TestAgentRequestsAreRecorded -update`.
var update = flag.Bool("update", false, "rewrite the recorded agent requests")

// recordedFile holds the signed requests this release's agent sends (bodies
// only: headers are signed afresh when replayed). ingest's
// TestRecordedAgentRequestsAreAccepted replays them against the server of
// every later change, so a server change that would refuse today's agents
// fails there (docs/operations.md, "Rollback").
const recordedFile = "testdata/agent-requests-v1.json"

// recordedRequest is one request of the recording.
type recordedRequest struct {
	Path string          `json:"path"`
	At   time.Time       `json:"at"` // the daemon's clock when it arrived
	Body json.RawMessage `json:"body"`
}

// fieldPaths lists the JSON member paths of a body ("reaper.lastActivityAt",
// "artifacts[].locator.kind"): what a strict server must know to accept it.
func fieldPaths(prefix string, v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			fieldPaths(p, e, out)
		}
	case []any:
		for _, e := range x {
			fieldPaths(prefix+"[]", e, out)
		}
	}
}

func pathsByRoute(t *testing.T, reqs []recordedRequest) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, r := range reqs {
		var v any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatalf("%s: %v", r.Path, err)
		}
		if out[r.Path] == nil {
			out[r.Path] = map[string]bool{}
		}
		fieldPaths("", v, out[r.Path])
	}
	return out
}

// TestAgentRequestsAreRecorded runs the agent through a start, heartbeats,
// a minute's window, a run report and a stop (final window, shutdown
// event), and checks that every field it sends is one the recorded release
// sent too. A new field fails here: a server of the recorded release
// refuses it (ingest is strict JSON), so a rollback of the server would
// stop this agent's heartbeats. Record it with -update, deliberately, and
// say so in the release notes (docs/operations.md, "Rollback").
func TestAgentRequestsAreRecorded(t *testing.T) {
	f := newFleet(t)
	a := f.start()
	f.runFor(a, 20) // 100 s: heartbeats and the 10:42 window, then the stop
	cfg := f.Config()
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := f.Clock.Now().UTC()
	rep := protocol.RunReportV1{RunID: "run-recorded", Suite: "e2e", Status: "passed", StartedAt: now.Add(-time.Minute), FinishedAt: now,
		Artifacts: []protocol.ArtifactRefV1{{V: 1, Name: "log", MediaType: "text/plain", SizeBytes: 3, SHA256: strings.Repeat("ab", 32),
			Locator: protocol.LocalLocator("log-recorded")}}}
	if res, err := agent.ReportRun(context.Background(), cfg, creds, rep); err != nil || res.Delivered != 1 {
		t.Fatalf("report-run: %+v, %v", res, err)
	}

	var sent []recordedRequest
	f.Locked(func() { sent = append(sent, f.sent...) })
	got := pathsByRoute(t, sent)
	for _, route := range []string{agent.HeartbeatRoute, "/api/ingest/telemetry", "/api/ingest/lifecycle", "/api/ingest/runs"} {
		if got[route] == nil {
			t.Fatalf("the agent sent nothing to %s; the recording must cover every route it uses", route)
		}
	}
	if *update {
		b, err := json.MarshalIndent(sent, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(recordedFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(recordedFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d requests", recordedFile, len(sent))
		return
	}
	b, err := os.ReadFile(recordedFile)
	if err != nil {
		t.Fatalf("%v (record it with -update)", err)
	}
	var recorded []recordedRequest
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&recorded); err != nil {
		t.Fatal(err)
	}
	want := pathsByRoute(t, recorded)
	for route, fields := range got {
		var extra []string
		for p := range fields {
			if !want[route][p] {
				extra = append(extra, p)
			}
		}
		sort.Strings(extra)
		if len(extra) > 0 {
			t.Errorf("the agent now sends %s on %s, which the recorded release's server does not know and refuses: record it with -update and say in the release notes that a server rollback must keep the reaper paused until the agents are rolled back too", strings.Join(extra, ", "), route)
		}
	}
}
