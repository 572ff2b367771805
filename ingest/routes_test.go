package ingest_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/strictjson"
	"github.com/chalupa-run/chalupa/protocol"
)

// answersAs asserts that r is 202 with a body of the Answer type
// ingest.Routes gives path: it decodes strictly (no member the type lacks)
// and holds every member the type always writes.
func answersAs(t *testing.T, path string, r daemontest.Response) {
	t.Helper()
	if r.Status != http.StatusAccepted {
		t.Fatalf("%s: %s, want 202", path, r)
	}
	for _, rt := range ingest.Routes {
		if rt.Path == path {
			v := reflect.New(rt.Answer).Interface()
			if err := strictjson.Decode(r.Body, v); err != nil {
				t.Errorf("%s answered %s, not a %v: %v", path, r.Body, rt.Answer, err)
			}
			// Every member the type always writes (not omitempty) is there.
			var got, always map[string]any
			zero, _ := json.Marshal(reflect.New(rt.Answer).Elem().Interface())
			if json.Unmarshal(r.Body, &got) != nil || json.Unmarshal(zero, &always) != nil {
				t.Fatalf("%s answered %s, not a JSON object", path, r.Body)
			}
			for name := range always {
				if _, ok := got[name]; !ok {
					t.Errorf("%s answered %s without %q, which every %v has", path, r.Body, name, rt.Answer)
				}
			}
			return
		}
	}
	t.Fatalf("%s is not in ingest.Routes", path)
}

// TestRoutesAnswerTheirTypes: each signed route's 202 body is exactly the
// Answer type its row of ingest.Routes names (answersAs), so the table's
// wire types are the ones the handlers write (two types of the same
// members, as TelemetryAccepted and LifecycleAccepted without their
// omitempty ones, are the same on the wire). The log routes need
// versitygw (their subtest skips without it).
func TestRoutesAnswerTheirTypes(t *testing.T) {
	t.Run("heartbeat, telemetry, lifecycle, runs", func(t *testing.T) {
		h := daemontest.NewIngest(t, daemontest.IngestOptions{})
		h.CreateEnv("demo-harbor")
		k := h.Issue("demo-harbor")
		send := func(path string, body []byte) {
			t.Helper()
			answersAs(t, path, h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Path: path, Body: body}))
		}
		send(ingest.HeartbeatRoute, h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1"}))
		send(ingest.TelemetryRoute, h.TelemetryWindow("demo-harbor", "dep-1", "session-1", time.Time{}, nil))
		send(ingest.LifecycleRoute, h.LifecycleEvent("demo-harbor", "ci-started:1", protocol.EventCIStarted, "dep-1", nil))
		send(ingest.RunsRoute, h.RunReport("demo-harbor", "dep-1", "run-1", nil))
	})
	t.Run("logs", func(t *testing.T) {
		h := daemontest.NewIngestLogs(t)
		chunk := []byte("one line\n")
		answersAs(t, ingest.LogSessionsRoute, h.OpenSession(h.Deployment, "s1", "chalupa-agent.service"))
		r, p := h.PlanChunk("s1", 0, chunk)
		answersAs(t, ingest.LogPlanRoute, r)
		if code := daemontest.PutChunk(t, p.Upload, chunk); code != http.StatusOK {
			t.Fatalf("PUT: %d", code)
		}
		answersAs(t, ingest.LogCommitRoute, h.CommitChunk("s1", 0, chunk))
		fin := protocol.FinishV1{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, SessionID: "s1",
			Final: protocol.FinalV1{Chunks: 1, Bytes: int64(len(chunk)), Cursor: "s=abc", Reason: "shutdown"}}
		b, err := json.Marshal(fin)
		if err != nil {
			t.Fatal(err)
		}
		answersAs(t, ingest.LogFinishRoute, h.SendTo(ingest.LogFinishRoute, b))
	})
}
