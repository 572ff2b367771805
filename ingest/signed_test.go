package ingest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// padJSON pads a JSON object with trailing spaces to exactly n bytes.
func padJSON(t *testing.T, b []byte, n int) []byte {
	t.Helper()
	if len(b) > n {
		t.Fatalf("body of %d bytes cannot be padded to %d", len(b), n)
	}
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

// TestIngestRefusalMatrix sends one request per protocol-v1 check (docs/operations.md,
// "Signed ingest") and asserts the
// status and the JSON error code of each, that a refusal writes nothing
// (heartbeat and nonce rows unchanged), and after the whole matrix that the
// database holds exactly the heartbeat and nonce rows of the accepted
// requests.
func TestIngestRefusalMatrix(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	h.CreateEnv("other-env")
	rotating := h.Issue("demo-harbor")
	active, rotated := h.Rotate("demo-harbor")
	if len(rotated) != 1 || rotated[0] != rotating.ID {
		t.Fatalf("rotate reported rotated keys %v, want [%s]", rotated, rotating.ID)
	}
	revoked := h.Issue("demo-harbor")
	h.Revoke(revoked.ID)
	other := h.Issue("other-env")

	now := h.Clock.Now()
	ts := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	body := h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix"})
	bodyB := h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", IdleChecks: 9})
	ok := func(k daemontest.Key) daemontest.SignedReq {
		return daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: body}
	}

	// The accepted requests, as (nonce partition, nonce).
	var accepted [][2]string
	// replayed is the fully specified request of the "+299 s" row, for
	// the replay rows.
	var replayed daemontest.SignedReq

	// An ended deployment: accepted once, then ended by direct SQL (test
	// setup: the reaper's claim belongs to a later issue).
	endedReq := daemontest.SignedReq{KeyID: active.ID, Key: active.Raw, Nonce: protocol.NewNonce(),
		Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-ended"})}
	if resp := h.Send(endedReq); resp.Status != http.StatusAccepted {
		t.Fatalf("setup heartbeat for dep-ended: %s", resp)
	}
	accepted = append(accepted, [2]string{active.ID, endedReq.Nonce})
	h.Exec(`UPDATE deployments SET status = 'ended', ended_at = ? WHERE id = 'dep-ended'`, now.UnixMilli())

	type row struct {
		name   string
		req    func() daemontest.SignedReq
		status int
		code   string
		check  func(t *testing.T, r daemontest.Response)
		// after runs once the row has been sent with its filled-in request.
		after func(sent daemontest.SignedReq)
	}
	rows := []row{
		{name: "key id missing, no shared key configured", status: 401, code: "missing_headers",
			req: func() daemontest.SignedReq { r := ok(active); r.Omit = []string{protocol.HeaderKeyID}; return r }},
		{name: "timestamp missing", status: 401, code: "missing_headers",
			req: func() daemontest.SignedReq { r := ok(active); r.Omit = []string{protocol.HeaderTimestamp}; return r }},
		{name: "nonce missing", status: 401, code: "missing_headers",
			req: func() daemontest.SignedReq { r := ok(active); r.Omit = []string{protocol.HeaderNonce}; return r }},
		{name: "nonce header twice", status: 401, code: "duplicate_header",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Extra = map[string]string{protocol.HeaderNonce: protocol.NewNonce()}
				return r
			}},
		{name: "signature header twice", status: 401, code: "duplicate_header",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Extra = map[string]string{protocol.HeaderSignature: "v1=00"}
				return r
			}},
		{name: "agentVersion with an escape byte", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", AgentVersion: "agent\u001b[31m"})
				return r
			}},
		{name: "body is an array", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq { r := ok(active); r.Body = []byte("[]"); return r },
			check: func(t *testing.T, r daemontest.Response) {
				if r.Message != "body must be a JSON object" {
					t.Errorf("message %q", r.Message)
				}
			}},
		{name: "signature missing", status: 401, code: "missing_headers",
			req: func() daemontest.SignedReq { r := ok(active); r.Omit = []string{protocol.HeaderSignature}; return r }},
		{name: "timestamp not a number", status: 401, code: "bad_timestamp",
			req: func() daemontest.SignedReq { r := ok(active); r.TS = "12abc"; return r }},
		{name: "timestamp in milliseconds", status: 401, code: "bad_timestamp",
			req: func() daemontest.SignedReq { r := ok(active); r.TS = strconv.FormatInt(now.UnixMilli(), 10); return r }},
		{name: "skew +301 s", status: 401, code: "timestamp_skew",
			req: func() daemontest.SignedReq { r := ok(active); r.TS = ts(301 * time.Second); return r }},
		{name: "skew -301 s", status: 401, code: "timestamp_skew",
			req: func() daemontest.SignedReq { r := ok(active); r.TS = ts(-301 * time.Second); return r }},
		{name: "skew +299 s accepted", status: 202,
			req:   func() daemontest.SignedReq { r := ok(active); r.TS = ts(299 * time.Second); return r },
			after: func(sent daemontest.SignedReq) { replayed = sent }},
		{name: "skew -299 s accepted", status: 202,
			req: func() daemontest.SignedReq { r := ok(active); r.TS = ts(-299 * time.Second); return r }},
		{name: "skew +300 s accepted (boundary)", status: 202,
			req: func() daemontest.SignedReq { r := ok(active); r.TS = ts(300 * time.Second); return r }},
		{name: "nonce of 15 characters", status: 401, code: "bad_nonce",
			req: func() daemontest.SignedReq { r := ok(active); r.Nonce = strings.Repeat("n", 15); return r }},
		{name: "nonce with a character outside [A-Za-z0-9_-]", status: 401, code: "bad_nonce",
			req: func() daemontest.SignedReq { r := ok(active); r.Nonce = "abcdefghijklmnop+"; return r }},
		{name: "nonce of 65 characters", status: 401, code: "bad_nonce",
			req: func() daemontest.SignedReq { r := ok(active); r.Nonce = strings.Repeat("n", 65); return r }},
		{name: "unknown key", status: 401, code: "unknown_key",
			req: func() daemontest.SignedReq {
				return daemontest.SignedReq{KeyID: "env_demo-harbor_0000000000000000", Key: active.Raw, Body: body}
			}},
		{name: "revoked key", status: 401, code: "key_revoked",
			req: func() daemontest.SignedReq { return ok(revoked) }},
		{name: "rotating key accepted", status: 202,
			req: func() daemontest.SignedReq { return ok(rotating) }},
		{name: "signature over a different method", status: 401, code: "bad_signature",
			req: func() daemontest.SignedReq { r := ok(active); r.SignMethod = "PUT"; return r }},
		{name: "signature over a different path", status: 401, code: "bad_signature",
			req: func() daemontest.SignedReq { r := ok(active); r.SignPath = "/api/ingest/telemetry"; return r }},
		{name: "signature over a different body", status: 401, code: "bad_signature",
			req: func() daemontest.SignedReq { r := ok(active); r.SignBody = bodyB; return r }},
		{name: "signature with another key's material", status: 401, code: "bad_signature",
			req: func() daemontest.SignedReq { r := ok(active); r.Key = rotating.Raw; return r }},
		{name: "signature header not v1=<hex>", status: 401, code: "bad_signature",
			req: func() daemontest.SignedReq { r := ok(active); r.Sig = "v2=" + strings.Repeat("0", 64); return r }},
		{name: "replayed request", status: 409, code: "nonce_replayed",
			req: func() daemontest.SignedReq { return replayed }},
		{name: "replayed nonce, fresh timestamp and signature", status: 409, code: "nonce_replayed",
			req: func() daemontest.SignedReq { r := ok(active); r.Nonce = replayed.Nonce; return r }},
		{name: "same nonce under a different key accepted", status: 202,
			req: func() daemontest.SignedReq { r := ok(rotating); r.Nonce = replayed.Nonce; return r }},
		{name: "body of 64 KiB + 1", status: 413, code: "body_too_large",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = padJSON(t, body, ingest.MaxHeartbeatBody+1)
				return r
			}},
		{name: "body of 64 KiB + 1, unknown key (size is checked first)", status: 413, code: "body_too_large",
			req: func() daemontest.SignedReq {
				return daemontest.SignedReq{KeyID: "env_demo-harbor_0000000000000000", Key: active.Raw, Body: padJSON(t, body, ingest.MaxHeartbeatBody+1)}
			}},
		{name: "body of exactly 64 KiB accepted", status: 202,
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = padJSON(t, body, ingest.MaxHeartbeatBody)
				return r
			}},
		{name: "malformed JSON", status: 400, code: "malformed_json",
			req: func() daemontest.SignedReq { r := ok(active); r.Body = body[:len(body)-1]; return r }},
		{name: "two JSON values", status: 400, code: "malformed_json",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = append(bytes.Clone(body), []byte("{}")...)
				return r
			}},
		{name: "stray closing brace after the value", status: 400, code: "malformed_json",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = append(bytes.Clone(body), []byte("}")...)
				return r
			}},
		{name: "empty body", status: 400, code: "malformed_json",
			req: func() daemontest.SignedReq { r := ok(active); r.Body = []byte{}; return r }},
		{name: "unknown field", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", ExtraJSONAtTheEnd: `"cpuTemp":71`})
				return r
			},
			check: func(t *testing.T, r daemontest.Response) {
				if !strings.Contains(r.Message, "cpuTemp") {
					t.Errorf("message %q does not name the unknown field", r.Message)
				}
			}},
		{name: "field name in another case", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = []byte(strings.Replace(string(body), `"environmentSlug"`, `"ENVIRONMENTSLUG"`, 1))
				return r
			},
			check: func(t *testing.T, r daemontest.Response) {
				if !strings.Contains(r.Message, `"ENVIRONMENTSLUG"`) || strings.Contains(r.Message, "demo-harbor") {
					t.Errorf("message %q does not name only the key", r.Message)
				}
			}},
		{name: "field given twice", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", ExtraJSONAtTheEnd: `"environmentSlug":"demo-harbor"`})
				return r
			},
			check: func(t *testing.T, r daemontest.Response) {
				if !strings.Contains(r.Message, `"environmentSlug"`) || strings.Contains(r.Message, "demo-harbor") {
					t.Errorf("message %q does not name only the key", r.Message)
				}
			}},
		{name: "field of the wrong type", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = []byte(strings.Replace(string(body), `"limitMinutes":30`, `"limitMinutes":"30"`, 1))
				return r
			}},
		{name: "integer field written 30.0 (as Python's json.dumps writes a float) accepted", status: 202,
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = []byte(strings.Replace(string(body), `"limitMinutes":30`, `"limitMinutes":30.0`, 1))
				return r
			}},
		{name: "integer field written 3e1 accepted", status: 202,
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = []byte(strings.Replace(string(body), `"limitMinutes":30`, `"limitMinutes":3e1`, 1))
				return r
			}},
		{name: "integer field written 30.5", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = []byte(strings.Replace(string(body), `"limitMinutes":30`, `"limitMinutes":30.5`, 1))
				return r
			}},
		{name: "field value out of range", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", LimitMinutes: protocol.MaxLimitMinutes + 1})
				return r
			}},
		{name: "lastActivityAt 301 s after sentAt (an agent clock stepped back) accepted as now", status: 202,
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", LastActivityAt: now.Add(301 * time.Second)})
				return r
			}},
		{name: "lastActivityAt in year 9999 (deadline past RFC 3339's range)", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", LimitMinutes: protocol.MaxLimitMinutes,
					LastActivityAt: time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC)})
				return r
			}},
		{name: "sessionExpiresAt in year 10000 once in UTC", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -(23*3600+59*60)))
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", SessionExpiresAt: &far})
				return r
			}},
		{name: "lastActivityAt in year -1 once in UTC", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix",
					LastActivityAt: time.Date(0, 1, 1, 0, 0, 0, 0, time.FixedZone("", 23*3600+59*60))})
				return r
			}},
		{name: "lastActivityAt more than 10 minutes after sentAt refused", status: 422, code: "invalid_body",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-matrix", LastActivityAt: now.Add(ingest.MaxActivityAhead + time.Second)})
				return r
			}},
		{name: "environment mismatch", status: 403, code: "environment_mismatch",
			req: func() daemontest.SignedReq {
				r := ok(active)
				r.Body = h.Heartbeat(daemontest.HeartbeatOpts{Env: "other-env", Deployment: "dep-matrix"})
				return r
			},
			check: func(t *testing.T, r daemontest.Response) {
				if !strings.Contains(r.Message, `"demo-harbor"`) || !strings.Contains(r.Message, `"other-env"`) {
					t.Errorf("message %q does not name both slugs", r.Message)
				}
			}},
		{name: "same deployment id in another environment is that environment's own", status: 202,
			req: func() daemontest.SignedReq {
				return daemontest.SignedReq{KeyID: other.ID, Key: other.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "other-env", Deployment: "dep-matrix"})}
			}},
		{name: "heartbeat for an ended deployment", status: 409, code: "deployment_ended",
			req: func() daemontest.SignedReq {
				return daemontest.SignedReq{KeyID: active.ID, Key: active.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-ended"})}
			}},
		{name: "other environment's own key accepted", status: 202,
			req: func() daemontest.SignedReq {
				return daemontest.SignedReq{KeyID: other.ID, Key: other.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "other-env", Deployment: "dep-other"})}
			}},
	}

	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			hbBefore, nBefore := h.HeartbeatRows(), h.NonceRows()
			req, sent := h.Build(rw.req())
			resp := h.RoundTrip(req)
			if resp.Status != rw.status {
				t.Fatalf("status %d, want %d: %s", resp.Status, rw.status, resp)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if resp.Header.Get("Deprecation") != "" {
				t.Errorf("a per-environment key request got a Deprecation header")
			}
			wantHB, wantN := hbBefore, nBefore
			if rw.status == http.StatusAccepted {
				var acc protocol.HeartbeatAccepted
				if err := json.Unmarshal(resp.Body, &acc); err != nil || !acc.Accepted {
					t.Fatalf("202 body %s", resp.Body)
				}
				partition := sent.KeyID
				accepted = append(accepted, [2]string{partition, sent.Nonce})
				wantHB, wantN = hbBefore+1, nBefore+1
			} else {
				if resp.Code != rw.code {
					t.Fatalf("code %q, want %q: %s", resp.Code, rw.code, resp)
				}
				if resp.Message == "" {
					t.Errorf("refusal without a message")
				}
			}
			if rw.check != nil {
				rw.check(t, resp)
			}
			if rw.after != nil {
				rw.after(sent)
			}
			if got := h.HeartbeatRows(); got != wantHB {
				t.Errorf("heartbeat rows %d -> %d, want %d", hbBefore, got, wantHB)
			}
			if got := h.NonceRows(); got != wantN {
				t.Errorf("nonce rows %d -> %d, want %d", nBefore, got, wantN)
			}
		})
	}

	// The fleet view stays readable whatever was accepted.
	h.Fleet()

	// The database holds exactly the accepted requests.
	if got := h.HeartbeatRows(); got != len(accepted) {
		t.Errorf("after the matrix: %d heartbeat rows, want %d (one per accepted request)", got, len(accepted))
	}
	want := map[[2]string]bool{}
	for _, a := range accepted {
		want[a] = true
	}
	got := map[[2]string]bool{}
	rowsQ, err := h.SQL().Query(`SELECT key_id, nonce FROM nonces`)
	if err != nil {
		t.Fatal(err)
	}
	for rowsQ.Next() {
		var k, n string
		if err := rowsQ.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[[2]string{k, n}] = true
	}
	rowsQ.Close()
	if fmt.Sprint(sortedPairs(got)) != fmt.Sprint(sortedPairs(want)) {
		t.Errorf("nonce rows after the matrix:\n got %v\nwant %v", sortedPairs(got), sortedPairs(want))
	}
	// Each accepted heartbeat row names the key that signed it.
	for _, k := range []daemontest.Key{active, rotating, other} {
		n := 0
		for _, a := range accepted {
			if a[0] == k.ID {
				n++
			}
		}
		if got := h.Count(`SELECT count(*) FROM heartbeats WHERE key_id = ?`, k.ID); got != n {
			t.Errorf("heartbeats signed by %s: %d rows, want %d", k.ID, got, n)
		}
	}
	if n := h.Count(`SELECT count(*) FROM heartbeats WHERE key_id = ?`, revoked.ID); n != 0 {
		t.Errorf("%d heartbeats stored under the revoked key", n)
	}
}

func sortedPairs(m map[[2]string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k[0]+"/"+k[1])
	}
	sort.Strings(out)
	return out
}

// TestIngestConcurrentReplay sends one signed request from 200 goroutines
// at once: the nonce is claimed in the same transaction as the write, so
// exactly one is accepted and 199 are 409, with one heartbeat row. The
// deployment's heartbeat quota is off: 200 attempts at once exceed its burst,
// and the rate check answers 429 before the nonce is consulted (TestQuota*).
func TestIngestConcurrentReplay(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: map[string]string{"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE": "0"}})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	_, sent := h.Build(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-race"})})

	const n = 200
	statuses := make([]int, n)
	codes := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, err := http.NewRequest("POST", h.URL+ingest.HeartbeatRoute, bytes.NewReader(sent.Body))
			if err != nil {
				errs[i] = err
				return
			}
			protocol.Attach(req.Header, sent.KeyID, sent.Key, sent.TS, sent.Nonce, "POST", ingest.HeartbeatRoute, sent.Body)
			<-start
			r, err := daemontest.DoRequest(h.HTTP, req)
			statuses[i], codes[i], errs[i] = r.Status, r.Code, err
		}(i)
	}
	close(start)
	wg.Wait()
	accepted, replayed := 0, 0
	for i := range statuses {
		switch {
		case errs[i] != nil:
			t.Errorf("request %d: %v", i, errs[i])
		case statuses[i] == http.StatusAccepted:
			accepted++
		case statuses[i] == http.StatusConflict && codes[i] == "nonce_replayed":
			replayed++
		default:
			t.Errorf("request %d: %d %s", i, statuses[i], codes[i])
		}
	}
	if accepted != 1 || replayed != n-1 {
		t.Fatalf("%d accepted and %d nonce_replayed of %d identical requests; want 1 and %d", accepted, replayed, n, n-1)
	}
	if got := h.HeartbeatRows(); got != 1 {
		t.Fatalf("%d heartbeat rows, want 1", got)
	}
	if got := h.NonceRows(); got != 1 {
		t.Fatalf("%d nonce rows, want 1", got)
	}
}

// TestIngestRotationOverlap: after a rotate the old key keeps verifying
// (rotating) next to the new one; after revoking it, it is 401 at once and
// stays so across a restart, while the new key works.
func TestIngestRotationOverlap(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	old := h.Issue("demo-harbor")
	hb := func(k daemontest.Key) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-rot"})})
	}
	expect := func(what string, r daemontest.Response, status int, code string) {
		t.Helper()
		if r.Status != status || r.Code != code {
			t.Fatalf("%s: %s, want %d %s", what, r, status, code)
		}
	}
	expect("old key before rotate", hb(old), 202, "")

	fresh, rotated := h.Rotate("demo-harbor")
	if fresh.ID == old.ID || fresh.Material == old.Material {
		t.Fatal("rotate returned the old key")
	}
	if len(rotated) != 1 || rotated[0] != old.ID {
		t.Fatalf("rotatedKeyIds %v, want [%s]", rotated, old.ID)
	}
	expect("old key while rotating", hb(old), 202, "")
	expect("new key", hb(fresh), 202, "")
	if keys := daemontest.FleetEnv(t, h.Fleet(), "demo-harbor").Keys; keys["active"] != 1 || keys["rotating"] != 1 || keys["revoked"] != 0 {
		t.Fatalf("fleet key counts after rotate: %v", keys)
	}

	// The rotating key also survives a restart (opened from its envelope).
	h.Restart()
	expect("old key while rotating, after restart", hb(old), 202, "")

	h.Revoke(old.ID)
	expect("old key after revoke", hb(old), 401, "key_revoked")
	expect("new key after revoke", hb(fresh), 202, "")
	h.Restart()
	expect("old key after revoke and restart", hb(old), 401, "key_revoked")
	expect("new key after restart", hb(fresh), 202, "")
	if keys := daemontest.FleetEnv(t, h.Fleet(), "demo-harbor").Keys; keys["active"] != 1 || keys["rotating"] != 0 || keys["revoked"] != 1 {
		t.Fatalf("fleet key counts after revoke: %v", keys)
	}
	// A second rotate rotates only the active key; revoked stays revoked.
	newer, rotated := h.Rotate("demo-harbor")
	if len(rotated) != 1 || rotated[0] != fresh.ID {
		t.Fatalf("second rotate rotated %v, want [%s]", rotated, fresh.ID)
	}
	expect("previous key, rotating", hb(fresh), 202, "")
	expect("newest key", hb(newer), 202, "")
	expect("revoked key stays revoked", hb(old), 401, "key_revoked")
	if n := h.HeartbeatRows(); n != 8 {
		t.Fatalf("%d heartbeat rows, want 8 (one per accepted request)", n)
	}
}

// TestIngestHeartbeatSemantics: the first heartbeat creates the deployment
// (active) under the key's environment; every heartbeat persists the
// absolute idle deadline (lastActivityAt + limitMinutes) and, when sent, the
// session expiry; the fleet shows them; the 202 body carries
// accepted/idleDeadlineAt/serverTime.
func TestIngestHeartbeatSemantics(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	h.CreateEnv("other-env")
	k := h.Issue("demo-harbor")
	now := h.Clock.Now()
	lastAct := now.Add(-7*time.Minute - 123*time.Millisecond)
	session := now.Add(2 * time.Hour)
	deadline := lastAct.Add(45 * time.Minute)

	resp := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{
		Env: "demo-harbor", Deployment: "dep-sem", DropletID: 987654, Region: "nyc3", Size: "g-2vcpu-8gb",
		LimitMinutes: 45, LastActivityAt: lastAct, SessionExpiresAt: &session, CIActive: true, IdleChecks: 7, AgentVersion: "agent/2.1",
	})})
	if resp.Status != http.StatusAccepted {
		t.Fatalf("first heartbeat: %s", resp)
	}
	var acc map[string]any
	if err := json.Unmarshal(resp.Body, &acc); err != nil {
		t.Fatal(err)
	}
	// No session policy: the expiry is the one sent, not clamped (no
	// sessionExpiresAtClamped member).
	if len(acc) != 4 || acc["accepted"] != true {
		t.Fatalf("202 body %s: want exactly accepted/idleDeadlineAt/sessionExpiresAt/serverTime", resp.Body)
	}
	for field, want := range map[string]time.Time{"idleDeadlineAt": deadline, "sessionExpiresAt": session, "serverTime": now} {
		s, _ := acc[field].(string)
		got, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !got.Equal(want.Truncate(time.Millisecond)) {
			t.Errorf("%s = %q, want %s", field, s, want.Truncate(time.Millisecond).Format(time.RFC3339Nano))
		}
	}

	type depRow struct {
		env, status, region, size, agent string
		droplet, launched, idle, session int64
		last, ci                         int64
	}
	readDep := func() depRow {
		t.Helper()
		var d depRow
		err := h.SQL().QueryRow(`SELECT e.slug, d.status, d.region, d.size, d.agent_version, d.droplet_id, d.launched_at,
			d.idle_deadline_at, d.session_expires_at, d.last_heartbeat_at, d.ci_active
			FROM deployments d JOIN environments e ON e.id = d.environment_id WHERE d.id = 'dep-sem'`).
			Scan(&d.env, &d.status, &d.region, &d.size, &d.agent, &d.droplet, &d.launched, &d.idle, &d.session, &d.last, &d.ci)
		if err != nil {
			t.Fatalf("read deployment: %v", err)
		}
		return d
	}
	d := readDep()
	want := depRow{env: "demo-harbor", status: "active", region: "nyc3", size: "g-2vcpu-8gb", agent: "agent/2.1",
		droplet: 987654, launched: now.UnixMilli(), idle: deadline.UnixMilli(), session: session.UnixMilli(), last: now.UnixMilli(), ci: 1}
	if d != want {
		t.Fatalf("deployment row\n got %+v\nwant %+v", d, want)
	}
	var hbKey string
	var hbIdle, hbLimit, hbChecks int64
	if err := h.SQL().QueryRow(`SELECT key_id, idle_deadline_at, limit_minutes, idle_checks FROM heartbeats WHERE deployment_id = 'dep-sem'`).
		Scan(&hbKey, &hbIdle, &hbLimit, &hbChecks); err != nil {
		t.Fatal(err)
	}
	if hbKey != k.ID || hbIdle != deadline.UnixMilli() || hbLimit != 45 || hbChecks != 7 {
		t.Fatalf("heartbeat row: key %s idle %d limit %d checks %d", hbKey, hbIdle, hbLimit, hbChecks)
	}

	// The fleet shows the deployment with its deadlines.
	fe := daemontest.FleetEnv(t, h.Fleet(), "demo-harbor")
	if len(fe.Deployments) != 1 {
		t.Fatalf("fleet deployments %+v", fe.Deployments)
	}
	fd := fe.Deployments[0]
	if fd.ID != "dep-sem" || fd.Status != "active" || fd.DropletID != 987654 || !fd.CIActive ||
		!fd.IdleDeadlineAt.Equal(deadline.Truncate(time.Millisecond)) || !fd.SessionExpiresAt.Equal(session) ||
		!fd.LastHeartbeatAt.Equal(now) || fe.Keys["active"] != 1 {
		t.Fatalf("fleet entry %+v (keys %v)", fd, fe.Keys)
	}
	if len(daemontest.FleetEnv(t, h.Fleet(), "other-env").Deployments) != 0 {
		t.Fatal("deployment listed under the wrong environment")
	}

	// A later heartbeat without sessionExpiresAt moves the idle deadline and
	// the last heartbeat, keeps the session expiry and the launch time.
	h.Clock.Advance(time.Minute)
	later := h.Clock.Now()
	lastAct2 := later.Add(-10 * time.Second)
	resp = h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{
		Env: "demo-harbor", Deployment: "dep-sem", LimitMinutes: 20, LastActivityAt: lastAct2, AgentVersion: "agent/2.1",
	})})
	if resp.Status != http.StatusAccepted {
		t.Fatalf("second heartbeat: %s", resp)
	}
	d = readDep()
	want.idle, want.last, want.ci = lastAct2.Add(20*time.Minute).UnixMilli(), later.UnixMilli(), 0
	if d != want {
		t.Fatalf("deployment row after the second heartbeat\n got %+v\nwant %+v", d, want)
	}
	if n := h.HeartbeatRows(); n != 2 {
		t.Fatalf("%d heartbeat rows, want 2", n)
	}
	if n := h.Count(`SELECT count(*) FROM deployments`); n != 1 {
		t.Fatalf("%d deployments, want 1", n)
	}

	// A sunk environment comes back to active with a new deployment.
	h.Exec(`UPDATE environments SET status = 'sunk' WHERE slug = 'demo-harbor'`)
	resp = h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-sem-2"})})
	if resp.Status != http.StatusAccepted {
		t.Fatalf("heartbeat of a new deployment in a sunk environment: %s", resp)
	}
	if st := daemontest.FleetEnv(t, h.Fleet(), "demo-harbor").Status; st != "active" {
		t.Fatalf("environment status %q after a new deployment's first heartbeat, want active", st)
	}
}

// TestIngestSharedKey: the deprecated CHALUPA_INGEST_KEY path (no key id) is
// accepted only while configured, answers with a Deprecation header, is
// counted in /metrics, and cannot bind an environment that does not exist.
func TestIngestSharedKey(t *testing.T) {
	shared := "shared-ingest-" + strings.Repeat("k", 8) + fmt.Sprint(time.Now().UnixNano())
	h := daemontest.NewIngest(t, daemontest.IngestOptions{SharedKey: shared})
	h.CreateEnv("demo-harbor")
	sharedReq := func(env, dep string) daemontest.SignedReq {
		return daemontest.SignedReq{Key: []byte(shared), Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: env, Deployment: dep})}
	}
	metric := func() float64 {
		t.Helper()
		r := h.Do("GET", "/metrics", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("metrics: %s", r)
		}
		m := regexp.MustCompile(`(?m)^chalupa_ingest_shared_key_requests_total (\S+)$`).FindSubmatch(r.Body)
		if m == nil {
			t.Fatalf("chalupa_ingest_shared_key_requests_total missing from /metrics")
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := metric(); v != 0 {
		t.Fatalf("shared-key counter starts at %v", v)
	}

	r := h.Send(sharedReq("demo-harbor", "dep-shared"))
	if r.Status != http.StatusAccepted {
		t.Fatalf("shared-key heartbeat: %s", r)
	}
	if r.Header.Get("Deprecation") == "" {
		t.Fatal("shared-key answer without a Deprecation header")
	}
	if v := metric(); v != 1 {
		t.Fatalf("shared-key counter %v after one request, want 1", v)
	}
	if n := h.Count(`SELECT count(*) FROM heartbeats WHERE key_id = 'shared' AND deployment_id = 'dep-shared'`); n != 1 {
		t.Fatalf("%d shared-key heartbeat rows, want 1", n)
	}
	if env := h.Count(`SELECT count(*) FROM deployments d JOIN environments e ON e.id = d.environment_id WHERE d.id = 'dep-shared' AND e.slug = 'demo-harbor'`); env != 1 {
		t.Fatal("shared-key deployment not created under the environment it named")
	}

	// Naming an environment that does not exist: refused, nothing written.
	hb, n, deps, envs := h.HeartbeatRows(), h.NonceRows(), h.Count(`SELECT count(*) FROM deployments`), h.Count(`SELECT count(*) FROM environments`)
	r = h.Send(sharedReq("ghost-env", "dep-ghost"))
	if r.Status != http.StatusForbidden || r.Code != "environment_mismatch" {
		t.Fatalf("shared key naming a missing environment: %s", r)
	}
	if h.HeartbeatRows() != hb || h.NonceRows() != n || h.Count(`SELECT count(*) FROM deployments`) != deps || h.Count(`SELECT count(*) FROM environments`) != envs {
		t.Fatal("a refused shared-key request wrote rows")
	}

	// A wrong shared key is refused.
	bad := sharedReq("demo-harbor", "dep-shared")
	bad.Key = []byte(shared + "x")
	if r = h.Send(bad); r.Status != 401 || r.Code != "bad_signature" {
		t.Fatalf("wrong shared key: %s", r)
	}
	// The shared path has its own nonce partition: the same nonce is
	// accepted once there and once under a per-environment key.
	k := h.Issue("demo-harbor")
	nonce := protocol.NewNonce()
	s1 := sharedReq("demo-harbor", "dep-shared")
	s1.Nonce = nonce
	if r = h.Send(s1); r.Status != 202 {
		t.Fatalf("shared, fresh nonce: %s", r)
	}
	if r = h.Send(s1); r.Status != 409 || r.Code != "nonce_replayed" {
		t.Fatalf("shared, replayed nonce: %s", r)
	}
	if r = h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Nonce: nonce, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-shared"})}); r.Status != 202 {
		t.Fatalf("same nonce under a per-environment key: %s", r)
	}
	if v := metric(); v < 5 {
		t.Fatalf("shared-key counter %v, want every shared-path request counted (5)", v)
	}

	// Without CHALUPA_INGEST_KEY the same request is 401.
	h2 := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h2.CreateEnv("demo-harbor")
	r = h2.Send(daemontest.SignedReq{Key: []byte(shared), Body: h2.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-shared"})})
	if r.Status != 401 || r.Code != "missing_headers" {
		t.Fatalf("shared-key request with no shared key configured: %s", r)
	}
	if r.Header.Get("Deprecation") != "" || h2.HeartbeatRows() != 0 || h2.NonceRows() != 0 {
		t.Fatal("refused shared-key request has a Deprecation header or wrote rows")
	}
}

// TestIngestTamperedAndMovedEnvelopes: an envelope swapped onto another row
// (the key id is its additional data) or with one byte changed does not
// open, so requests signed with those keys are never accepted; other keys
// keep working.
func TestIngestTamperedAndMovedEnvelopes(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k1, k2, k3, k4 := h.Issue("demo-harbor"), h.Issue("demo-harbor"), h.Issue("demo-harbor"), h.Issue("demo-harbor")
	send := func(k daemontest.Key) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-env"})})
	}
	for _, k := range []daemontest.Key{k1, k2, k3, k4} {
		if r := send(k); r.Status != 202 {
			t.Fatalf("%s before tampering: %s", k.ID, r)
		}
	}
	// Swap k1's and k2's envelopes; flip one ciphertext byte of k3's.
	envelopeOf := func(id string) []byte {
		var env []byte
		if err := h.SQL().QueryRow(`SELECT envelope FROM ingest_keys WHERE key_id = ?`, id).Scan(&env); err != nil {
			t.Fatal(err)
		}
		return env
	}
	e1, e2 := envelopeOf(k1.ID), envelopeOf(k2.ID)
	h.Exec(`UPDATE ingest_keys SET envelope = ? WHERE key_id = ?`, e2, k1.ID)
	h.Exec(`UPDATE ingest_keys SET envelope = ? WHERE key_id = ?`, e1, k2.ID)
	env := envelopeOf(k3.ID)
	env[len(env)-20] ^= 0x01
	h.Exec(`UPDATE ingest_keys SET envelope = ? WHERE key_id = ?`, env, k3.ID)
	h.Restart() // a fresh keyring: material comes from the envelopes

	before := h.HeartbeatRows()
	for _, k := range []daemontest.Key{k1, k2, k3} {
		r := send(k)
		if r.Status/100 == 2 {
			t.Fatalf("%s with a moved or tampered envelope was accepted: %s", k.ID, r)
		}
		if r.Status != 500 || r.Code != "internal" || strings.Contains(strings.ToLower(r.Message), "envelope") {
			t.Errorf("%s: %s, want a redacted 500 internal", k.ID, r)
		}
		// Signing with the other row's material does not help either.
		other := k2
		if k.ID == k2.ID {
			other = k1
		}
		if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: other.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-env"})}); r.Status/100 == 2 {
			t.Fatalf("%s signed with the material of the row its envelope came from was accepted", k.ID)
		}
	}
	if r := send(k4); r.Status != 202 {
		t.Fatalf("untouched key after tampering with others: %s", r)
	}
	if got := h.HeartbeatRows(); got != before+1 {
		t.Fatalf("heartbeat rows %d -> %d, want +1 (only the untouched key)", before, got)
	}
	if !strings.Contains(string(h.Logs.Bytes()), "ingest verification fault") {
		t.Error("the envelope failure was not logged server-side")
	}
}
