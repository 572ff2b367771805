package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/agent"
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

// TestAgentShipsLogsEndToEnd: the built `chalupa agent run --log-file`
// against the built `chalupa serve` with its log broker on versitygw. A
// service off the allowlist is refused and nothing of it is stored; the
// file's lines are shipped at SIGTERM (the final flush) and `admin logs get`
// reads them back byte-exact (gunzipped: chunks are stored compressed);
// every chunk is one object and one row.
func TestAgentShipsLogsEndToEnd(t *testing.T) {
	t.Parallel()
	bin := daemontest.BuildBinary(t)
	gw := daemontest.StartVersityGW(t)
	d := daemontest.Start(t, bin, daemontest.Options{Env: map[string]string{
		"CHALUPA_LOGS_URL": "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1",
		"CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey,
	}})
	ctx := context.Background()
	if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "ship-demo"}); err != nil {
		t.Fatal(err)
	}
	k, err := d.Admin().IssueIngestKey(ctx, "ship-demo")
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, code := daemontest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL}, args...)
		if code != 0 {
			t.Fatalf("chalupa %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	if out := cli("admin", "logs", "allow", "ship-demo", "app.log"); !strings.Contains(out, "app.log") {
		t.Fatalf("admin logs allow:\n%s", out)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	os.MkdirAll(keys, 0o700)
	os.WriteFile(filepath.Join(keys, "ingest.key"), []byte(k.KeyMaterial), 0o600)
	os.WriteFile(filepath.Join(keys, "key-id"), []byte(k.KeyID), 0o600)
	appLog, otherLog := filepath.Join(dir, "app.log"), filepath.Join(dir, "nginx.log")
	var want bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&want, "2026-12-01T10:%02d:%02d app[42]: request %d served in %d ms\n", i/60%60, i%60, i, i%97)
	}
	os.WriteFile(appLog, want.Bytes(), 0o600)
	os.WriteFile(otherLog, []byte("nginx: started\n"), 0o600)

	state := filepath.Join(dir, "state")
	cmd := exec.Command(bin, "agent", "run", "--nvidia-smi", "none", "--run-root", filepath.Join(dir, "run"),
		"--log-file", appLog, "--log-file", otherLog+"=nginx.service")
	cmd.Env = append(os.Environ(),
		"CHALUPA_AGENT_URL="+d.URL, "CHALUPA_AGENT_ENV=ship-demo", "CHALUPA_AGENT_KEY_FILE="+filepath.Join(keys, "ingest.key"),
		"CHALUPA_AGENT_DEPLOYMENT=dep-ship", "CHALUPA_AGENT_DROPLET_ID=8", "CHALUPA_AGENT_REGION=nyc3",
		"CHALUPA_AGENT_STATE_DIR="+state, "CHALUPA_AGENT_DISK_PATH="+dir)
	alog := &daemontest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = alog, alog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _ := agent.ReadState(state)
		if st.LastHeartbeatStatus == 202 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no accepted heartbeat; agent log:\n%s", alog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Lines wait up to a minute for a chunk; SIGTERM cuts and ships them.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agent exit: %v\n%s", err, alog.String())
		}
	case <-time.After(agent.ShutdownDeadline + 20*time.Second):
		t.Fatalf("agent did not stop; log:\n%s", alog.String())
	}

	if !strings.Contains(alog.String(), `"service_not_allowed"`) {
		t.Fatalf("nginx.service was not refused; agent log:\n%s", alog.String())
	}
	file := filepath.Join(t.TempDir(), "logs.gz")
	cli("admin", "logs", "get", "ship-demo", "dep-ship", "--service", "app.log", "--out", file)
	gz, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read back %d bytes (%v), want the file's %d; agent log:\n%s", len(got), err, want.Len(), alog.String())
	}
	l, err := d.Admin().ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: "ship-demo", DeploymentID: "dep-ship"})
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for _, s := range l.Sessions {
		if s.Service != "app.log" || s.FinishedAt == nil || !strings.Contains(s.Final, `"reason":"shutdown"`) {
			t.Fatalf("session %+v: want app.log's only, finished at shutdown", s)
		}
		for _, c := range s.Chunks {
			if c.State != "committed" {
				t.Fatalf("chunk %d is %s", c.Seq, c.State)
			}
			chunks++
		}
	}
	objects := 0
	filepath.WalkDir(filepath.Join(gw.Root, gw.Bucket), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, ".chunk") {
			objects++
		}
		return nil
	})
	if chunks == 0 || objects != chunks {
		t.Fatalf("%d objects for %d committed chunks", objects, chunks)
	}
}
