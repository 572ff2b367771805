package ingest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestIngestLogsNotConfigured: without CHALUPA_LOGS_URL every log route
// answers 503 logs_not_configured and writes nothing.
func TestIngestLogsNotConfigured(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("nolog-env")
	k := h.Issue("nolog-env")
	before := h.NonceRows()
	for _, p := range []string{"sessions", "plan", "commit", "finish"} {
		r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: []byte(`{}`), Path: "/api/ingest/logs/" + p})
		if r.Status != http.StatusServiceUnavailable || r.Code != "logs_not_configured" {
			t.Fatalf("%s: %s", p, r)
		}
	}
	if h.NonceRows() != before {
		t.Fatal("a refused log request stored its nonce")
	}
}

// TestIngestLogsProtocol drives one session through open, plan, upload,
// commit and finish against versitygw, with every exact repeat answered
// without a write.
func TestIngestLogsProtocol(t *testing.T) {
	h := daemontest.NewIngestLogs(t)
	ctx := context.Background()
	chunk := bytes.Repeat([]byte("Dec 01 agent: tick\n"), 400)

	if r := h.OpenSession(h.Deployment, "s1", "chalupa-agent.service"); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"replayed":false`) {
		t.Fatalf("open: %s", r)
	}
	before := h.LogRows()
	if r := h.OpenSession(h.Deployment, "s1", "chalupa-agent.service"); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"replayed":true`) {
		t.Fatalf("open replay: %s", r)
	}
	if after := h.LogRows(); after != before {
		t.Fatalf("open replay wrote: %s -> %s", before, after)
	}
	h.Refused(t, "open of the session for another service", h.OpenSession(h.Deployment, "s1", "cloud-init.service"), http.StatusConflict, "log_session_conflict", before)

	r, p := h.PlanChunk("s1", 0, chunk)
	if r.Status != http.StatusAccepted || p.Renewed || p.Committed || p.Upload == nil {
		t.Fatalf("plan: %s", r)
	}
	if got := p.Upload.ExpiresAt.Sub(h.Clock.Now()); got != logs.DefaultGrantTTL {
		t.Fatalf("grant lives %v, want %v", got, logs.DefaultGrantTTL)
	}
	// The plan is persisted before the grant is answered.
	if n := h.Count(`SELECT count(*) FROM log_chunks WHERE seq = 0 AND state = 'planned' AND size_bytes = ?`, len(chunk)); n != 1 {
		t.Fatalf("planned rows: %d", n)
	}
	before = h.LogRows()
	h.Refused(t, "commit before the upload", h.CommitChunk("s1", 0, chunk), http.StatusConflict, "object_missing", before)
	if code := daemontest.PutChunk(t, p.Upload, chunk); code != http.StatusOK {
		t.Fatalf("PUT with the grant: %d", code)
	}
	other := bytes.ToUpper(chunk)
	h.Refused(t, "commit describing another body", h.CommitChunk("s1", 0, other), http.StatusConflict, "chunk_conflict", before)
	if r := h.CommitChunk("s1", 0, chunk); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":false`) {
		t.Fatalf("commit: %s", r)
	}
	before = h.LogRows()
	if r := h.CommitChunk("s1", 0, chunk); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":true`) {
		t.Fatalf("commit repeat: %s", r)
	}
	if r, p := h.PlanChunk("s1", 0, chunk); r.Status != http.StatusAccepted || !p.Committed || p.Upload != nil {
		t.Fatalf("plan of a committed chunk: %s", r)
	}
	if after := h.LogRows(); after != before {
		t.Fatalf("repeats wrote: %s -> %s", before, after)
	}
	if o, err := h.Store.Head(ctx, h.Store.Location().Key(fmt.Sprintf("e1/%s/s1/%010d.chunk", h.Deployment, 0))); err != nil || o.Size != int64(len(chunk)) {
		t.Fatalf("stored object: %+v %v", o, err)
	}

	fin := protocol.FinishV1{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, SessionID: "s1", Final: protocol.FinalV1{Chunks: 1, Bytes: int64(len(chunk)), Cursor: "s=abc", Reason: "shutdown"}}
	if r := h.Post("/api/ingest/logs/finish", fin); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":false`) {
		t.Fatalf("finish: %s", r)
	}
	before = h.LogRows()
	if r := h.Post("/api/ingest/logs/finish", fin); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":true`) {
		t.Fatalf("finish repeat: %s", r)
	}
	fin.Final.Reason = "other"
	h.Refused(t, "finish with another payload", h.Post("/api/ingest/logs/finish", fin), http.StatusConflict, "final_conflict", before)
	h.Refused(t, "plan after finish", func() daemontest.Response { r, _ := h.PlanChunk("s1", 1, chunk); return r }(), http.StatusConflict, "log_session_finished", before)
	var stored []byte
	if err := h.SQL().QueryRow(`SELECT final_payload FROM log_sessions WHERE session_id = 's1'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := `{"chunks":1,"bytes":7600,"cursor":"s=abc","reason":"shutdown"}`; string(stored) != want {
		t.Fatalf("final payload %s, want %s", stored, want)
	}
}

// TestIngestLogsBoundaries: every bound at its exact boundary — the last
// admitted value accepted, the next refused with nothing written.
func TestIngestLogsBoundaries(t *testing.T) {
	h := daemontest.NewIngestLogs(t)
	small := []byte("x")

	t.Run("allowlist", func(t *testing.T) {
		before := h.LogRows()
		h.Refused(t, "service off the default allowlist", h.OpenSession(h.Deployment, "a1", "nginx.service"), http.StatusUnprocessableEntity, "service_not_allowed", before)
		for _, svc := range logs.DefaultServices {
			if r := h.OpenSession(h.Deployment, "allow-"+svc, svc); r.Status != http.StatusAccepted {
				t.Fatalf("default service %s: %s", svc, r)
			}
		}
		h.Exec(`UPDATE environments SET log_services = 'nginx.service' WHERE slug = ?`, h.Slug)
		if r := h.OpenSession(h.Deployment, "a1", "nginx.service"); r.Status != http.StatusAccepted {
			t.Fatalf("service on the environment's own list: %s", r)
		}
		before = h.LogRows()
		h.Refused(t, "default service off the environment's own list", h.OpenSession(h.Deployment, "a2", "chalupa-agent.service"), http.StatusUnprocessableEntity, "service_not_allowed", before)
		h.Exec(`UPDATE environments SET log_services = NULL`)
		h.Exec(`UPDATE log_sessions SET finished_at = 1`)
	})
	t.Run("eight open sessions", func(t *testing.T) {
		for i := range logs.DefaultOpenSessions {
			if r := h.OpenSession(h.Deployment, fmt.Sprintf("q%d", i), "chalupa-agent.service"); r.Status != http.StatusAccepted {
				t.Fatalf("session %d: %s", i+1, r)
			}
		}
		before := h.LogRows()
		r := h.OpenSession(h.Deployment, "q8", "chalupa-agent.service")
		h.Refused(t, "ninth open session", r, http.StatusTooManyRequests, "log_session_quota", before)
		if ra := r.Header.Get("Retry-After"); ra != strconv.Itoa(int(logs.DefaultSessionTTL/time.Second)) {
			t.Fatalf("ninth open session: Retry-After %q, want the sessions' 24 h life in seconds", ra)
		}
		// Retry-After is until the earliest expiry among the open
		// sessions, whichever opened first.
		h.Exec(`UPDATE log_sessions SET expires_at = expires_at - 3600000 WHERE session_id = 'q3'`)
		h.Exec(`UPDATE log_sessions SET expires_at = expires_at - 7200000 WHERE session_id = 'q5'`)
		r = h.OpenSession(h.Deployment, "q8", "chalupa-agent.service")
		if want := strconv.Itoa(int((logs.DefaultSessionTTL - 2*time.Hour) / time.Second)); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != want {
			t.Fatalf("ninth open session: %s Retry-After %q, want 429 and %s (until the oldest open session expires)", r, r.Header.Get("Retry-After"), want)
		}
		h.Exec(`UPDATE log_sessions SET finished_at = 1 WHERE session_id != 'q0'`)
		if r := h.OpenSession(h.Deployment, "q8", "chalupa-agent.service"); r.Status != http.StatusAccepted {
			t.Fatalf("a finished session frees its place: %s", r)
		}
		h.Exec(`UPDATE log_sessions SET finished_at = 1 WHERE session_id = 'q8'`)
	})
	t.Run("chunk size", func(t *testing.T) {
		max := bytes.Repeat([]byte("y"), protocol.DefaultMaxChunkBytes)
		if r, _ := h.PlanChunk("q0", 0, max); r.Status != http.StatusAccepted {
			t.Fatalf("chunk of exactly 1 MiB: %s", r)
		}
		before := h.LogRows()
		h.Refused(t, "chunk of 1 MiB + 1", func() daemontest.Response { r, _ := h.PlanChunk("q0", 1, append(max, 'y')); return r }(), http.StatusUnprocessableEntity, "chunk_too_large", before)
	})
	t.Run("sequence", func(t *testing.T) {
		before := h.LogRows()
		h.Refused(t, "seq past the next", func() daemontest.Response { r, _ := h.PlanChunk("q0", 2, small); return r }(), http.StatusConflict, "sequence_gap", before)
		h.Refused(t, "another body for a planned seq", func() daemontest.Response { r, _ := h.PlanChunk("q0", 0, small); return r }(), http.StatusConflict, "chunk_conflict", before)
		h.Refused(t, "unknown session", func() daemontest.Response { r, _ := h.PlanChunk("nope", 0, small); return r }(), http.StatusNotFound, "log_session_not_found", before)
	})
	t.Run("256 chunks", func(t *testing.T) {
		h.Exec(`UPDATE deployments SET log_chunks = ? WHERE id = ?`, logs.DefaultDeploymentChunks-1, h.Deployment)
		if r, _ := h.PlanChunk("q0", 1, small); r.Status != http.StatusAccepted {
			t.Fatalf("256th chunk: %s", r)
		}
		before := h.LogRows()
		r, _ := h.PlanChunk("q0", 2, small)
		h.Refused(t, "257th chunk", r, http.StatusTooManyRequests, "log_chunk_quota", before)
		if ra := r.Header.Get("Retry-After"); ra != "" {
			t.Errorf("log_chunk_quota carries Retry-After %q: nothing lowers a deployment's planned chunks, so no wait ends it", ra)
		}
		h.Exec(`UPDATE deployments SET log_chunks = 0 WHERE id = ?`, h.Deployment)
	})
	t.Run("bytes", func(t *testing.T) {
		h.Exec(`UPDATE deployments SET log_bytes = ? WHERE id = ?`, protocol.DefaultDeploymentBytes-1, h.Deployment)
		if r, _ := h.PlanChunk("q0", 2, small); r.Status != http.StatusAccepted {
			t.Fatalf("chunk filling the byte quota exactly: %s", r)
		}
		before := h.LogRows()
		r, _ := h.PlanChunk("q0", 3, small)
		h.Refused(t, "one byte past the byte quota", r, http.StatusTooManyRequests, "log_byte_quota", before)
		if ra := r.Header.Get("Retry-After"); ra != "" {
			t.Errorf("log_byte_quota carries Retry-After %q: nothing lowers a deployment's planned bytes, so no wait ends it", ra)
		}
		h.Exec(`UPDATE deployments SET log_bytes = 0 WHERE id = ?`, h.Deployment)
	})
	t.Run("expiry", func(t *testing.T) {
		h.Clock.Advance(logs.DefaultSessionTTL - time.Second)
		if r, _ := h.PlanChunk("q0", 3, small); r.Status != http.StatusAccepted {
			t.Fatalf("plan a second before expiry: %s", r)
		}
		h.Clock.Advance(time.Second)
		before := h.LogRows()
		h.Refused(t, "plan at expiry", func() daemontest.Response { r, _ := h.PlanChunk("q0", 4, small); return r }(), http.StatusConflict, "log_session_expired", before)
		// A plan made before expiry is still renewed (the upload it
		// grants may be retried after a restart).
		if r, p := h.PlanChunk("q0", 3, small); r.Status != http.StatusAccepted || !p.Renewed {
			t.Fatalf("renewal after expiry: %s", r)
		}
	})
	t.Run("ended deployment", func(t *testing.T) {
		h.Exec(`UPDATE deployments SET status = 'ended', ended_at = 1 WHERE id = ?`, h.Deployment)
		before := h.LogRows()
		h.Refused(t, "open for an ended deployment", h.OpenSession(h.Deployment, "late", "chalupa-agent.service"), http.StatusConflict, "deployment_ended", before)
		h.Refused(t, "open for an unknown deployment", h.OpenSession("dep-unknown", "late", "chalupa-agent.service"), http.StatusNotFound, "deployment_not_found", before)
	})
	t.Run("quota refusals counted", func(t *testing.T) {
		r := h.Do(http.MethodGet, "/metrics", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil)
		for _, want := range []string{`chalupa_ingest_quota_refused_total{quota="log_sessions"} 2`, `chalupa_ingest_quota_refused_total{quota="log_chunks"} 1`,
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
	h := daemontest.NewIngestLogs(t)
	ctx := context.Background()
	chunk := []byte("a planned chunk of logs\n")
	if r := h.OpenSession(h.Deployment, "v1", "chalupa-agent.service"); r.Status != http.StatusAccepted {
		t.Fatalf("open: %s", r)
	}
	for i, tc := range []struct {
		name string
		// upload puts other bytes at the planned key and returns them.
		upload func(t *testing.T, key string, grant *protocol.LogUpload) []byte
	}{
		{"another size, with the bucket's own credentials", func(t *testing.T, key string, _ *protocol.LogUpload) []byte {
			wrong := append([]byte("tampered "), chunk...)
			g, err := h.Store.PresignPut(ctx, key, int64(len(wrong)), sha256.Sum256(wrong), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if code := daemontest.PutChunk(t, &protocol.LogUpload{Method: g.Method, URL: g.URL, Headers: g.Headers}, wrong); code != http.StatusOK {
				t.Fatalf("tampered PUT: %d", code)
			}
			return wrong
		}},
		{"the planned size, other bytes, with the chunk's grant", func(t *testing.T, _ string, grant *protocol.LogUpload) []byte {
			wrong := bytes.ToUpper(chunk)
			if code := daemontest.PutChunk(t, grant, wrong); code != http.StatusOK {
				t.Fatalf("versitygw refused other bytes under the grant (%d): it now enforces the checksum; say so in docs/operations.md, \"Logs\"", code)
			}
			return wrong
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := int64(i)
			r, p := h.PlanChunk("v1", seq, chunk)
			if r.Status != http.StatusAccepted {
				t.Fatalf("plan: %s", r)
			}
			u, _ := url.Parse(p.Upload.URL)
			key := strings.TrimPrefix(u.Path, "/"+h.GW.Bucket+"/")
			wrong := tc.upload(t, key, p.Upload)
			if o, err := h.Store.Head(ctx, key); err != nil || o.Size != int64(len(wrong)) {
				t.Fatalf("the other bytes are not stored: %+v %v", o, err)
			}
			before := h.LogRows()
			h.Refused(t, "commit of other bytes", h.CommitChunk("v1", seq, chunk), http.StatusUnprocessableEntity, "object_mismatch", before)
			if _, err := h.Store.Head(ctx, key); !errors.Is(err, logs.ErrObjectMissing) {
				t.Fatalf("mismatching object not deleted: %v", err)
			}
			// Planned again: the grant is renewed for the same key.
			r, p2 := h.PlanChunk("v1", seq, chunk)
			if u2, _ := url.Parse(p2.Upload.URL); r.Status != http.StatusAccepted || !p2.Renewed || u2.Path != u.Path {
				t.Fatalf("renewal: %s", r)
			}
			if code := daemontest.PutChunk(t, p2.Upload, chunk); code != http.StatusOK {
				t.Fatalf("PUT: %d", code)
			}
			if r := h.CommitChunk("v1", seq, chunk); r.Status != http.StatusAccepted {
				t.Fatalf("commit: %s", r)
			}
		})
	}
}

// TestIngestLogsPlanSurvivesRestart: the plan is durable before its grant
// is answered — a daemon restarted between plan and PUT renews the same
// plan for the same object key, and the chunk commits once.
func TestIngestLogsPlanSurvivesRestart(t *testing.T) {
	h := daemontest.NewIngestLogs(t)
	chunk := []byte("before the restart\n")
	if r := h.OpenSession(h.Deployment, "r1", "cloud-init.service"); r.Status != http.StatusAccepted {
		t.Fatalf("open: %s", r)
	}
	_, p := h.PlanChunk("r1", 0, chunk)
	h.Restart()
	h.Clock.Advance(time.Minute)
	r, p2 := h.PlanChunk("r1", 0, chunk)
	if r.Status != http.StatusAccepted || !p2.Renewed {
		t.Fatalf("plan after restart: %s", r)
	}
	u1, _ := url.Parse(p.Upload.URL)
	u2, _ := url.Parse(p2.Upload.URL)
	if u1.Path != u2.Path || !p2.Upload.ExpiresAt.After(p.Upload.ExpiresAt) {
		t.Fatalf("renewed grant: %s until %v, first %s until %v", u2.Path, p2.Upload.ExpiresAt, u1.Path, p.Upload.ExpiresAt)
	}
	if code := daemontest.PutChunk(t, p2.Upload, chunk); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	if r := h.CommitChunk("r1", 0, chunk); r.Status != http.StatusAccepted {
		t.Fatalf("commit: %s", r)
	}
	if n := h.Count(`SELECT count(*) FROM log_chunks WHERE state = 'committed'`); n != 1 {
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
