package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/signer"
)

// TestLogsConfigRefusesReplicaCredentials: the built binary's `config
// check` refuses log credentials equal to the replica's, and a log
// location inside the replica's path, saying why.
func TestLogsConfigRefusesReplicaCredentials(t *testing.T) {
	t.Parallel()
	bin := daemontest.BuildBinary(t)
	for _, tc := range []struct {
		name string
		logs map[string]string
		want string
	}{
		{"same credentials", map[string]string{"CHALUPA_LOGS_URL": "s3://b/logs", "CHALUPA_LOGS_KEY": "SAMEKEY123", "CHALUPA_LOGS_SECRET": "other-secret"},
			"must never hold credentials that can delete the database replica"},
		{"overlapping location", map[string]string{"CHALUPA_LOGS_URL": "s3://b/db/logs", "CHALUPA_LOGS_KEY": "LOGKEY", "CHALUPA_LOGS_SECRET": "log-secret"},
			"CHALUPA_LOGS_URL overlaps CHALUPA_REPLICA_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"CHALUPA_DATA_DIR": t.TempDir(), "CHALUPA_REPLICA_URL": "s3://b/db?endpoint=http://127.0.0.1:9",
				"CHALUPA_SPACES_KEY": "SAMEKEY123", "CHALUPA_SPACES_SECRET": "replica-secret"}
			for k, v := range tc.logs {
				env[k] = v
			}
			out, code := daemontest.RunCommand(t, bin, "", env, "config", "check")
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("config check exited %d:\n%s", code, out)
			}
			if strings.Contains(out, "replica-secret") || strings.Contains(out, "log-secret") {
				t.Fatalf("config check printed a secret:\n%s", out)
			}
		})
	}
}

// TestLogsEndToEnd: the built binary with its log broker on versitygw. A
// chunk is planned and the daemon is killed before the upload; the
// restarted daemon renews the same plan for the same key, the chunk is
// uploaded with the renewed grant and committed; `admin logs` lists it,
// `admin logs get` fetches it through a grant, `admin logs erase` removes
// object and rows.
func TestLogsEndToEnd(t *testing.T) {
	t.Parallel()
	bin := daemontest.BuildBinary(t)
	gw := daemontest.StartVersityGW(t)
	logsURL := "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1"
	d := daemontest.Start(t, bin, daemontest.Options{Env: map[string]string{
		"CHALUPA_LOGS_URL": logsURL, "CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey,
	}})
	ctx := context.Background()
	if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "log-demo"}); err != nil {
		t.Fatal(err)
	}
	k, err := d.Admin().IssueIngestKey(ctx, "log-demo")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := signer.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	post := func(base, path string, v any) (int, []byte) {
		t.Helper()
		b, _ := json.Marshal(v)
		resp, err := (&signer.Client{BaseURL: base, KeyID: k.KeyID, Key: raw}).Post(ctx, path, b)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.Status, resp.Body
	}
	now := time.Now().UTC()
	if code, body := post(d.URL, "/api/ingest/heartbeat", ingest.HeartbeatV1{EnvironmentSlug: "log-demo", Deployment: ingest.HeartbeatDeploy{ID: "dep-log"},
		AgentVersion: "e2e/1", SentAt: now, Reaper: ingest.ReaperObservation{LimitMinutes: 30, LastActivityAt: now}}); code != 202 {
		t.Fatalf("heartbeat: %d %s", code, body)
	}
	if code, body := post(d.URL, "/api/ingest/logs/sessions", logs.OpenV1{EnvironmentSlug: "log-demo", DeploymentID: "dep-log", SessionID: "s-e2e", Service: "cloud-init.service"}); code != 202 {
		t.Fatalf("open: %d %s", code, body)
	}
	chunk := bytes.Repeat([]byte("cloud-init: module ran\n"), 50)
	sum := sha256.Sum256(chunk)
	plan := logs.ChunkV1{EnvironmentSlug: "log-demo", DeploymentID: "dep-log", SessionID: "s-e2e", Seq: 0, Size: int64(len(chunk)), SHA256: hex.EncodeToString(sum[:])}
	planAt := func(base string) ingest.LogChunkPlanned {
		t.Helper()
		code, body := post(base, "/api/ingest/logs/plan", plan)
		var p ingest.LogChunkPlanned
		if code != 202 || json.Unmarshal(body, &p) != nil || p.Upload == nil {
			t.Fatalf("plan: %d %s", code, body)
		}
		return p
	}
	first := planAt(d.URL)

	// Killed between plan and PUT.
	d.Kill()
	env := d.EnvCopy()
	env["CHALUPA_LISTEN"] = daemontest.FreeAddr(t)
	d2 := daemontest.Start(t, bin, daemontest.Options{Env: env})
	renewed := planAt(d2.URL)
	u1, _ := url.Parse(first.Upload.URL)
	u2, _ := url.Parse(renewed.Upload.URL)
	if !renewed.Renewed || u1.Path != u2.Path {
		t.Fatalf("after restart: renewed=%v key %s, first %s", renewed.Renewed, u2.Path, u1.Path)
	}
	req, _ := http.NewRequest(renewed.Upload.Method, renewed.Upload.URL, bytes.NewReader(chunk))
	for h, v := range renewed.Upload.Headers {
		req.Header.Set(h, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := post(d2.URL, "/api/ingest/logs/commit", plan); code != 202 || !strings.Contains(string(body), `"deduplicated":false`) {
		t.Fatalf("commit: %d %s", code, body)
	}

	cli := func(args ...string) string {
		t.Helper()
		out, code := daemontest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d2.AdminToken(), "CHALUPA_URL": d2.URL}, args...)
		if code != 0 {
			t.Fatalf("chalupa %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	if out := cli("admin", "logs", "log-demo", "dep-log", "--service", "cloud-init.service"); !strings.Contains(out, "s-e2e") || !strings.Contains(out, "1 of 256 chunks") {
		t.Fatalf("admin logs:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "logs.out")
	cli("admin", "logs", "get", "log-demo", "dep-log", "--out", file)
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, chunk) {
		t.Fatalf("admin logs get wrote %d bytes (%v), want the chunk", len(got), err)
	}
	if out := cli("admin", "logs", "erase", "log-demo", "--confirm", "erase logs log-demo"); !strings.Contains(out, "1 chunks (objects and rows), 1 sessions") {
		t.Fatalf("admin logs erase:\n%s", out)
	}
	loc, _ := logs.ParseLocation(logsURL)
	if _, err := logs.NewS3(loc, gw.AccessKey, gw.SecretKey, nil).Head(ctx, strings.TrimPrefix(u1.Path, "/"+gw.Bucket+"/")); !errors.Is(err, logs.ErrObjectMissing) {
		t.Fatalf("object after erase: %v", err)
	}
	if strings.Contains(d2.Logs(), gw.SecretKey) || strings.Contains(d.Logs(), gw.SecretKey) {
		t.Fatal("a daemon logged the log store's secret")
	}
}
