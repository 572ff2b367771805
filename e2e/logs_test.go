package e2e

import (
	"bufio"
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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestLogsConfigRefusesReplicaCredentials: the built binary's `config
// check` refuses log credentials equal to the replica's, and a log
// location inside the replica's path, saying why.
func TestLogsConfigRefusesReplicaCredentials(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
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
			out, code := proctest.RunCommand(t, bin, "", env, "config", "check")
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
	bin := proctest.BuildBinary(t)
	gw := proctest.StartVersityGW(t)
	logsURL := "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1"
	d := proctest.Start(t, bin, proctest.Options{Env: map[string]string{
		"CHALUPA_LOGS_URL": logsURL, "CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey,
	}})
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, d.Admin(), "log-demo")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	post := func(base, path string, v any) (int, []byte) {
		t.Helper()
		b, _ := json.Marshal(v)
		resp, err := (&protocol.Client{BaseURL: base, KeyID: k.KeyID, Key: raw}).Post(ctx, path, b)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.Status, resp.Body
	}
	now := time.Now().UTC()
	if code, body := post(d.URL, "/api/ingest/heartbeat", protocol.HeartbeatV1{EnvironmentSlug: "log-demo", Deployment: protocol.HeartbeatDeploy{ID: "dep-log"},
		AgentVersion: "e2e/1", SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now}}); code != 202 {
		t.Fatalf("heartbeat: %d %s", code, body)
	}
	if code, body := post(d.URL, "/api/ingest/logs/sessions", protocol.OpenV1{EnvironmentSlug: "log-demo", DeploymentID: "dep-log", SessionID: "s-e2e", Service: "cloud-init.service"}); code != 202 {
		t.Fatalf("open: %d %s", code, body)
	}
	chunk := bytes.Repeat([]byte("cloud-init: module ran\n"), 50)
	sum := sha256.Sum256(chunk)
	plan := protocol.ChunkV1{EnvironmentSlug: "log-demo", DeploymentID: "dep-log", SessionID: "s-e2e", Seq: 0, Size: int64(len(chunk)), SHA256: hex.EncodeToString(sum[:])}
	planAt := func(base string) protocol.LogChunkPlanned {
		t.Helper()
		code, body := post(base, "/api/ingest/logs/plan", plan)
		var p protocol.LogChunkPlanned
		if code != 202 || json.Unmarshal(body, &p) != nil || p.Upload == nil {
			t.Fatalf("plan: %d %s", code, body)
		}
		return p
	}
	first := planAt(d.URL)

	// Killed between plan and PUT.
	d.Kill()
	env := d.EnvCopy()
	env["CHALUPA_LISTEN"] = proctest.FreeAddr(t)
	d2 := proctest.Start(t, bin, proctest.Options{Env: env})
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
		out, code := proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d2.AdminToken(), "CHALUPA_URL": d2.URL}, args...)
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
	bin := proctest.BuildBinary(t)
	gw := proctest.StartVersityGW(t)
	d := proctest.Start(t, bin, proctest.Options{Env: e2eLogsEnv(gw, gw.Endpoint)})
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, d.Admin(), "ship-demo")
	cli := func(args ...string) string {
		t.Helper()
		out, code := proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL}, args...)
		if code != 0 {
			t.Fatalf("chalupa %s exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	if out := cli("admin", "logs", "allow", "ship-demo", "app.log"); !strings.Contains(out, "app.log") {
		t.Fatalf("admin logs allow:\n%s", out)
	}
	dir := t.TempDir()
	keyFile := e2eAgentKey(t, filepath.Join(dir, "keys"), k)
	appLog, otherLog := filepath.Join(dir, "app.log"), filepath.Join(dir, "nginx.log")
	var want bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&want, "2026-12-01T10:%02d:%02d app[42]: request %d served in %d ms\n", i/60%60, i%60, i, i%97)
	}
	os.WriteFile(appLog, want.Bytes(), 0o600)
	os.WriteFile(otherLog, []byte("nginx: started\n"), 0o600)

	state := filepath.Join(dir, "state")
	p := startAgent(t, bin, append(os.Environ(),
		"CHALUPA_AGENT_URL="+d.URL, "CHALUPA_AGENT_ENV=ship-demo", "CHALUPA_AGENT_KEY_FILE="+keyFile,
		"CHALUPA_AGENT_DEPLOYMENT=dep-ship", "CHALUPA_AGENT_DROPLET_ID=8", "CHALUPA_AGENT_REGION=nyc3",
		"CHALUPA_AGENT_STATE_DIR="+state, "CHALUPA_AGENT_DISK_PATH="+dir),
		"--nvidia-smi", "none", "--run-root", filepath.Join(dir, "run"),
		"--log-file", appLog, "--log-file", otherLog+"=nginx.service")
	alog := p.log
	p.waitAccepted(state)
	// Lines wait up to a minute for a chunk; SIGTERM cuts and ships them.
	p.stop()

	if !strings.Contains(alog.String(), `"service_not_allowed"`) {
		t.Fatalf("nginx.service was not refused; agent log:\n%s", alog.String())
	}
	got, err := e2eLogsGet(t, bin, d, "ship-demo", "dep-ship", "--service", "app.log")
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

// BenchmarkAgentShipLogs: the figures of docs/operations.md, "Logs": the
// built agent ships a 100 MiB log file (made of varied request lines)
// through the built daemon and versitygw. It reports the agent's
// throughput (raw MiB/s, from start until its spool is empty and its
// cursor at the file's end), its CPU seconds, and the bytes through the
// daemon's process meanwhile: /proc/PID/io rchar+wchar (every read and
// write, SQLite and the replica's included) and the log routes' request
// and response bodies from its request log. Run:
//
//	go test -run '^$' -bench BenchmarkAgentShipLogs -benchtime 1x .
func BenchmarkAgentShipLogs(b *testing.B) {
	const size = 100 << 20
	bin := proctest.BuildBinary(b)
	gw := proctest.StartVersityGW(b)
	d := proctest.Start(b, bin, proctest.Options{Env: e2eLogsEnv(gw, gw.Endpoint)})
	ctx := context.Background()
	if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "bench-logs"}); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Admin().SetLogServices(ctx, adminapi.SetLogServicesRequest{EnvironmentSlug: "bench-logs", Services: []string{"app.log"}}); err != nil {
		b.Fatal(err)
	}
	k, err := d.Admin().IssueIngestKey(ctx, "bench-logs")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "ingest.key"), []byte(k.KeyMaterial), 0o600)
	os.WriteFile(filepath.Join(dir, "key-id"), []byte(k.KeyID), 0o600)
	appLog := filepath.Join(dir, "app.log")
	f, err := os.Create(appLog)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	written, seed := 0, uint64(1)
	for i := 0; written < size; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		n, _ := fmt.Fprintf(w, "2026-12-01T10:%02d:%02d.%06dZ app[%d]: GET /api/items/%d?page=%d 200 %d bytes in %d us trace=%016x\n",
			i/60%60, i%60, i%1000000, 4000+i%7, seed%100000, seed>>40%50, seed>>20%65536, seed>>8%9973, seed)
		written += n
	}
	w.Flush()
	f.Close()

	ioNow := func() int64 {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", d.Pid))
		if err != nil {
			b.Skipf("no /proc/PID/io: %v", err)
		}
		var total int64
		for _, line := range strings.Split(string(raw), "\n") {
			var v int64
			if _, err := fmt.Sscanf(line, "rchar: %d", &v); err == nil {
				total += v
			} else if _, err := fmt.Sscanf(line, "wchar: %d", &v); err == nil {
				total += v
			}
		}
		return total
	}
	logsBefore := len(d.Logs())
	ioBefore := ioNow()
	state := filepath.Join(dir, "state")
	b.ResetTimer()
	start := time.Now()
	cmd := exec.Command(bin, "agent", "run", "--nvidia-smi", "none", "--run-root", filepath.Join(dir, "run"), "--log-file", appLog)
	cmd.Env = append(os.Environ(),
		"CHALUPA_AGENT_URL="+d.URL, "CHALUPA_AGENT_ENV=bench-logs", "CHALUPA_AGENT_KEY_FILE="+filepath.Join(dir, "ingest.key"),
		"CHALUPA_AGENT_DEPLOYMENT=dep-bench", "CHALUPA_AGENT_DROPLET_ID=9", "CHALUPA_AGENT_REGION=nyc3",
		"CHALUPA_AGENT_STATE_DIR="+state, "CHALUPA_AGENT_DISK_PATH="+dir)
	alog := &proctest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = alog, alog
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill() })
	// SIGTERM once every whole chunk is shipped: the cursor is within a
	// chunk's target (4 MiB raw) of the file's end and the spool is empty.
	// The rest waits for FlushInterval, which SIGTERM cuts short: Stop cuts
	// and ships it, so the time until exit covers every byte.
	spoolDir := filepath.Join(state, "logs", "app.log")
	testwait.Eventually(b, testwait.Long, "every whole chunk shipped", func() (bool, string) {
		var st struct {
			Cursor string `json:"cursor"`
		}
		raw, _ := os.ReadFile(filepath.Join(spoolDir, "state.json"))
		json.Unmarshal(raw, &st)
		_, off, _ := strings.Cut(st.Cursor, ":")
		n, _ := strconv.Atoi(off)
		left, _ := filepath.Glob(filepath.Join(spoolDir, "*.chunk"))
		return n > written-(4<<20) && len(left) == 0,
			fmt.Sprintf("cursor at %d of %d bytes, %d chunks in the spool; agent log:\n%s", n, written, len(left), alog.String())
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("agent: %v\n%s", err, alog.String())
	}
	elapsed := time.Since(start)
	b.StopTimer()
	ioAfter := ioNow()
	if left, _ := filepath.Glob(filepath.Join(spoolDir, "*.chunk")); len(left) > 0 {
		b.Fatalf("%d chunks left in the spool; agent log:\n%s", len(left), alog.String())
	}
	l, err := d.Admin().ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: "bench-logs", DeploymentID: "dep-bench"})
	if err != nil {
		b.Fatal(err)
	}
	var chunks, stored int64
	for _, s := range l.Sessions {
		for _, c := range s.Chunks {
			if c.State == "committed" {
				chunks++
				stored += c.SizeBytes
			}
		}
	}
	// The request log: response bytes of the log routes.
	var logRoutes, respBytes int64
	for _, line := range strings.Split(d.Logs()[logsBefore:], "\n") {
		var e struct {
			Route string `json:"route"`
			Bytes int64  `json:"bytes"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && strings.HasPrefix(e.Route, "/api/ingest/logs/") {
			logRoutes++
			respBytes += e.Bytes
		}
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	b.ReportMetric(float64(written)/(1<<20)/elapsed.Seconds(), "MiB/s")
	b.ReportMetric(cpu.Seconds(), "agent-cpu-s")
	b.ReportMetric(float64(chunks), "chunks")
	b.ReportMetric(float64(stored)/(1<<20), "stored-MiB")
	b.ReportMetric(float64(ioAfter-ioBefore), "daemon-io-bytes")
	b.ReportMetric(float64(logRoutes), "log-requests")
	b.ReportMetric(float64(respBytes), "log-response-bytes")
}

// e2eLogsEnv is the daemon environment that points its log broker at gw,
// reached through endpoint (gw.Endpoint, or a proxy in front of it), with
// the log store's own credentials (docs/operations.md, "Logs").
// e2eLogsGet runs the built `chalupa admin logs get ARGS --out FILE`
// against d (a non-zero exit fails the test) and returns the file
// gunzipped: what the operator reads back. The error is the gunzip's, for
// the caller's own message.
func e2eLogsGet(t *testing.T, bin string, d *proctest.Daemon, args ...string) ([]byte, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "logs.gz")
	out, code := proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL},
		append(append([]string{"admin", "logs", "get"}, args...), "--out", file)...)
	if code != 0 {
		t.Fatalf("admin logs get: exit %d\n%s", code, out)
	}
	gz, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

func e2eLogsEnv(gw *proctest.S3, endpoint string) map[string]string {
	return map[string]string{
		"CHALUPA_LOGS_URL": "s3://" + gw.Bucket + "/logs?endpoint=" + endpoint + "&region=us-east-1",
		"CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey,
	}
}
