package e2e

// End-to-end tests of the platform issue: the built binary as a process, real
// SQLite files, versitygw as S3 and the real `litestream restore` CLI
// (docs/architecture.md, "Tests"). Helpers live in
// daemon/daemontest; tools come from contrib/install-test-tools.sh.

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
)

// e2eCreateEnv creates one environment through the admin API and returns the
// HTTP status. Safe from any goroutine. Errors: transport failures.
func e2eCreateEnv(ctx context.Context, d *proctest.Daemon, slug string) (int, error) {
	_, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: slug})
	var ae *adminapi.APIError
	if errors.As(err, &ae) {
		return ae.Status, nil
	}
	if err != nil {
		return 0, err
	}
	return http.StatusCreated, nil
}

// e2eCreateMany creates n environments prefix-000… one after another, each
// of which must be acknowledged with 201, and returns their slugs.
func e2eCreateMany(t *testing.T, d *proctest.Daemon, prefix string, n int) []string {
	t.Helper()
	var slugs []string
	for i := range n {
		slug := fmt.Sprintf("%s-%03d", prefix, i)
		code, err := e2eCreateEnv(context.Background(), d, slug)
		if err != nil || code != http.StatusCreated {
			t.Fatalf("create %s: status %d, %v", slug, code, err)
		}
		slugs = append(slugs, slug)
	}
	return slugs
}

// e2eStop sends SIGTERM and requires a clean exit (status 0).
func e2eStop(t *testing.T, d *proctest.Daemon) {
	t.Helper()
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(); code != 0 {
		t.Fatalf("chalupa serve exited %d after SIGTERM, want 0", code)
	}
}

// e2eListed returns the slugs the daemon's admin API lists.
func e2eListed(t *testing.T, d *proctest.Daemon) map[string]bool {
	t.Helper()
	envs, err := d.Admin().ListEnvironments(context.Background())
	if err != nil {
		t.Fatalf("list environments: %v", err)
	}
	out := map[string]bool{}
	for _, e := range envs.Environments {
		out[e.Slug] = true
	}
	return out
}

// e2eInFile returns the slugs stored in the SQLite file at path, after
// checking PRAGMA integrity_check.
func e2eInFile(t *testing.T, path string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	if err := storage.IntegrityCheck(ctx, path); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	db, err := storage.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	envs, err := storage.ListEnvironments(ctx, db.Read)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range envs {
		out[e.Slug] = true
	}
	return out
}

// e2eRequireAll fails for every slug of want missing from have.
func e2eRequireAll(t *testing.T, where string, have map[string]bool, want []string) {
	t.Helper()
	var missing []string
	for _, s := range want {
		if !have[s] {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%s lacks %d of %d acknowledged environments: %v", where, len(missing), len(want), missing)
	}
}

// e2eFileURL is the file:// URL of an absolute directory.
func e2eFileURL(dir string) string { return (&url.URL{Scheme: "file", Path: dir}).String() }

// e2eCopyFile copies src to dst with mode 0600.
func e2eCopyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// e2eSecrets keeps only the secrets of env (to start a daemon elsewhere with
// the same tokens and master key).
func e2eSecrets(env map[string]string) map[string]string {
	return map[string]string{
		proctest.AdminTokenVar: env[proctest.AdminTokenVar],
		proctest.ReadyTokenVar: env[proctest.ReadyTokenVar],
		proctest.MasterKeyVar:  env[proctest.MasterKeyVar],
	}
}

// TestRestoreRoundTrip writes 50 environments through the admin API, stops
// the daemon with SIGTERM, restores the replica with the real litestream CLI
// and serves the restored file: every acknowledged write must be there. Once
// with versitygw as S3, once with the embedded default's file replica.
func TestRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")

	for _, mode := range []string{"s3", "file"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			var replicaURL string
			var creds map[string]string
			if mode == "s3" {
				s3 := proctest.StartVersityGW(t)
				env = s3.DaemonEnv("chalupa")
				// An operator may have AWS_CA_BUNDLE set; the daemon must
				// still replicate (it drops the variable for itself).
				env["AWS_CA_BUNDLE"] = cmp.Or(os.Getenv("AWS_CA_BUNDLE"), "/nonexistent/ca-bundle.pem")
				replicaURL, creds = s3.ReplicaURL("chalupa"), s3.Credentials()
			}
			d := proctest.StartDaemon(t, bin, env)
			if mode == "file" {
				replicaURL = e2eFileURL(filepath.Join(d.DataDir, "replica"))
			}
			st, err := d.Admin().GetStatus(context.Background())
			if err != nil || st.Replication.Kind != mode {
				t.Fatalf("status: replication kind %q (%v), want %s", st.Replication.Kind, err, mode)
			}

			acked := e2eCreateMany(t, d, "rt-"+mode, 50)
			e2eStop(t, d)

			restored := proctest.Restore(t, litestream, replicaURL, creds)
			inFile := e2eInFile(t, restored)
			e2eRequireAll(t, "restored database", inFile, acked)
			t.Logf("%s: %d environments acknowledged, %d in the database litestream restored", mode, len(acked), len(inFile))

			// The operator's recovery: the restored file as chalupa.db in a
			// fresh data dir, same master key and tokens.
			dataDir := t.TempDir()
			e2eCopyFile(t, restored, filepath.Join(dataDir, "chalupa.db"))
			env2 := e2eSecrets(d.Env)
			env2["CHALUPA_DATA_DIR"] = dataDir
			d2 := proctest.StartDaemon(t, bin, env2)
			e2eRequireAll(t, "daemon serving the restored file", e2eListed(t, d2), acked)
			e2eStop(t, d2)
		})
	}
}

// TestCrashKeepsAcknowledgedWrites streams environment creations from a few
// clients, SIGKILLs the daemon mid-stream and restarts it on the same data
// dir: every write acknowledged with 201 before the kill must be listed, the
// file must pass its integrity check, and the replica must hold them too.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	d := proctest.StartDaemon(t, bin, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu         sync.Mutex
		acked      []string
		unexpected []string
		wg         sync.WaitGroup
	)
	const clients = 4
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				slug := fmt.Sprintf("crash-%d-%05d", c, i)
				code, err := e2eCreateEnv(ctx, d, slug)
				if err != nil {
					return // the daemon is gone (or the test is over)
				}
				mu.Lock()
				if code == http.StatusCreated {
					acked = append(acked, slug)
				} else {
					unexpected = append(unexpected, fmt.Sprintf("%s: %d", slug, code))
				}
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	testwait.Eventually(t, testwait.Long, "150 acknowledged creations", func() (bool, string) {
		n := count()
		return n >= 150, fmt.Sprintf("%d acknowledged", n)
	})
	d.Kill() // SIGKILL while the clients are still writing
	cancel()
	wg.Wait()
	if code := d.Wait(); code != -1 {
		t.Fatalf("exit code after SIGKILL = %d, want -1 (killed by a signal)", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(unexpected) > 0 {
		t.Fatalf("creations answered other than 201 before the kill: %v", unexpected)
	}
	t.Logf("%d creations acknowledged before SIGKILL", len(acked))

	env := d.EnvCopy()
	delete(env, "CHALUPA_LISTEN") // a fresh port
	d2 := proctest.StartDaemon(t, bin, env)
	e2eRequireAll(t, "daemon restarted after SIGKILL", e2eListed(t, d2), acked)
	e2eStop(t, d2)
	e2eRequireAll(t, "database file after restart", e2eInFile(t, d2.DatabasePath()), acked)

	restored := proctest.Restore(t, litestream, e2eFileURL(filepath.Join(d2.DataDir, "replica")), nil)
	e2eRequireAll(t, "replica restored after crash and restart", e2eInFile(t, restored), acked)
}

// TestReplicaOutage stops S3 under a running daemon: writes keep succeeding,
// status reports the error and a growing lag, readiness turns 503 once the
// lag limit passes, and everything catches up and turns ready again when S3
// returns. The replica then holds every acknowledged write.
func TestReplicaOutage(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	s3 := proctest.StartVersityGW(t)
	d := proctest.StartDaemon(t, bin, s3.DaemonEnv("outage"), "--lag-limit", "5s")
	ctx := context.Background()
	admin := d.Admin()
	ready := func() (int, string) {
		r, err := d.Do(ctx, "GET", "/api/ready", proctest.Bearer(d.ReadyToken()), nil)
		if err != nil {
			return 0, err.Error()
		}
		return r.Status, string(r.Body)
	}
	status := func() (adminapi.ReplicationHealth, string) {
		st, err := admin.GetStatus(ctx)
		if err != nil {
			return adminapi.ReplicationHealth{}, err.Error()
		}
		b, _ := json.Marshal(st.Replication)
		return st.Replication, string(b)
	}

	acked := e2eCreateMany(t, d, "before-outage", 10)
	testwait.Eventually(t, testwait.Long, "the replica to catch up before the outage", func() (bool, string) {
		h, s := status()
		return h.LocalTXID > 0 && h.RemoteTXID == h.LocalTXID, s
	})
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("/api/ready before the outage: %d %s", code, body)
	}

	s3.Stop()
	acked = append(acked, e2eCreateMany(t, d, "during-outage", 10)...)
	// A sync attempt against the stopped server can spend its S3 client's
	// own retries first; on a loaded machine that took over 30 s.
	testwait.Eventually(t, testwait.Long, "status to report the replica error", func() (bool, string) {
		h, s := status()
		return h.LastError != "", s
	})
	var first adminapi.ReplicationHealth
	testwait.Eventually(t, testwait.Long, "a positive replication lag", func() (bool, string) {
		h, s := status()
		first = h
		return h.LagSeconds > 0 && h.RemoteTXID < h.LocalTXID, s
	})
	testwait.Eventually(t, testwait.Long, "the lag to grow", func() (bool, string) {
		h, s := status()
		return h.LagSeconds > first.LagSeconds, s
	})
	if h, s := status(); strings.Contains(s, s3.Addr) || strings.Contains(s, s3.Bucket) || strings.Contains(s, s3.AccessKey) {
		t.Errorf("replication status leaks the endpoint, bucket or key: %s (%+v)", s, h)
	}
	testwait.Eventually(t, testwait.Long, "/api/ready to answer 503 after the lag limit", func() (bool, string) {
		code, body := ready()
		return code == http.StatusServiceUnavailable, fmt.Sprintf("%d %s", code, body)
	})
	code, body := ready()
	if code == http.StatusServiceUnavailable && (strings.Contains(body, s3.Addr) || strings.Contains(body, s3.Bucket) || strings.Contains(body, "s3")) {
		t.Errorf("503 body is not redacted: %s", body)
	}
	// Readiness does not gate writes.
	acked = append(acked, e2eCreateMany(t, d, "while-unready", 5)...)

	s3.Start()
	// Litestream backs off exponentially while the replica fails; the
	// outage above is short, so the next attempt comes within a minute.
	testwait.Eventually(t, testwait.Long, "the replica to catch up after the outage", func() (bool, string) {
		h, s := status()
		return h.RemoteTXID == h.LocalTXID, s
	})
	testwait.Eventually(t, testwait.Long, "/api/ready to answer 200 again", func() (bool, string) {
		code, body := ready()
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	e2eStop(t, d)

	restored := proctest.Restore(t, litestream, s3.ReplicaURL("outage"), s3.Credentials())
	e2eRequireAll(t, "replica restored after the outage", e2eInFile(t, restored), acked)
}

// TestHTTPContract checks the public surface of the built binary: the health
// body, bearer-only authentication with identical redacted refusals, token
// separation, JSON 404/405, metrics, and a request id on every response.
func TestHTTPContract(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	ctx := context.Background()
	adminTok, readyTok := d.AdminToken(), d.ReadyToken()

	ids := map[string]bool{}
	do := func(method, path string, hdr http.Header, body []byte) *proctest.Response {
		t.Helper()
		r, err := d.Do(ctx, method, path, hdr, body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		id := r.Header.Get("X-Request-Id")
		switch {
		case id == "":
			t.Errorf("%s %s (%d): no X-Request-Id", method, path, r.Status)
		case ids[id]:
			t.Errorf("%s %s: X-Request-Id %s reused", method, path, id)
		}
		ids[id] = true
		for _, tok := range []string{adminTok, readyTok} {
			if strings.Contains(string(r.Body), tok) {
				t.Errorf("%s %s: the body contains a token", method, path)
			}
		}
		return r
	}
	// errorBody requires exactly {"error":{"code","message"}} and returns code.
	errorBody := func(what string, r *proctest.Response) string {
		t.Helper()
		var outer map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &outer); err != nil || len(outer) != 1 || outer["error"] == nil {
			t.Errorf("%s: body is not {\"error\":{…}}: %s", what, r.Body)
			return ""
		}
		var inner map[string]any
		if err := json.Unmarshal(outer["error"], &inner); err != nil || len(inner) != 2 {
			t.Errorf("%s: error object must hold exactly code and message: %s", what, r.Body)
			return ""
		}
		code, _ := inner["code"].(string)
		msg, _ := inner["message"].(string)
		if code == "" || msg == "" {
			t.Errorf("%s: error code or message missing: %s", what, r.Body)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type %q, want application/json", what, ct)
		}
		return code
	}

	t.Run("health", func(t *testing.T) {
		r := do("GET", "/api/health", nil, nil)
		if r.Status != http.StatusOK || string(r.Body) != "{\"status\":\"ok\"}\n" {
			t.Errorf("GET /api/health = %d %q, want 200 %q", r.Status, r.Body, "{\"status\":\"ok\"}\n")
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("health Content-Type %q", ct)
		}
	})

	t.Run("bearer only", func(t *testing.T) {
		type route struct {
			method, path  string
			token, other  string
			body          func(i int) []byte
			want          int
			createdPrefix string
		}
		create := func(prefix string) func(int) []byte {
			return func(i int) []byte { return []byte(fmt.Sprintf(`{"slug":"%s-%02d"}`, prefix, i)) }
		}
		routes := []route{
			{method: "GET", path: "/api/ready", token: readyTok, other: adminTok, want: 200},
			{method: "GET", path: "/metrics", token: readyTok, other: adminTok, want: 200},
			{method: "GET", path: "/api/admin/status", token: adminTok, other: readyTok, want: 200},
			{method: "GET", path: "/api/admin/environments", token: adminTok, other: readyTok, want: 200},
			{method: "POST", path: "/api/admin/environments", token: adminTok, other: readyTok, want: 201,
				body: create("refused"), createdPrefix: "refused"},
		}
		var refusalBody []byte
		for _, rt := range routes {
			cookie := fmt.Sprintf("chalupa_admin=%s; token=%s; session=%s; Authorization=Bearer%%20%s", rt.token, rt.token, rt.token, rt.token)
			refusals := []struct {
				name string
				path string
				hdr  http.Header
			}{
				{"missing token", rt.path, nil},
				{"wrong token", rt.path, proctest.Bearer(proctest.RandomToken(32))},
				{"empty bearer", rt.path, http.Header{"Authorization": {"Bearer "}}},
				{"token as cookie", rt.path, http.Header{"Cookie": {cookie}}},
				{"token without scheme", rt.path, http.Header{"Authorization": {rt.token}}},
				{"token as basic auth", rt.path, http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+rt.token))}}},
				{"token in query", rt.path + "?token=" + rt.token + "&access_token=" + rt.token, nil},
				{"the other token", rt.path, proctest.Bearer(rt.other)},
			}
			for i, rf := range refusals {
				var body []byte
				if rt.body != nil {
					body = rt.body(i)
				}
				what := fmt.Sprintf("%s %s with %s", rt.method, rt.path, rf.name)
				r := do(rt.method, rf.path, rf.hdr, body)
				if r.Status != http.StatusUnauthorized {
					t.Errorf("%s: status %d, want 401: %s", what, r.Status, r.Body)
					continue
				}
				if code := errorBody(what, r); code != "unauthorized" {
					t.Errorf("%s: code %q, want unauthorized", what, code)
				}
				if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q, want a Bearer challenge", what, r.Header.Get("WWW-Authenticate"))
				}
				// Every refusal looks the same: nothing tells a caller
				// which part was wrong, or which token a route takes.
				if refusalBody == nil {
					refusalBody = r.Body
				} else if string(r.Body) != string(refusalBody) {
					t.Errorf("%s: refusal body %s differs from %s", what, r.Body, refusalBody)
				}
			}
			var body []byte
			if rt.body != nil {
				body = []byte(`{"slug":"contract-accepted"}`)
			}
			if r := do(rt.method, rt.path, proctest.Bearer(rt.token), body); r.Status != rt.want {
				t.Errorf("%s %s with its token: status %d, want %d: %s", rt.method, rt.path, r.Status, rt.want, r.Body)
			}
		}
		listed := e2eListed(t, d)
		for s := range listed {
			if strings.HasPrefix(s, "refused-") {
				t.Errorf("a refused request created environment %s", s)
			}
		}
		if !listed["contract-accepted"] {
			t.Error("the authorized creation is not listed")
		}
	})

	t.Run("not found and not allowed", func(t *testing.T) {
		for _, tc := range []struct {
			method, path string
			hdr          http.Header
			want         int
			code         string
		}{
			{"GET", "/api/no-such-route", nil, 404, "not_found"},
			{"GET", "/no/such/page", nil, 404, "not_found"},
			{"GET", "/api/admin/no-such-operation", proctest.Bearer(adminTok), 404, "not_found"},
			{"DELETE", "/api/health", nil, 405, "method_not_allowed"},
		} {
			what := tc.method + " " + tc.path
			r := do(tc.method, tc.path, tc.hdr, nil)
			if r.Status != tc.want {
				t.Errorf("%s: status %d, want %d: %s", what, r.Status, tc.want, r.Body)
				continue
			}
			if code := errorBody(what, r); code != tc.code {
				t.Errorf("%s: code %q, want %s", what, code, tc.code)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		r := do("GET", "/metrics", proctest.Bearer(readyTok), nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET /metrics: %d", r.Status)
		}
		for _, m := range []string{"chalupa_http_requests_total", "chalupa_replication_lag_seconds"} {
			if !strings.Contains(string(r.Body), "\n"+m) {
				t.Errorf("/metrics lacks %s", m)
			}
		}
		if !strings.Contains(string(r.Body), `route="/api/health"`) {
			t.Error("/metrics does not count requests by route pattern")
		}
	})
}

// TestReplicationHealthTellsTheTruth: with --lag-limit 20s and a write every
// 200 ms, replica outages of 3 s and 15 s never turn /api/ready 503 (a failed
// sync is not a failing replica), a 60 s outage does so only once 20 s have
// passed; the reported lag tracks the outage (within 2 s of its length just
// before the replica returns, not the minutes the age of retained files
// would give); replication catches up and readiness returns; a restore holds
// every acknowledged write. The S3 rows stop versitygw; the file row makes
// the replica path unwritable by putting a file in place of its directory
// (the tests run as root, so permissions would not stop a write).
func TestReplicationHealthTellsTheTruth(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	const lagLimit = 20 * time.Second
	for _, tc := range []struct {
		name   string
		kind   string
		outage time.Duration
	}{
		{"s3 3s", "s3", 3 * time.Second},
		{"s3 15s", "s3", 15 * time.Second},
		{"s3 60s", "s3", 60 * time.Second},
		{"file 15s", "file", 15 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var env map[string]string
			var down, up func()
			var replicaURL string
			var creds map[string]string
			switch tc.kind {
			case "s3":
				s3 := proctest.StartVersityGW(t)
				env, down, up = s3.DaemonEnv("truth"), s3.Stop, s3.Start
				replicaURL, creds = s3.ReplicaURL("truth"), s3.Credentials()
			case "file":
				dir := filepath.Join(t.TempDir(), "replica")
				aside := dir + ".aside"
				replicaURL = "file://" + dir
				env = map[string]string{"CHALUPA_REPLICA_URL": replicaURL}
				down = func() {
					if err := os.Rename(dir, aside); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				up = func() {
					if err := os.Remove(dir); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(aside, dir); err != nil {
						t.Fatal(err)
					}
				}
			}
			d := proctest.StartDaemon(t, bin, env, "--lag-limit", lagLimit.String())
			ctx := context.Background()
			admin := d.Admin()
			health := func() adminapi.ReplicationHealth {
				st, err := admin.GetStatus(ctx)
				if err != nil {
					t.Fatalf("status: %v", err)
				}
				return st.Replication
			}
			ready := func() int {
				r, err := d.Do(ctx, "GET", "/api/ready", proctest.Bearer(d.ReadyToken()), nil)
				if err != nil {
					t.Fatalf("ready: %v", err)
				}
				return r.Status
			}
			acked := e2eCreateMany(t, d, "before", 5)
			testwait.Eventually(t, testwait.Long, "the replica to catch up before the outage", func() (bool, string) {
				h := health()
				return h.LagSeconds == 0 && h.RemoteTXID > 0 && h.RemoteTXID == h.LocalTXID, fmt.Sprintf("%+v", h)
			})

			// Write every 200 ms and sample readiness and lag throughout.
			down()
			start := time.Now()
			var first503 time.Duration
			var lagBeforeUp float64
			n := 0
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for time.Since(start) < tc.outage {
				<-tick.C
				slug := fmt.Sprintf("during-%04d", n)
				n++
				if code, err := e2eCreateEnv(ctx, d, slug); err != nil || code != http.StatusCreated {
					t.Fatalf("create %s during the outage: %d %v", slug, code, err)
				}
				acked = append(acked, slug)
				if ready() == http.StatusServiceUnavailable && first503 == 0 {
					first503 = time.Since(start)
				}
			}
			lagBeforeUp = health().LagSeconds
			outage := time.Since(start)
			up()
			testwait.Eventually(t, testwait.Long, "the replica to catch up after the outage", func() (bool, string) {
				h := health()
				if code := ready(); code == http.StatusServiceUnavailable && first503 == 0 {
					first503 = time.Since(start)
				}
				return h.LagSeconds == 0 && h.RemoteTXID == h.LocalTXID, fmt.Sprintf("%+v", h)
			})
			testwait.Eventually(t, testwait.Long, "/api/ready to answer 200", func() (bool, string) {
				code := ready()
				return code == http.StatusOK, fmt.Sprint(code)
			})
			h := health()
			t.Logf("outage %s: lag just before the replica returned %.1fs; first 503 after %s; %d failed attempts, last error %q",
				outage.Round(100*time.Millisecond), lagBeforeUp, first503.Round(100*time.Millisecond), h.SyncErrors, h.LastError)

			if d := lagBeforeUp - outage.Seconds(); d > 2 || d < -2 {
				t.Errorf("lag %.1fs just before the replica returned, want within 2 s of the %.1fs outage", lagBeforeUp, outage.Seconds())
			}
			switch {
			case tc.outage < lagLimit && first503 != 0:
				t.Errorf("/api/ready answered 503 %s into a %s outage (lag limit %s)", first503, tc.outage, lagLimit)
			case tc.outage > lagLimit && first503 == 0:
				t.Errorf("/api/ready never answered 503 during a %s outage (lag limit %s)", tc.outage, lagLimit)
			case tc.outage > lagLimit && (first503 < lagLimit || first503 > lagLimit+3*time.Second):
				t.Errorf("/api/ready first answered 503 %s into the outage, want just after the %s lag limit", first503, lagLimit)
			}
			// Every failed attempt counts (one S3 attempt can outlast a
			// 3 s outage inside the SDK's own retries, so only the longer
			// rows must see several).
			if tc.outage >= 15*time.Second && h.SyncErrors < 2 {
				t.Errorf("%d sync errors counted over a %s outage, want one per failed attempt", h.SyncErrors, tc.outage)
			}
			e2eStop(t, d)
			restored := proctest.Restore(t, litestream, replicaURL, creds)
			e2eRequireAll(t, "replica restored after the outage", e2eInFile(t, restored), acked)
		})
	}
}

// TestServeStartsWithTheReplicaDown: serve does not wait for the replica.
// With S3 down at start-up it serves at once, acknowledges writes, reports
// replication failing (and /api/ready 503 once the lag limit passes), and
// when S3 comes back it catches up: a restore holds every acknowledged write.
func TestServeStartsWithTheReplicaDown(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	s3 := proctest.StartVersityGW(t)
	s3.Stop()
	started := time.Now()
	d := proctest.Start(t, bin, proctest.Options{Env: s3.DaemonEnv("down-at-start"), Args: []string{"--lag-limit", "3s"}, ReadyTimeout: 10 * time.Second})
	t.Logf("healthy %s after start with the replica down", time.Since(started).Round(10*time.Millisecond))
	ctx := context.Background()
	acked := e2eCreateMany(t, d, "replica-down", 5)
	testwait.Eventually(t, testwait.Long, "status to report replication failing", func() (bool, string) {
		st, err := d.Admin().GetStatus(ctx)
		if err != nil {
			return false, err.Error()
		}
		return st.Replication.Failing && st.Replication.LastError != "", fmt.Sprintf("%+v", st.Replication)
	})
	if r, err := d.Do(ctx, "GET", "/api/ready", proctest.Bearer(d.ReadyToken()), nil); err != nil || r.Status != http.StatusServiceUnavailable {
		t.Fatalf("/api/ready with replication failing: %v %v", r, err)
	}
	s3.Start()
	testwait.Eventually(t, testwait.Long, "the replica to catch up", func() (bool, string) {
		st, err := d.Admin().GetStatus(ctx)
		if err != nil {
			return false, err.Error()
		}
		h := st.Replication
		return !h.Failing && h.LagSeconds == 0 && h.RemoteTXID > 0 && h.RemoteTXID == h.LocalTXID, fmt.Sprintf("%+v", h)
	})
	e2eStop(t, d)
	restored := proctest.Restore(t, litestream, s3.ReplicaURL("down-at-start"), s3.Credentials())
	e2eRequireAll(t, "replica restored after starting with it down", e2eInFile(t, restored), acked)
}
