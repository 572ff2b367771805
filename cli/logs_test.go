package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestLogsGetFollow: `admin logs get --follow` writes the chunk committed
// before it started, waits while the session is open, writes the chunk
// committed meanwhile exactly once, in sequence order, and returns once the
// session is finished.
func TestLogsGetFollow(t *testing.T) {
	gw := proctest.StartVersityGW(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{
		"CHALUPA_LOGS_URL":    "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint,
		"CHALUPA_LOGS_KEY":    gw.AccessKey,
		"CHALUPA_LOGS_SECRET": gw.SecretKey,
	}})
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, p.Admin, "follow-env")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	agent := &protocol.Client{BaseURL: p.URL, KeyID: k.KeyID, Key: raw}
	post := func(path string, v any) []byte {
		t.Helper()
		b, _ := json.Marshal(v)
		resp, err := agent.Post(ctx, path, b)
		if err != nil || resp.Status != http.StatusAccepted {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		return resp.Body
	}
	now := time.Now().UTC()
	post("/api/ingest/heartbeat", protocol.HeartbeatV1{EnvironmentSlug: "follow-env", Deployment: protocol.HeartbeatDeploy{ID: "dep-f"},
		AgentVersion: "test/1", SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now}})
	post("/api/ingest/logs/sessions", protocol.OpenV1{EnvironmentSlug: "follow-env", DeploymentID: "dep-f", SessionID: "s-f", Service: "cloud-init.service"})
	ship := func(seq int64, body []byte) {
		t.Helper()
		sum := sha256.Sum256(body)
		ch := protocol.ChunkV1{EnvironmentSlug: "follow-env", DeploymentID: "dep-f", SessionID: "s-f", Seq: seq, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
		var pl protocol.LogChunkPlanned
		if err := json.Unmarshal(post("/api/ingest/logs/plan", ch), &pl); err != nil || pl.Upload == nil {
			t.Fatalf("plan %d: %+v %v", seq, pl, err)
		}
		req, _ := http.NewRequest(pl.Upload.Method, pl.Upload.URL, bytes.NewReader(body))
		for h, v := range pl.Upload.Headers {
			req.Header.Set(h, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %d: %v %v", seq, resp, err)
		}
		resp.Body.Close()
		post("/api/ingest/logs/commit", ch)
	}
	first, second := []byte("first chunk\n"), []byte("second chunk\n")
	ship(0, first)

	var out proctest.SyncBuffer
	cmd := &adminLogsGetCmd{Env: "follow-env", Deployment: "dep-f", Follow: true}
	errc := make(chan error, 1)
	go func() { errc <- cmd.get(p.Admin, http.DefaultClient, 30*time.Second, time.Millisecond, &out) }()
	testwait.Eventually(t, testwait.Short, "the first chunk written", func() (bool, string) { return out.String() == string(first), out.String() })
	select {
	case err := <-errc:
		t.Fatalf("--follow returned while the session is open: %v", err)
	default:
	}

	ship(1, second)
	post("/api/ingest/logs/finish", protocol.FinishV1{EnvironmentSlug: "follow-env", DeploymentID: "dep-f", SessionID: "s-f",
		Final: protocol.FinalV1{Chunks: 2, Bytes: int64(len(first) + len(second)), Reason: "shutdown"}})
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("--follow did not return once the session finished")
	}
	if got, want := out.String(), string(first)+string(second); got != want {
		t.Fatalf("--follow wrote %q, want %q", got, want)
	}
	if strings.Contains(p.Logs.String(), "X-Amz-Signature") {
		t.Fatal("the daemon logged a presigned URL")
	}
}
