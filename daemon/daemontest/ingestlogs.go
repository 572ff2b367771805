package daemontest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// IngestLogs is an Ingest whose log broker stores into a versitygw bucket
// (CHALUPA_LOGS_URL), with one environment, key and deployment that has
// sent its first heartbeat: the harness of the log routes' tests and the
// admin log operations' (docs/operations.md, "Logs").
type IngestLogs struct {
	*Ingest
	// GW is the versitygw server holding the bucket.
	GW *proctest.S3
	// Store is the test's own view of the bucket.
	Store *logs.S3
	// Key is the environment's ingest key.
	Key Key
	// Slug and Deployment name the environment and the deployment.
	Slug, Deployment string
}

// NewIngestLogs starts versitygw and an Ingest logging into its bucket.
func NewIngestLogs(t *testing.T) *IngestLogs { return NewIngestLogsEnv(t, nil) }

// NewIngestLogsEnv is NewIngestLogs with more daemon variables
// (CHALUPA_QUOTA_*).
func NewIngestLogsEnv(t *testing.T, extra map[string]string) *IngestLogs {
	t.Helper()
	gw := proctest.StartVersityGW(t)
	url := "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1"
	env := map[string]string{"CHALUPA_LOGS_URL": url, "CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey}
	for k, v := range extra {
		env[k] = v
	}
	h := NewIngest(t, IngestOptions{Env: env})
	loc, err := logs.ParseLocation(url)
	if err != nil {
		t.Fatal(err)
	}
	lh := &IngestLogs{Ingest: h, GW: gw, Store: logs.NewS3(loc, gw.AccessKey, gw.SecretKey, nil), Slug: "log-env", Deployment: "dep-1"}
	h.CreateEnv(lh.Slug)
	lh.Key = h.Issue(lh.Slug)
	if r := lh.SendTo(ingest.HeartbeatRoute, h.Heartbeat(HeartbeatOpts{Env: lh.Slug, Deployment: lh.Deployment})); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	return lh
}

// SendTo signs body with the environment's key and posts it to path.
func (h *IngestLogs) SendTo(path string, body []byte) Response {
	h.T.Helper()
	return h.Send(SignedReq{KeyID: h.Key.ID, Key: h.Key.Raw, Body: body, Path: path})
}

// Post sends v as JSON to path (SendTo).
func (h *IngestLogs) Post(path string, v any) Response {
	h.T.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		h.T.Fatal(err)
	}
	return h.SendTo(path, b)
}

// OpenSession opens log session of service for deployment dep.
func (h *IngestLogs) OpenSession(dep, session, service string) Response {
	return h.Post("/api/ingest/logs/sessions", protocol.OpenV1{EnvironmentSlug: h.Slug, DeploymentID: dep, SessionID: session, Service: service})
}

// ChunkBody is the ChunkV1 of body as seq of session.
func ChunkBody(env, dep, session string, seq int64, body []byte) protocol.ChunkV1 {
	sum := sha256.Sum256(body)
	return protocol.ChunkV1{EnvironmentSlug: env, DeploymentID: dep, SessionID: session, Seq: seq, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
}

// PlanChunk plans body as seq of session and returns the answer and its grant.
func (h *IngestLogs) PlanChunk(session string, seq int64, body []byte) (Response, protocol.LogChunkPlanned) {
	h.T.Helper()
	r := h.Post("/api/ingest/logs/plan", ChunkBody(h.Slug, h.Deployment, session, seq, body))
	var p protocol.LogChunkPlanned
	if r.Status == http.StatusAccepted {
		if err := json.Unmarshal(r.Body, &p); err != nil {
			h.T.Fatal(err)
		}
	}
	return r, p
}

// CommitChunk commits body as seq of session.
func (h *IngestLogs) CommitChunk(session string, seq int64, body []byte) Response {
	return h.Post("/api/ingest/logs/commit", ChunkBody(h.Slug, h.Deployment, session, seq, body))
}

// PutChunk sends body with the grant, as the agent does.
func PutChunk(t *testing.T, up *protocol.LogUpload, body []byte) int {
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

// LogRows counts everything a log request can write, nonces included.
func (h *IngestLogs) LogRows() string {
	h.T.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT count(*) FROM log_sessions`, `SELECT count(*) FROM log_chunks`,
		`SELECT count(*) FROM log_chunks WHERE state = 'committed'`, `SELECT coalesce(sum(next_seq), 0) FROM log_sessions`,
		`SELECT count(*) FROM log_sessions WHERE finished_at IS NOT NULL`,
		`SELECT coalesce(sum(log_chunks), 0) FROM deployments`, `SELECT coalesce(sum(log_bytes), 0) FROM deployments`,
		`SELECT coalesce(sum(grant_expires_at), 0) FROM log_chunks`, `SELECT count(*) FROM nonces`,
	} {
		parts = append(parts, fmt.Sprint(h.Count(q)))
	}
	return strings.Join(parts, "/")
}

// Refused asserts r is status/code and that nothing was written.
func (h *IngestLogs) Refused(t *testing.T, what string, r Response, status int, code, before string) {
	t.Helper()
	if r.Status != status || r.Code != code {
		t.Fatalf("%s: %s, want %d %s", what, r, status, code)
	}
	if after := h.LogRows(); after != before {
		t.Fatalf("%s wrote: %s -> %s", what, before, after)
	}
}

// ShipChunk plans, uploads and commits body as seq of session.
func (h *IngestLogs) ShipChunk(t *testing.T, session string, seq int64, body []byte) {
	t.Helper()
	r, p := h.PlanChunk(session, seq, body)
	if r.Status != http.StatusAccepted {
		t.Fatalf("plan %s/%d: %s", session, seq, r)
	}
	if code := PutChunk(t, p.Upload, body); code != http.StatusOK {
		t.Fatalf("PUT %s/%d: %d", session, seq, code)
	}
	if r := h.CommitChunk(session, seq, body); r.Status != http.StatusAccepted {
		t.Fatalf("commit %s/%d: %s", session, seq, r)
	}
}
