package ingest_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestIngestTelemetryAnswers: the HTTP answers of POST /api/ingest/telemetry
// (docs/operations.md, "Telemetry"): 202 for a new window and an exact
// retry, each refusal with its status and code and nothing written — not
// even the request's nonce.
func TestIngestTelemetryAnswers(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	h.CreateEnv("other-env")
	k := h.Issue("demo-harbor")
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1"})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	minute := h.Clock.Now().UTC().Truncate(time.Minute)
	send := func(body []byte) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: body, Path: ingest.TelemetryRoute})
	}
	first := h.TelemetryWindow("demo-harbor", "dep-1", "s1", time.Time{}, nil)
	if r := send(first); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":false`) {
		t.Fatalf("first window: %s", r)
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"exact retry", first, http.StatusAccepted, ""},
		{"changed retry", h.TelemetryWindow("demo-harbor", "dep-1", "s1", time.Time{}, func(w *protocol.WindowV1) { w.Metrics.CPUPct.Sum = 121 }), http.StatusConflict, "window_conflict"},
		{"unknown metric", bytes.Replace(h.TelemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, nil), []byte(`"cpuPct"`), []byte(`"cpuTemp"`), 1), http.StatusUnprocessableEntity, "invalid_body"},
		// A null metric is an absent one: the same window as the first.
		{"exact retry with a null metric", bytes.Replace(first, []byte(`"metrics":{`), []byte(`"metrics":{"load1":null,`), 1), http.StatusAccepted, ""},
		{"bad alignment", h.TelemetryWindow("demo-harbor", "dep-1", "s2", minute.Add(-90*time.Second), nil), http.StatusUnprocessableEntity, "invalid_body"},
		{"windowSeconds 30", h.TelemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, func(w *protocol.WindowV1) { w.WindowSeconds = 30 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"n zero", h.TelemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, func(w *protocol.WindowV1) { w.Metrics.CPUPct.N = 0 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"cpu above 100", h.TelemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, func(w *protocol.WindowV1) { w.Metrics.CPUPct.Max = 101 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"too old", h.TelemetryWindow("demo-harbor", "dep-1", "s2", minute.Add(-3*time.Hour), nil), http.StatusUnprocessableEntity, "window_too_old"},
		{"future", h.TelemetryWindow("demo-harbor", "dep-1", "s2", minute.Add(10*time.Minute), nil), http.StatusUnprocessableEntity, "window_in_future"},
		{"unknown deployment", h.TelemetryWindow("demo-harbor", "dep-none", "s2", time.Time{}, nil), http.StatusNotFound, "deployment_not_found"},
		{"another environment", h.TelemetryWindow("other-env", "dep-1", "s2", time.Time{}, nil), http.StatusForbidden, "environment_mismatch"},
		{"malformed", []byte(`{"environmentSlug":`), http.StatusBadRequest, "malformed_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.TelemetryRows()
			r := send(tc.body)
			if r.Status != tc.status || r.Code != tc.code {
				t.Fatalf("%s; want %d %q", r, tc.status, tc.code)
			}
			after := h.TelemetryRows()
			wrote := after != before
			// An exact retry is answered 202 and writes nothing, not even
			// its nonce (so retries cannot grow the database).
			if tc.status == http.StatusAccepted && !strings.Contains(string(r.Body), `"deduplicated":true`) {
				t.Fatalf("exact retry answered %s", r.Body)
			}
			if wrote {
				t.Fatalf("rows %s -> %s: the request wrote", before, after)
			}
		})
	}
}

// TestIngestTelemetryConcurrent: 100 concurrent posts of one window store
// it once (the rest deduplicated); 100 concurrent different windows of one
// session count 100 on its version. The telemetry rate quotas, which count
// every request, are off: 200 requests of one deployment at once are far
// past them.
func TestIngestTelemetryConcurrent(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: map[string]string{"CHALUPA_QUOTA_TELEMETRY_BURST": "0", "CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE": "0"}})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1"})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	minute := h.Clock.Now().UTC().Truncate(time.Minute)
	run := func(bodies [][]byte) (dedup, fresh int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, b := range bodies {
			req, _ := h.Build(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: b, Path: ingest.TelemetryRoute})
			wg.Add(1)
			go func(i int, req *http.Request) {
				defer wg.Done()
				<-start
				r, err := daemontest.DoRequest(h.HTTP, req)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("request %d: %v", i, err)
				case r.Status != http.StatusAccepted:
					t.Errorf("request %d: %d %s", i, r.Status, r.Code)
				case strings.Contains(string(r.Body), `"deduplicated":true`):
					dedup++
				default:
					fresh++
				}
			}(i, req)
		}
		close(start)
		wg.Wait()
		return dedup, fresh
	}
	same := make([][]byte, 100)
	for i := range same {
		same[i] = h.TelemetryWindow("demo-harbor", "dep-1", "same", minute.Add(-time.Minute), nil)
	}
	if dedup, fresh := run(same); fresh != 1 || dedup != 99 {
		t.Fatalf("100 posts of one window: %d stored, %d deduplicated; want 1 and 99", fresh, dedup)
	}
	if n := h.Count(`SELECT count(*) FROM telemetry_windows WHERE session_id = 'same'`); n != 1 {
		t.Fatalf("%d rows for one window", n)
	}
	diff := make([][]byte, 100)
	for i := range diff {
		diff[i] = h.TelemetryWindow("demo-harbor", "dep-1", "many", minute.Add(-time.Duration(i+1)*time.Minute), nil)
	}
	if dedup, fresh := run(diff); fresh != 100 || dedup != 0 {
		t.Fatalf("100 different windows: %d stored, %d deduplicated", fresh, dedup)
	}
	if v := h.Count(`SELECT version FROM telemetry_sessions WHERE id = 'many'`); v != 100 {
		t.Fatalf("session version %d, want 100", v)
	}
}
