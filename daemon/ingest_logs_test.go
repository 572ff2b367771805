package daemon_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/protocol"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// logsHarness is an in-process daemon whose log broker stores into a
// versitygw bucket, with one environment, key and deployment.
type logsHarness struct {
	*ingestHarness
	gw    *proctest.S3
	store *logs.S3 // the test's own view of the bucket
	key   testKey
	env   string
	dep   string
}

func newLogsHarness(t *testing.T) *logsHarness { return newLogsHarnessEnv(t, nil) }

// newLogsHarnessEnv is newLogsHarness with more daemon variables
// (CHALUPA_QUOTA_*).
func newLogsHarnessEnv(t *testing.T, extra map[string]string) *logsHarness {
	t.Helper()
	gw := proctest.StartVersityGW(t)
	url := "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1"
	env := map[string]string{"CHALUPA_LOGS_URL": url, "CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey}
	for k, v := range extra {
		env[k] = v
	}
	h := newIngestHarness(t, harnessOptions{Env: env})
	loc, err := logs.ParseLocation(url)
	if err != nil {
		t.Fatal(err)
	}
	lh := &logsHarness{ingestHarness: h, gw: gw, store: logs.NewS3(loc, gw.AccessKey, gw.SecretKey, nil), env: "log-env", dep: "dep-1"}
	h.createEnv(lh.env)
	lh.key = h.issue(lh.env)
	if r := lh.sendTo(heartbeatPath, h.heartbeat(hbOpts{Env: lh.env, Deployment: lh.dep})); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	return lh
}

func (h *logsHarness) sendTo(path string, body []byte) apiResponse {
	h.t.Helper()
	return h.send(signedReq{KeyID: h.key.ID, Key: h.key.Raw, Body: body, Path: path})
}

func (h *logsHarness) post(path string, v any) apiResponse {
	h.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.sendTo(path, b)
}

func (h *logsHarness) open(dep, session, service string) apiResponse {
	return h.post("/api/ingest/logs/sessions", protocol.OpenV1{EnvironmentSlug: h.env, DeploymentID: dep, SessionID: session, Service: service})
}

func chunkBody(env, dep, session string, seq int64, body []byte) protocol.ChunkV1 {
	sum := sha256.Sum256(body)
	return protocol.ChunkV1{EnvironmentSlug: env, DeploymentID: dep, SessionID: session, Seq: seq, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
}

// plan plans body as seq of session and returns the answer and its grant.
func (h *logsHarness) plan(session string, seq int64, body []byte) (apiResponse, protocol.LogChunkPlanned) {
	h.t.Helper()
	r := h.post("/api/ingest/logs/plan", chunkBody(h.env, h.dep, session, seq, body))
	var p protocol.LogChunkPlanned
	if r.Status == http.StatusAccepted {
		if err := json.Unmarshal(r.Body, &p); err != nil {
			h.t.Fatal(err)
		}
	}
	return r, p
}

func (h *logsHarness) commit(session string, seq int64, body []byte) apiResponse {
	return h.post("/api/ingest/logs/commit", chunkBody(h.env, h.dep, session, seq, body))
}

// put sends body with the grant, as the agent does.
func put(t *testing.T, up *protocol.LogUpload, body []byte) int {
	t.Helper()
	if up == nil {
		t.Fatal("no upload grant")
	}
	req, err := http.NewRequest(up.Method, up.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// logRows counts everything a log request can write, nonces included.
func (h *logsHarness) logRows() string {
	h.t.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT count(*) FROM log_sessions`, `SELECT count(*) FROM log_chunks`,
		`SELECT count(*) FROM log_chunks WHERE state = 'committed'`, `SELECT coalesce(sum(next_seq), 0) FROM log_sessions`,
		`SELECT count(*) FROM log_sessions WHERE finished_at IS NOT NULL`,
		`SELECT coalesce(sum(log_chunks), 0) FROM deployments`, `SELECT coalesce(sum(log_bytes), 0) FROM deployments`,
		`SELECT coalesce(sum(grant_expires_at), 0) FROM log_chunks`, `SELECT count(*) FROM nonces`,
	} {
		parts = append(parts, fmt.Sprint(h.count(q)))
	}
	return strings.Join(parts, "/")
}

// refused asserts r is status/code and that nothing was written.
func (h *logsHarness) refused(t *testing.T, what string, r apiResponse, status int, code, before string) {
	t.Helper()
	if r.Status != status || r.Code != code {
		t.Fatalf("%s: %s, want %d %s", what, r, status, code)
	}
	if after := h.logRows(); after != before {
		t.Fatalf("%s wrote: %s -> %s", what, before, after)
	}
}

// TestIngestLogsNotConfigured: without CHALUPA_LOGS_URL every log route
// answers 503 logs_not_configured and writes nothing.
func TestIngestLogsNotConfigured(t *testing.T) {
	h := newIngestHarness(t, harnessOptions{})
	h.createEnv("nolog-env")
	k := h.issue("nolog-env")
	before := h.nonceRows()
	for _, p := range []string{"sessions", "plan", "commit", "finish"} {
		r := h.send(signedReq{KeyID: k.ID, Key: k.Raw, Body: []byte(`{}`), Path: "/api/ingest/logs/" + p})
		if r.Status != http.StatusServiceUnavailable || r.Code != "logs_not_configured" {
			t.Fatalf("%s: %s", p, r)
		}
	}
	if h.nonceRows() != before {
		t.Fatal("a refused log request stored its nonce")
	}
}

// TestIngestLogsProtocol drives one session through open, plan, upload,
// commit and finish against versitygw, with every exact repeat answered
// without a write.
func TestIngestLogsProtocol(t *testing.T) {
	h := newLogsHarness(t)
	ctx := context.Background()
	chunk := bytes.Repeat([]byte("Dec 01 agent: tick\n"), 400)

	if r := h.open(h.dep, "s1", "chalupa-agent.service"); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"replayed":false`) {
		t.Fatalf("open: %s", r)
	}
	before := h.logRows()
	if r := h.open(h.dep, "s1", "chalupa-agent.service"); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"replayed":true`) {
		t.Fatalf("open replay: %s", r)
	}
	if after := h.logRows(); after != before {
		t.Fatalf("open replay wrote: %s -> %s", before, after)
	}
	h.refused(t, "open of the session for another service", h.open(h.dep, "s1", "cloud-init.service"), http.StatusConflict, "log_session_conflict", before)

	r, p := h.plan("s1", 0, chunk)
	if r.Status != http.StatusAccepted || p.Renewed || p.Committed || p.Upload == nil {
		t.Fatalf("plan: %s", r)
	}
	if got := p.Upload.ExpiresAt.Sub(h.clock.Now()); got != logs.DefaultGrantTTL {
		t.Fatalf("grant lives %v, want %v", got, logs.DefaultGrantTTL)
	}
	// The plan is persisted before the grant is answered.
	if n := h.count(`SELECT count(*) FROM log_chunks WHERE seq = 0 AND state = 'planned' AND size_bytes = ?`, len(chunk)); n != 1 {
		t.Fatalf("planned rows: %d", n)
	}
	before = h.logRows()
	h.refused(t, "commit before the upload", h.commit("s1", 0, chunk), http.StatusConflict, "object_missing", before)
	if code := put(t, p.Upload, chunk); code != http.StatusOK {
		t.Fatalf("PUT with the grant: %d", code)
	}
	other := bytes.ToUpper(chunk)
	h.refused(t, "commit describing another body", h.commit("s1", 0, other), http.StatusConflict, "chunk_conflict", before)
	if r := h.commit("s1", 0, chunk); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":false`) {
		t.Fatalf("commit: %s", r)
	}
	before = h.logRows()
	if r := h.commit("s1", 0, chunk); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":true`) {
		t.Fatalf("commit repeat: %s", r)
	}
	if r, p := h.plan("s1", 0, chunk); r.Status != http.StatusAccepted || !p.Committed || p.Upload != nil {
		t.Fatalf("plan of a committed chunk: %s", r)
	}
	if after := h.logRows(); after != before {
		t.Fatalf("repeats wrote: %s -> %s", before, after)
	}
	if o, err := h.store.Head(ctx, h.store.Location().Key(fmt.Sprintf("e1/%s/s1/%010d.chunk", h.dep, 0))); err != nil || o.Size != int64(len(chunk)) {
		t.Fatalf("stored object: %+v %v", o, err)
	}

	fin := protocol.FinishV1{EnvironmentSlug: h.env, DeploymentID: h.dep, SessionID: "s1", Final: protocol.FinalV1{Chunks: 1, Bytes: int64(len(chunk)), Cursor: "s=abc", Reason: "shutdown"}}
	if r := h.post("/api/ingest/logs/finish", fin); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":false`) {
		t.Fatalf("finish: %s", r)
	}
	before = h.logRows()
	if r := h.post("/api/ingest/logs/finish", fin); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":true`) {
		t.Fatalf("finish repeat: %s", r)
	}
	fin.Final.Reason = "other"
	h.refused(t, "finish with another payload", h.post("/api/ingest/logs/finish", fin), http.StatusConflict, "final_conflict", before)
	h.refused(t, "plan after finish", func() apiResponse { r, _ := h.plan("s1", 1, chunk); return r }(), http.StatusConflict, "log_session_finished", before)
	var stored []byte
	if err := h.sqlConn().QueryRow(`SELECT final_payload FROM log_sessions WHERE session_id = 's1'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := `{"chunks":1,"bytes":7600,"cursor":"s=abc","reason":"shutdown"}`; string(stored) != want {
		t.Fatalf("final payload %s, want %s", stored, want)
	}
}

// TestIngestLogsBoundaries: every bound at its exact boundary — the last
// admitted value accepted, the next refused with nothing written.
func TestIngestLogsBoundaries(t *testing.T) {
	h := newLogsHarness(t)
	small := []byte("x")

	t.Run("allowlist", func(t *testing.T) {
		before := h.logRows()
		h.refused(t, "service off the default allowlist", h.open(h.dep, "a1", "nginx.service"), http.StatusUnprocessableEntity, "service_not_allowed", before)
		for _, svc := range logs.DefaultServices {
			if r := h.open(h.dep, "allow-"+svc, svc); r.Status != http.StatusAccepted {
				t.Fatalf("default service %s: %s", svc, r)
			}
		}
		h.exec(`UPDATE environments SET log_services = 'nginx.service' WHERE slug = ?`, h.env)
		if r := h.open(h.dep, "a1", "nginx.service"); r.Status != http.StatusAccepted {
			t.Fatalf("service on the environment's own list: %s", r)
		}
		before = h.logRows()
		h.refused(t, "default service off the environment's own list", h.open(h.dep, "a2", "chalupa-agent.service"), http.StatusUnprocessableEntity, "service_not_allowed", before)
		h.exec(`UPDATE environments SET log_services = NULL`)
		h.exec(`UPDATE log_sessions SET finished_at = 1`)
	})
	t.Run("eight open sessions", func(t *testing.T) {
		for i := range logs.DefaultOpenSessions {
			if r := h.open(h.dep, fmt.Sprintf("q%d", i), "chalupa-agent.service"); r.Status != http.StatusAccepted {
				t.Fatalf("session %d: %s", i+1, r)
			}
		}
		before := h.logRows()
		h.refused(t, "ninth open session", h.open(h.dep, "q8", "chalupa-agent.service"), http.StatusTooManyRequests, "log_session_quota", before)
		h.exec(`UPDATE log_sessions SET finished_at = 1 WHERE session_id != 'q0'`)
		if r := h.open(h.dep, "q8", "chalupa-agent.service"); r.Status != http.StatusAccepted {
			t.Fatalf("a finished session frees its place: %s", r)
		}
		h.exec(`UPDATE log_sessions SET finished_at = 1 WHERE session_id = 'q8'`)
	})
	t.Run("chunk size", func(t *testing.T) {
		max := bytes.Repeat([]byte("y"), protocol.DefaultMaxChunkBytes)
		if r, _ := h.plan("q0", 0, max); r.Status != http.StatusAccepted {
			t.Fatalf("chunk of exactly 1 MiB: %s", r)
		}
		before := h.logRows()
		h.refused(t, "chunk of 1 MiB + 1", func() apiResponse { r, _ := h.plan("q0", 1, append(max, 'y')); return r }(), http.StatusUnprocessableEntity, "chunk_too_large", before)
	})
	t.Run("sequence", func(t *testing.T) {
		before := h.logRows()
		h.refused(t, "seq past the next", func() apiResponse { r, _ := h.plan("q0", 2, small); return r }(), http.StatusConflict, "sequence_gap", before)
		h.refused(t, "another body for a planned seq", func() apiResponse { r, _ := h.plan("q0", 0, small); return r }(), http.StatusConflict, "chunk_conflict", before)
		h.refused(t, "unknown session", func() apiResponse { r, _ := h.plan("nope", 0, small); return r }(), http.StatusNotFound, "log_session_not_found", before)
	})
	t.Run("256 chunks", func(t *testing.T) {
		h.exec(`UPDATE deployments SET log_chunks = ? WHERE id = ?`, logs.DefaultDeploymentChunks-1, h.dep)
		if r, _ := h.plan("q0", 1, small); r.Status != http.StatusAccepted {
			t.Fatalf("256th chunk: %s", r)
		}
		before := h.logRows()
		h.refused(t, "257th chunk", func() apiResponse { r, _ := h.plan("q0", 2, small); return r }(), http.StatusTooManyRequests, "log_chunk_quota", before)
		h.exec(`UPDATE deployments SET log_chunks = 0 WHERE id = ?`, h.dep)
	})
	t.Run("bytes", func(t *testing.T) {
		h.exec(`UPDATE deployments SET log_bytes = ? WHERE id = ?`, protocol.DefaultDeploymentBytes-1, h.dep)
		if r, _ := h.plan("q0", 2, small); r.Status != http.StatusAccepted {
			t.Fatalf("chunk filling the byte quota exactly: %s", r)
		}
		before := h.logRows()
		h.refused(t, "one byte past the byte quota", func() apiResponse { r, _ := h.plan("q0", 3, small); return r }(), http.StatusTooManyRequests, "log_byte_quota", before)
		h.exec(`UPDATE deployments SET log_bytes = 0 WHERE id = ?`, h.dep)
	})
	t.Run("expiry", func(t *testing.T) {
		h.clock.Advance(logs.DefaultSessionTTL - time.Second)
		if r, _ := h.plan("q0", 3, small); r.Status != http.StatusAccepted {
			t.Fatalf("plan a second before expiry: %s", r)
		}
		h.clock.Advance(time.Second)
		before := h.logRows()
		h.refused(t, "plan at expiry", func() apiResponse { r, _ := h.plan("q0", 4, small); return r }(), http.StatusConflict, "log_session_expired", before)
		// A plan made before expiry is still renewed (the upload it
		// grants may be retried after a restart).
		if r, p := h.plan("q0", 3, small); r.Status != http.StatusAccepted || !p.Renewed {
			t.Fatalf("renewal after expiry: %s", r)
		}
	})
	t.Run("ended deployment", func(t *testing.T) {
		h.exec(`UPDATE deployments SET status = 'ended', ended_at = 1 WHERE id = ?`, h.dep)
		before := h.logRows()
		h.refused(t, "open for an ended deployment", h.open(h.dep, "late", "chalupa-agent.service"), http.StatusConflict, "deployment_ended", before)
		h.refused(t, "open for an unknown deployment", h.open("dep-unknown", "late", "chalupa-agent.service"), http.StatusNotFound, "deployment_not_found", before)
	})
	t.Run("quota refusals counted", func(t *testing.T) {
		r := h.do(http.MethodGet, "/metrics", http.Header{"Authorization": {"Bearer " + h.readyToken()}}, nil)
		for _, want := range []string{`chalupa_ingest_quota_refused_total{quota="log_sessions"} 1`, `chalupa_ingest_quota_refused_total{quota="log_chunks"} 1`,
			`chalupa_ingest_quota_refused_total{quota="log_bytes"} 1`, `chalupa_log_grants_total 5`} {
			if !strings.Contains(string(r.Body), want) {
				t.Errorf("metrics lack %s:\n%s", want, grepLines(r.Body, "chalupa_log"))
			}
		}
	})
}

// TestIngestLogsCommitVerifies: commit reads the stored object back and
// hashes it; an object of another size, or of the planned size with other
// bytes (PUT with the chunk's own grant: not every store enforces the
// grant's checksum), is refused 422 object_mismatch with nothing written,
// the object is deleted, and the plan stays so the chunk can be uploaded
// again under a renewed grant for the same key.
func TestIngestLogsCommitVerifies(t *testing.T) {
	h := newLogsHarness(t)
	ctx := context.Background()
	chunk := []byte("a planned chunk of logs\n")
	if r := h.open(h.dep, "v1", "chalupa-agent.service"); r.Status != http.StatusAccepted {
		t.Fatalf("open: %s", r)
	}
	for i, tc := range []struct {
		name string
		// upload puts other bytes at the planned key and returns them.
		upload func(t *testing.T, key string, grant *protocol.LogUpload) []byte
	}{
		{"another size, with the bucket's own credentials", func(t *testing.T, key string, _ *protocol.LogUpload) []byte {
			wrong := append([]byte("tampered "), chunk...)
			g, err := h.store.PresignPut(ctx, key, int64(len(wrong)), sha256.Sum256(wrong), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if code := put(t, &protocol.LogUpload{Method: g.Method, URL: g.URL, Headers: g.Headers}, wrong); code != http.StatusOK {
				t.Fatalf("tampered PUT: %d", code)
			}
			return wrong
		}},
		{"the planned size, other bytes, with the chunk's grant", func(t *testing.T, _ string, grant *protocol.LogUpload) []byte {
			wrong := bytes.ToUpper(chunk)
			if code := put(t, grant, wrong); code != http.StatusOK {
				t.Fatalf("versitygw refused other bytes under the grant (%d): it now enforces the checksum; say so in docs/operations.md, \"Logs\"", code)
			}
			return wrong
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := int64(i)
			r, p := h.plan("v1", seq, chunk)
			if r.Status != http.StatusAccepted {
				t.Fatalf("plan: %s", r)
			}
			u, _ := url.Parse(p.Upload.URL)
			key := strings.TrimPrefix(u.Path, "/"+h.gw.Bucket+"/")
			wrong := tc.upload(t, key, p.Upload)
			if o, err := h.store.Head(ctx, key); err != nil || o.Size != int64(len(wrong)) {
				t.Fatalf("the other bytes are not stored: %+v %v", o, err)
			}
			before := h.logRows()
			h.refused(t, "commit of other bytes", h.commit("v1", seq, chunk), http.StatusUnprocessableEntity, "object_mismatch", before)
			if _, err := h.store.Head(ctx, key); !errors.Is(err, logs.ErrObjectMissing) {
				t.Fatalf("mismatching object not deleted: %v", err)
			}
			// Planned again: the grant is renewed for the same key.
			r, p2 := h.plan("v1", seq, chunk)
			if u2, _ := url.Parse(p2.Upload.URL); r.Status != http.StatusAccepted || !p2.Renewed || u2.Path != u.Path {
				t.Fatalf("renewal: %s", r)
			}
			if code := put(t, p2.Upload, chunk); code != http.StatusOK {
				t.Fatalf("PUT: %d", code)
			}
			if r := h.commit("v1", seq, chunk); r.Status != http.StatusAccepted {
				t.Fatalf("commit: %s", r)
			}
		})
	}
}

// TestIngestLogsPlanSurvivesRestart: the plan is durable before its grant
// is answered — a daemon restarted between plan and PUT renews the same
// plan for the same object key, and the chunk commits once.
func TestIngestLogsPlanSurvivesRestart(t *testing.T) {
	h := newLogsHarness(t)
	chunk := []byte("before the restart\n")
	if r := h.open(h.dep, "r1", "cloud-init.service"); r.Status != http.StatusAccepted {
		t.Fatalf("open: %s", r)
	}
	_, p := h.plan("r1", 0, chunk)
	h.restart()
	h.clock.Advance(time.Minute)
	r, p2 := h.plan("r1", 0, chunk)
	if r.Status != http.StatusAccepted || !p2.Renewed {
		t.Fatalf("plan after restart: %s", r)
	}
	u1, _ := url.Parse(p.Upload.URL)
	u2, _ := url.Parse(p2.Upload.URL)
	if u1.Path != u2.Path || !p2.Upload.ExpiresAt.After(p.Upload.ExpiresAt) {
		t.Fatalf("renewed grant: %s until %v, first %s until %v", u2.Path, p2.Upload.ExpiresAt, u1.Path, p.Upload.ExpiresAt)
	}
	if code := put(t, p2.Upload, chunk); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	if r := h.commit("r1", 0, chunk); r.Status != http.StatusAccepted {
		t.Fatalf("commit: %s", r)
	}
	if n := h.count(`SELECT count(*) FROM log_chunks WHERE state = 'committed'`); n != 1 {
		t.Fatalf("committed chunks: %d", n)
	}
}

// grepLines returns the lines of b containing s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// shipChunk plans, uploads and commits body as seq of session.
func (h *logsHarness) shipChunk(t *testing.T, session string, seq int64, body []byte) {
	t.Helper()
	r, p := h.plan(session, seq, body)
	if r.Status != http.StatusAccepted {
		t.Fatalf("plan %s/%d: %s", session, seq, r)
	}
	if code := put(t, p.Upload, body); code != http.StatusOK {
		t.Fatalf("PUT %s/%d: %d", session, seq, code)
	}
	if r := h.commit(session, seq, body); r.Status != http.StatusAccepted {
		t.Fatalf("commit %s/%d: %s", session, seq, r)
	}
}

func httpGet(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAdminLogs: listing, download grants that expire, erase with its
// phrase and receipt, and retention — erase and retention remove objects
// and rows.
func TestAdminLogs(t *testing.T) {
	h := newLogsHarness(t)
	ctx := context.Background()
	c := h.client()
	one, two := []byte("first chunk\n"), []byte("second chunk\n")
	if r := h.open(h.dep, "m1", "chalupa-agent.service"); r.Status != http.StatusAccepted {
		t.Fatalf("open: %s", r)
	}
	h.shipChunk(t, "m1", 0, one)
	h.shipChunk(t, "m1", 1, two)
	if r, _ := h.plan("m1", 2, []byte("planned only")); r.Status != http.StatusAccepted {
		t.Fatalf("plan: %s", r)
	}

	t.Run("list", func(t *testing.T) {
		l, err := c.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: h.env, DeploymentID: h.dep, Service: "chalupa-agent.service"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Sessions) != 1 || len(l.Sessions[0].Chunks) != 3 || l.ChunksPlanned != 3 || l.MaxChunks != 256 {
			t.Fatalf("listing: %+v", l)
		}
		if ch := l.Sessions[0].Chunks; ch[0].State != "committed" || ch[2].State != "planned" || ch[1].SizeBytes != int64(len(two)) {
			t.Fatalf("chunks: %+v", ch)
		}
		other, err := c.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: h.env, DeploymentID: h.dep, Service: "cloud-init.service"})
		if err != nil || len(other.Sessions) != 0 {
			t.Fatalf("narrowed by service: %+v %v", other, err)
		}
		_, err = c.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: h.env, DeploymentID: "dep-none"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			t.Fatalf("unknown deployment: %v", err)
		}
	})
	t.Run("chunk metadata", func(t *testing.T) {
		for _, tc := range []struct {
			seq, state string
			size       int
		}{{"1", "committed", len(two)}, {"2", "planned", len("planned only")}} {
			ch, err := c.GetLogChunk(ctx, adminapi.LogChunkRequest{EnvironmentSlug: h.env, DeploymentID: h.dep, Session: "m1", Seq: tc.seq})
			if err != nil {
				t.Fatal(err)
			}
			if ch.State != tc.state || ch.SizeBytes != int64(tc.size) || ch.Service != "chalupa-agent.service" || ch.SessionFinished ||
				(ch.CommittedAt != nil) != (tc.state == "committed") || len(ch.SHA256) != 64 {
				t.Fatalf("chunk %s: %+v", tc.seq, ch)
			}
		}
		_, err := c.GetLogChunk(ctx, adminapi.LogChunkRequest{EnvironmentSlug: h.env, DeploymentID: h.dep, Session: "m1", Seq: "3"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Code != "log_chunk_not_found" {
			t.Fatalf("metadata of a chunk never planned: %v", err)
		}
	})
	t.Run("download grant", func(t *testing.T) {
		d, err := c.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: h.env, DeploymentID: h.dep, Session: "m1", Seq: "1"})
		if err != nil {
			t.Fatal(err)
		}
		if d.ExpiresAt.Sub(h.clock.Now()) > logs.MaxGrantTTL {
			t.Fatalf("grant lives past %v: %v", logs.MaxGrantTTL, d.ExpiresAt)
		}
		if code, b := httpGet(t, d.URL); code != http.StatusOK || !bytes.Equal(b, two) {
			t.Fatalf("GET with the grant: %d %q", code, b)
		}
		// A grant signed six minutes ago has expired: the store refuses it.
		h.clock.Advance(-6 * time.Minute)
		old, err := c.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: h.env, DeploymentID: h.dep, Session: "m1", Seq: "1"})
		h.clock.Advance(6 * time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := httpGet(t, old.URL); code != http.StatusForbidden {
			t.Fatalf("GET with an expired grant: %d, want 403", code)
		}
		_, err = c.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: h.env, DeploymentID: h.dep, Session: "m1", Seq: "2"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Code != "log_chunk_not_found" {
			t.Fatalf("grant for a planned chunk: %v", err)
		}
	})
	t.Run("retention", func(t *testing.T) {
		if r := h.open(h.dep, "old", "cloud-init.service"); r.Status != http.StatusAccepted {
			t.Fatalf("open: %s", r)
		}
		h.shipChunk(t, "old", 0, one)
		h.shipChunk(t, "old", 1, two)
		oldKey := h.store.Location().Key(fmt.Sprintf("e1/%s/old/%010d.chunk", h.dep, 0))
		h.exec(`UPDATE log_chunks SET planned_at = planned_at - ? WHERE session_row = (SELECT id FROM log_sessions WHERE session_id = 'old')`,
			(logs.DefaultRetention + time.Hour).Milliseconds())
		h.exec(`UPDATE log_sessions SET finished_at = 1 WHERE session_id = 'old'`)
		ret := &logs.Retention{DB: h.p.App.DB, Store: h.store, Clock: h.clock, Cap: 1}
		res, err := ret.Tick(ctx)
		if err != nil || res.Chunks != 1 || !res.Capped || res.Sessions != 0 {
			t.Fatalf("first tick (cap 1): %+v %v", res, err)
		}
		res, err = ret.Tick(ctx)
		if err != nil || res.Chunks != 1 || res.Capped || res.Sessions != 1 {
			t.Fatalf("second tick: %+v %v", res, err)
		}
		if _, err := h.store.Head(ctx, oldKey); !errors.Is(err, logs.ErrObjectMissing) {
			t.Fatalf("old object after retention: %v", err)
		}
		if n := h.count(`SELECT count(*) FROM log_chunks WHERE session_row NOT IN (SELECT id FROM log_sessions)`); n != 0 {
			t.Fatalf("orphan chunks: %d", n)
		}
		if n := h.count(`SELECT count(*) FROM log_chunks`); n != 3 {
			t.Fatalf("chunks of m1 left: %d, want 3", n)
		}
		if res, err := ret.Tick(ctx); err != nil || res != (logs.RetentionResult{}) {
			t.Fatalf("idle tick: %+v %v", res, err)
		}
	})
	t.Run("erase", func(t *testing.T) {
		before := h.logRows()
		_, err := c.EraseLogs(ctx, adminapi.EraseLogsRequest{EnvironmentSlug: h.env, Confirmation: "erase logs other"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Code != "confirmation_mismatch" || h.logRows() != before {
			t.Fatalf("wrong phrase: %v", err)
		}
		r, err := c.EraseLogs(ctx, adminapi.EraseLogsRequest{EnvironmentSlug: h.env, Confirmation: adminapi.EraseLogsPhrase(h.env)})
		if err != nil {
			t.Fatal(err)
		}
		if r.ChunksRemoved != 3 || r.SessionsRemoved != 1 || r.RemainingChunks != 0 || r.RemainingSessions != 0 || r.Resumed || r.ErasureID == "" {
			t.Fatalf("receipt: %+v", r)
		}
		if n := h.count(`SELECT count(*) FROM log_chunks`) + h.count(`SELECT count(*) FROM log_sessions`) +
			h.count(`SELECT log_chunks + log_bytes FROM deployments WHERE id = ?`, h.dep); n != 0 {
			t.Fatalf("rows or counters left: %d", n)
		}
		for seq := range 3 {
			if _, err := h.store.Head(ctx, h.store.Location().Key(fmt.Sprintf("e1/%s/m1/%010d.chunk", h.dep, seq))); !errors.Is(err, logs.ErrObjectMissing) {
				t.Fatalf("object %d after erase: %v", seq, err)
			}
		}
		if n := h.count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'logs-erased'`); n != 1 {
			t.Fatalf("logs-erased events after one erase: %d, want 1", n)
		}
		var id, msg string
		if err := h.sqlConn().QueryRow(`SELECT id, message FROM lifecycle_events WHERE kind = 'logs-erased'`).Scan(&id, &msg); err != nil ||
			id != r.ErasureID || msg != "logs erased: 1 sessions, 3 chunks (objects and rows)" {
			t.Fatalf("logs-erased event %q %q (%v), want id %s and the counts", id, msg, err, r.ErasureID)
		}
		again, err := c.EraseLogs(ctx, adminapi.EraseLogsRequest{EnvironmentSlug: h.env, Confirmation: adminapi.EraseLogsPhrase(h.env)})
		if err != nil || again.ChunksRemoved != 0 || again.SessionsRemoved != 0 {
			t.Fatalf("second erase: %+v %v", again, err)
		}
		if n := h.count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'logs-erased' AND id = ?`, again.ErasureID); n != 1 {
			t.Fatalf("the second erasure's event: %d rows, want 1", n)
		}
	})
}

// TestAdminSetLogServices: adminSetLogServices replaces the allowlist the
// broker checks at session open, --reset restores the default, and every
// refusal leaves the stored list as it was.
func TestAdminSetLogServices(t *testing.T) {
	h := newLogsHarness(t)
	ctx := context.Background()
	c := h.client()
	stored := func() string {
		var v sql.NullString
		if err := h.sqlConn().QueryRow(`SELECT log_services FROM environments WHERE slug = ?`, h.env).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if !v.Valid {
			return "<default>"
		}
		return v.String
	}

	t.Run("set", func(t *testing.T) {
		got, err := c.SetLogServices(ctx, adminapi.SetLogServicesRequest{EnvironmentSlug: h.env, Services: []string{"nginx.service", "app.log"}})
		if err != nil {
			t.Fatal(err)
		}
		if got.Default || strings.Join(got.Services, ",") != "nginx.service,app.log" || stored() != "nginx.service,app.log" {
			t.Fatalf("answer %+v, stored %q", got, stored())
		}
		if r := h.open(h.dep, "svc-1", "app.log"); r.Status != http.StatusAccepted {
			t.Fatalf("a service on the new list: %s", r)
		}
		before := h.logRows()
		h.refused(t, "a default service off the new list", h.open(h.dep, "svc-2", "chalupa-agent.service"), http.StatusUnprocessableEntity, "service_not_allowed", before)
	})
	t.Run("refusals write nothing", func(t *testing.T) {
		many := make([]string, adminapi.MaxLogServices+1)
		for i := range many {
			many[i] = fmt.Sprintf("s%d.service", i)
		}
		for _, tc := range []struct {
			name   string
			req    adminapi.SetLogServicesRequest
			status int
			code   string
		}{
			{"none", adminapi.SetLogServicesRequest{EnvironmentSlug: h.env}, http.StatusBadRequest, "invalid_services"},
			{"services with reset", adminapi.SetLogServicesRequest{EnvironmentSlug: h.env, Services: []string{"a"}, Reset: true}, http.StatusBadRequest, "invalid_services"},
			{"bad name", adminapi.SetLogServicesRequest{EnvironmentSlug: h.env, Services: []string{"a,b"}}, http.StatusBadRequest, "invalid_services"},
			{"twice", adminapi.SetLogServicesRequest{EnvironmentSlug: h.env, Services: []string{"a", "a"}}, http.StatusBadRequest, "invalid_services"},
			{"too many", adminapi.SetLogServicesRequest{EnvironmentSlug: h.env, Services: many}, http.StatusBadRequest, "invalid_services"},
			{"unknown environment", adminapi.SetLogServicesRequest{EnvironmentSlug: "no-such-env", Services: []string{"a"}}, http.StatusNotFound, "environment_not_found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := stored()
				_, err := c.SetLogServices(ctx, tc.req)
				var ae *adminapi.APIError
				if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
					t.Fatalf("got %v, want %d %s", err, tc.status, tc.code)
				}
				if after := stored(); after != before {
					t.Fatalf("a refusal changed the list: %q -> %q", before, after)
				}
			})
		}
	})
	t.Run("reset", func(t *testing.T) {
		got, err := c.SetLogServices(ctx, adminapi.SetLogServicesRequest{EnvironmentSlug: h.env, Reset: true})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Default || strings.Join(got.Services, ",") != strings.Join(logs.DefaultServices, ",") || stored() != "<default>" {
			t.Fatalf("answer %+v, stored %q", got, stored())
		}
		if r := h.open(h.dep, "svc-3", "chalupa-agent.service"); r.Status != http.StatusAccepted {
			t.Fatalf("a default service after reset: %s", r)
		}
	})
}
