package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/protocol"
)

const telemetryPath = "/api/ingest/telemetry"

// telemetryWindow returns a valid window body: cpuPct only, one minute
// before the clock's current minute unless start is set.
func (h *ingestHarness) telemetryWindow(env, dep, session string, start time.Time, mutate func(*protocol.WindowV1)) []byte {
	h.t.Helper()
	if start.IsZero() {
		start = h.clock.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	}
	w := protocol.WindowV1{EnvironmentSlug: env, DeploymentID: dep, SessionID: session, WindowStart: start, WindowSeconds: 60,
		Metrics: protocol.MetricsV1{CPUPct: &protocol.AggV1{N: 12, Sum: 120, Min: 5, Max: 15, Last: 9}}}
	if mutate != nil {
		mutate(&w)
	}
	b, err := json.Marshal(w)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// telemetryRows counts everything a telemetry request can write, nonces
// included.
func (h *ingestHarness) telemetryRows() string {
	h.t.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT count(*) FROM telemetry_sessions`, `SELECT count(*) FROM telemetry_windows`,
		`SELECT count(*) FROM telemetry_receipts`, `SELECT count(*) FROM telemetry_anomalies`,
		`SELECT coalesce(sum(version), 0) FROM telemetry_sessions`,
		`SELECT coalesce(sum(telemetry_receipts), 0) FROM deployments`, `SELECT count(*) FROM nonces`,
	} {
		parts = append(parts, fmt.Sprint(h.count(q)))
	}
	return strings.Join(parts, "/")
}

// TestIngestTelemetryAnswers: the HTTP answers of POST /api/ingest/telemetry
// (docs/operations.md, "Telemetry"): 202 for a new window and an exact
// retry, each refusal with its status and code and nothing written — not
// even the request's nonce.
func TestIngestTelemetryAnswers(t *testing.T) {
	h := newIngestHarness(t, harnessOptions{})
	h.createEnv("demo-harbor")
	h.createEnv("other-env")
	k := h.issue("demo-harbor")
	if r := h.send(signedReq{KeyID: k.ID, Key: k.Raw, Body: h.heartbeat(hbOpts{Env: "demo-harbor", Deployment: "dep-1"})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	minute := h.clock.Now().UTC().Truncate(time.Minute)
	send := func(body []byte) apiResponse {
		return h.send(signedReq{KeyID: k.ID, Key: k.Raw, Body: body, Path: telemetryPath})
	}
	first := h.telemetryWindow("demo-harbor", "dep-1", "s1", time.Time{}, nil)
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
		{"changed retry", h.telemetryWindow("demo-harbor", "dep-1", "s1", time.Time{}, func(w *protocol.WindowV1) { w.Metrics.CPUPct.Sum = 121 }), http.StatusConflict, "window_conflict"},
		{"unknown metric", bytes.Replace(h.telemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, nil), []byte(`"cpuPct"`), []byte(`"cpuTemp"`), 1), http.StatusUnprocessableEntity, "invalid_body"},
		// A null metric is an absent one: the same window as the first.
		{"exact retry with a null metric", bytes.Replace(first, []byte(`"metrics":{`), []byte(`"metrics":{"load1":null,`), 1), http.StatusAccepted, ""},
		{"bad alignment", h.telemetryWindow("demo-harbor", "dep-1", "s2", minute.Add(-90*time.Second), nil), http.StatusUnprocessableEntity, "invalid_body"},
		{"windowSeconds 30", h.telemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, func(w *protocol.WindowV1) { w.WindowSeconds = 30 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"n zero", h.telemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, func(w *protocol.WindowV1) { w.Metrics.CPUPct.N = 0 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"cpu above 100", h.telemetryWindow("demo-harbor", "dep-1", "s2", time.Time{}, func(w *protocol.WindowV1) { w.Metrics.CPUPct.Max = 101 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"too old", h.telemetryWindow("demo-harbor", "dep-1", "s2", minute.Add(-3*time.Hour), nil), http.StatusUnprocessableEntity, "window_too_old"},
		{"future", h.telemetryWindow("demo-harbor", "dep-1", "s2", minute.Add(10*time.Minute), nil), http.StatusUnprocessableEntity, "window_in_future"},
		{"unknown deployment", h.telemetryWindow("demo-harbor", "dep-none", "s2", time.Time{}, nil), http.StatusNotFound, "deployment_not_found"},
		{"another environment", h.telemetryWindow("other-env", "dep-1", "s2", time.Time{}, nil), http.StatusForbidden, "environment_mismatch"},
		{"malformed", []byte(`{"environmentSlug":`), http.StatusBadRequest, "malformed_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.telemetryRows()
			r := send(tc.body)
			if r.Status != tc.status || r.Code != tc.code {
				t.Fatalf("%s; want %d %q", r, tc.status, tc.code)
			}
			after := h.telemetryRows()
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
	h := newIngestHarness(t, harnessOptions{Env: map[string]string{"CHALUPA_QUOTA_TELEMETRY_BURST": "0", "CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE": "0"}})
	h.createEnv("demo-harbor")
	k := h.issue("demo-harbor")
	if r := h.send(signedReq{KeyID: k.ID, Key: k.Raw, Body: h.heartbeat(hbOpts{Env: "demo-harbor", Deployment: "dep-1"})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	minute := h.clock.Now().UTC().Truncate(time.Minute)
	run := func(bodies [][]byte) (dedup, fresh int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, b := range bodies {
			req, _ := h.build(signedReq{KeyID: k.ID, Key: k.Raw, Body: b, Path: telemetryPath})
			wg.Add(1)
			go func(i int, req *http.Request) {
				defer wg.Done()
				<-start
				r, err := doRequest(h.hc, req)
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
		same[i] = h.telemetryWindow("demo-harbor", "dep-1", "same", minute.Add(-time.Minute), nil)
	}
	if dedup, fresh := run(same); fresh != 1 || dedup != 99 {
		t.Fatalf("100 posts of one window: %d stored, %d deduplicated; want 1 and 99", fresh, dedup)
	}
	if n := h.count(`SELECT count(*) FROM telemetry_windows WHERE session_id = 'same'`); n != 1 {
		t.Fatalf("%d rows for one window", n)
	}
	diff := make([][]byte, 100)
	for i := range diff {
		diff[i] = h.telemetryWindow("demo-harbor", "dep-1", "many", minute.Add(-time.Duration(i+1)*time.Minute), nil)
	}
	if dedup, fresh := run(diff); fresh != 100 || dedup != 0 {
		t.Fatalf("100 different windows: %d stored, %d deduplicated", fresh, dedup)
	}
	if v := h.count(`SELECT version FROM telemetry_sessions WHERE id = 'many'`); v != 100 {
		t.Fatalf("session version %d, want 100", v)
	}
}
