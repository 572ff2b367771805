package main

// Tests of the command line itself: the built binary as a process against a
// fake admin API (httptest on loopback) that records every request, so a
// test can tell "refused before calling the daemon" from "called it".

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest/signer"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// cliTestToken is the admin bearer the fake API expects.
const cliTestToken = "cli-test-admin-token-0123456789abcdef"

// cliTestKey is what the fake API answers to issue and rotate.
var cliTestKey = adminapi.IssuedKey{
	KeyID:           "env_demo-harbor_0123456789abcdef",
	KeyMaterial:     "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
	EnvironmentSlug: "demo-harbor",
	Status:          "active",
}

// cliRequest is one request the fake admin API received.
type cliRequest struct {
	Method, Path string
	Body         map[string]any
}

// fakeAdmin is an admin API that answers every operation with a canned
// success and records what it was asked.
type fakeAdmin struct {
	URL  string
	mu   sync.Mutex
	reqs []cliRequest
	envs []adminapi.Environment
}

func newFakeAdmin(t *testing.T) *fakeAdmin {
	t.Helper()
	f := &fakeAdmin{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+cliTestToken {
			http.Error(w, `{"error":{"code":"unauthorized","message":"no"}}`, http.StatusUnauthorized)
			return
		}
		b, _ := io.ReadAll(r.Body)
		req := cliRequest{Method: r.Method, Path: r.URL.Path}
		_ = json.Unmarshal(b, &req.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		envs := f.envs
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch req.Method + " " + req.Path {
		case "GET /api/admin/status":
			_ = json.NewEncoder(w).Encode(adminapi.Status{Version: "test"})
		case "POST /admin-api/pulumi-state/converge":
			w.WriteHeader(http.StatusAccepted)
			action, _ := req.Body["action"].(string)
			includeData, _ := req.Body["includeData"].(bool)
			_ = json.NewEncoder(w).Encode(adminapi.Job{ID: "01JOBFAKE", Box: "gpu-1", Action: action, IncludeData: includeData, Status: "queued"})
		case "GET /api/admin/environments":
			_ = json.NewEncoder(w).Encode(adminapi.EnvironmentList{Environments: envs})
		case "POST /api/admin/ingest-keys":
			if req.Body["action"] == "revoke" {
				_ = json.NewEncoder(w).Encode(adminapi.RevokedKey{KeyID: cliTestKey.KeyID, EnvironmentSlug: "demo-harbor", Status: "revoked"})
				return
			}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(cliTestKey)
		default:
			http.Error(w, `{"error":{"code":"not_found","message":"no such route"}}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(ts.Close)
	f.URL = ts.URL
	return f
}

func (f *fakeAdmin) requests() []cliRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cliRequest(nil), f.reqs...)
}

// cliRun runs the binary with the admin token and CHALUPA_URL set to url
// (extra env on top) and returns its combined output and exit status.
func cliRun(t *testing.T, url string, extra map[string]string, args ...string) (string, int) {
	t.Helper()
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": cliTestToken, "CHALUPA_URL": url}
	for k, v := range extra {
		env[k] = v
	}
	return proctest.RunCommand(t, proctest.BuildBinary(t), "", env, args...)
}

// TestAdminAPIBodyMustMatchOperation: `admin api` sends a body only under the
// operationId that names what it does. A body whose "action" belongs to
// another ingest-key operation, or any body given to a GET operation, exits
// 2 without calling the daemon; matching bodies go through, with rotate's
// and revoke's action filled in.
func TestAdminAPIBodyMustMatchOperation(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	refused := []struct {
		op, body, want string
	}{
		{adminapi.OpIssueIngestKey, `{"action":"revoke","keyId":"env_demo-harbor_0123456789abcdef"}`, "adminIssueIngestKey takes no action"},
		{adminapi.OpIssueIngestKey, `{"action":"rotate","environmentSlug":"demo-harbor"}`, "adminIssueIngestKey takes no action"},
		{adminapi.OpIssueIngestKey, `{"action":null,"environmentSlug":"demo-harbor"}`, "adminIssueIngestKey takes no action"},
		{adminapi.OpRotateIngestKey, `{"action":"revoke","keyId":"env_demo-harbor_0123456789abcdef"}`, `adminRotateIngestKey takes action "rotate"`},
		{adminapi.OpRotateIngestKey, `{"action":"issue","environmentSlug":"demo-harbor"}`, `adminRotateIngestKey takes action "rotate"`},
		{adminapi.OpRevokeIngestKey, `{"action":"rotate","environmentSlug":"demo-harbor"}`, `adminRevokeIngestKey takes action "revoke"`},
		{adminapi.OpRevokeIngestKey, `{"action":"","keyId":"env_demo-harbor_0123456789abcdef"}`, `adminRevokeIngestKey takes action "revoke"`},
		{adminapi.OpRevokeIngestKey, `null`, "adminRevokeIngestKey body must be a JSON object"},
		{adminapi.OpIssueIngestKey, `["demo-harbor"]`, "adminIssueIngestKey body must be a JSON object"},
		{adminapi.OpGetStatus, `{}`, "adminGetStatus takes no body"},
		{adminapi.OpListFleet, `{"x":1}`, "adminListFleet takes no body"},
	}
	for _, tc := range refused {
		t.Run("refused "+tc.op+" "+tc.body, func(t *testing.T) {
			out, code := cliRun(t, f.URL, nil, "admin", "api", tc.op, "--body", tc.body)
			if code != exitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("admin api %s --body %s: exit %d, want %d with %q:\n%s", tc.op, tc.body, code, exitUsage, tc.want, out)
			}
		})
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Fatalf("refused bodies reached the daemon: %+v", reqs)
	}

	accepted := []struct {
		op, body, action string
	}{
		{adminapi.OpIssueIngestKey, `{"environmentSlug":"demo-harbor"}`, ""},
		{adminapi.OpIssueIngestKey, `{"action":"issue","environmentSlug":"demo-harbor"}`, "issue"},
		{adminapi.OpRotateIngestKey, `{"environmentSlug":"demo-harbor"}`, "rotate"},
		{adminapi.OpRotateIngestKey, `{"action":"rotate","environmentSlug":"demo-harbor"}`, "rotate"},
		{adminapi.OpRevokeIngestKey, `{"keyId":"env_demo-harbor_0123456789abcdef"}`, "revoke"},
	}
	// Rows run in order (no t.Parallel): each checks the request it added.
	for i, tc := range accepted {
		t.Run("accepted "+tc.op+" "+tc.body, func(t *testing.T) {
			out, code := cliRun(t, f.URL, nil, "admin", "api", tc.op, "--body", tc.body)
			if code != 0 {
				t.Fatalf("admin api %s --body %s: exit %d:\n%s", tc.op, tc.body, code, out)
			}
			reqs := f.requests()
			if len(reqs) != i+1 {
				t.Fatalf("after %d accepted calls the daemon saw %d requests", i+1, len(reqs))
			}
			if got, _ := reqs[i].Body["action"].(string); got != tc.action {
				t.Errorf("admin api %s --body %s sent action %q, want %q", tc.op, tc.body, got, tc.action)
			}
		})
	}
	out, code := cliRun(t, f.URL, nil, "admin", "api", adminapi.OpGetStatus)
	if code != 0 {
		t.Fatalf("admin api adminGetStatus without a body: exit %d:\n%s", code, out)
	}
}

// TestAdminAPIMistakesPrintUsage: mistakes `admin api` finds itself exit 2
// with the same usage line kong's parse errors print.
func TestAdminAPIMistakesPrintUsage(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	const usage = "usage: chalupa admin api [<operationId>] [flags]\nrun 'chalupa admin api --help' for details\n"
	cases := [][]string{
		{"admin", "api"},
		{"admin", "api", adminapi.OpCreateEnvironment, "--body", "notjson"},
		{"admin", "api", "adminNoSuchThing"},
		{"admin", "api", adminapi.OpGetStatus, "--body", "{}"},
		{"admin", "api", "--no-such-flag"}, // kong's own parse error, for comparison
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, code := cliRun(t, f.URL, nil, args...)
			if code != exitUsage || !strings.Contains(out, usage) {
				t.Errorf("chalupa %s: exit %d, want %d with\n%s\ngot:\n%s", strings.Join(args, " "), code, exitUsage, usage, out)
			}
		})
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Fatalf("mistakes reached the daemon: %+v", reqs)
	}
}

// TestServeRefusesNonPositiveLagLimit: `serve --lag-limit 0s` (or negative)
// is a usage mistake, not a request for the default. The configuration
// given is unusable, so a serve that got past the flag would exit 1 at once
// instead of starting.
func TestServeRefusesNonPositiveLagLimit(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	env := map[string]string{"CHALUPA_DATA_DIR": t.TempDir(), "CHALUPA_LISTEN": "not-an-address"}
	for _, v := range []string{"0s", "0", "-1m", "999ms"} {
		out, code := proctest.RunCommand(t, bin, "", env, "serve", "--lag-limit="+v)
		want := "chalupa: --lag-limit must be positive and at least 1s (lag is measured in seconds)\nusage: chalupa serve [flags]\n"
		if code != exitUsage || !strings.Contains(out, want) {
			t.Errorf("serve --lag-limit %s: exit %d, want %d with\n%s\ngot:\n%s", v, code, exitUsage, want, out)
		}
	}
}

// TestAdminKeysOutCheckedBeforeIssue: `keys issue|rotate --out DIR` checks
// DIR before asking the daemon for a key, so a refusal leaves no orphan
// active key; a missing DIR is created 0700 and the key saved there.
func TestAdminKeysOutCheckedBeforeIssue(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"issue", "rotate"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			f := newFakeAdmin(t)

			taken := t.TempDir()
			if err := os.WriteFile(filepath.Join(taken, "ingest.key"), []byte("earlier key\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := cliRun(t, f.URL, nil, "admin", "keys", verb, "demo-harbor", "--out", taken)
			if code != 1 || !strings.Contains(out, "already exists") {
				t.Errorf("--out DIR holding ingest.key: exit %d, want 1 naming the existing file:\n%s", code, out)
			}
			if b, _ := os.ReadFile(filepath.Join(taken, "ingest.key")); string(b) != "earlier key\n" {
				t.Errorf("the existing ingest.key was changed to %q", b)
			}

			notDir := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(notDir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, code := cliRun(t, f.URL, nil, "admin", "keys", verb, "demo-harbor", "--out", notDir); code != 1 {
				t.Errorf("--out naming a regular file: exit %d, want 1:\n%s", code, out)
			}

			if os.Geteuid() != 0 { // root writes anywhere
				ro := t.TempDir()
				if err := os.Chmod(ro, 0o500); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chmod(ro, 0o700) })
				out, code := cliRun(t, f.URL, nil, "admin", "keys", verb, "demo-harbor", "--out", ro)
				if code != 1 || !strings.Contains(out, "not writable") {
					t.Errorf("--out DIR not writable: exit %d, want 1 saying so:\n%s", code, out)
				}
			}

			if reqs := f.requests(); len(reqs) != 0 {
				t.Fatalf("keys %s called the daemon although --out was unusable: %+v", verb, reqs)
			}

			fresh := filepath.Join(t.TempDir(), "new", "agent")
			out, code = cliRun(t, f.URL, nil, "admin", "keys", verb, "demo-harbor", "--out", fresh)
			if code != 0 {
				t.Fatalf("--out missing DIR: exit %d:\n%s", code, out)
			}
			fi, err := os.Stat(fresh)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("--out DIR: %v, mode %v, want a 0700 directory", err, fi.Mode().Perm())
			}
			b, err := os.ReadFile(filepath.Join(fresh, "ingest.key"))
			if err != nil || strings.TrimSpace(string(b)) != cliTestKey.KeyMaterial {
				t.Errorf("ingest.key: %q, %v", b, err)
			}
			if strings.Contains(out, cliTestKey.KeyMaterial) {
				t.Errorf("--out printed the key material:\n%s", out)
			}
			entries, _ := os.ReadDir(fresh)
			if len(entries) != 2 {
				t.Errorf("--out DIR holds %d entries, want ingest.key and key-id only", len(entries))
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("the daemon saw %d requests, want 1", n)
			}
		})
	}
}

// TestAdminRefusesUnsafeURL: the admin CLI exits 2 with the usage line (a
// flag value breaking the command's rule, like the agent's --url) before
// sending the token when CHALUPA_URL (or --url) is plain http to a
// non-loopback host or holds user info or a path; the loopback fake API is
// still reached.
func TestAdminRefusesUnsafeURL(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	withPath := f.URL + "/prefix"
	withUser := strings.Replace(f.URL, "http://", "http://operator:hunter2@", 1)
	cases := []struct {
		env  string
		args []string
		want string
	}{
		{"http://203.0.113.7:8080", nil, "refusing to send the admin token over plain http"},
		{f.URL, []string{"--url", "http://203.0.113.7:8080"}, "refusing to send the admin token over plain http"},
		{withUser, nil, "must not hold user info"},
		{withPath, nil, "no path, query or fragment"},
		{f.URL + "?debug=1", nil, "no path, query or fragment"},
	}
	for _, tc := range cases {
		args := append([]string{"admin"}, tc.args...)
		args = append(args, "status")
		out, code := cliRun(t, tc.env, nil, args...)
		if code != exitUsage || !strings.Contains(out, tc.want) || !strings.Contains(out, "usage: chalupa admin status [flags]\n") {
			t.Errorf("CHALUPA_URL=%s chalupa %s: exit %d, want %d with %q and the usage line:\n%s", tc.env, strings.Join(args, " "), code, exitUsage, tc.want, out)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("the refusal repeats the URL's password:\n%s", out)
		}
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Fatalf("refused URLs reached the daemon: %+v", reqs)
	}
	if out, code := cliRun(t, f.URL, nil, "admin", "status"); code != 0 {
		t.Fatalf("admin status against %s: exit %d:\n%s", f.URL, code, out)
	}
}

// TestAdminEnvListEscapesControlBytes: a name holding control bytes (stored
// before the daemon refused them, or from a daemon that does not) is printed
// quoted, never raw to the terminal.
func TestAdminEnvListEscapesControlBytes(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	f.envs = []adminapi.Environment{
		{Slug: "x1", Name: "a\x00b\x1b[31m", Status: "active"},
		{Slug: "x2", Name: "a\u009b31m\x7f", Status: "active"},
		{Slug: "ok", Name: "Präsentation 東京", Status: "active"},
	}
	out, code := cliRun(t, f.URL, nil, "admin", "env", "list")
	if code != 0 {
		t.Fatalf("admin env list: exit %d:\n%s", code, out)
	}
	for _, raw := range []string{"\x00", "\x1b", "\u009b", "\x7f"} {
		if strings.Contains(out, raw) {
			t.Errorf("admin env list printed the raw byte(s) %q:\n%q", raw, out)
		}
	}
	for _, want := range []string{`"a\x00b\x1b[31m"`, `"a\u009b31m\x7f"`, "Präsentation 東京"} {
		if !strings.Contains(out, want) {
			t.Errorf("admin env list output lacks %s:\n%s", want, out)
		}
	}
}

// TestAdminEnvListShowsStorage: admin env list prints each environment's
// storage against its budget (docs/operations.md, "Quotas").
func TestAdminEnvListShowsStorage(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	f.envs = []adminapi.Environment{
		{Slug: "full", Name: "full", Status: "active", StorageBytes: 3 << 30, StorageBudgetBytes: 4 << 30},
		{Slug: "small", Name: "small", Status: "active", StorageBytes: 1536 << 10, StorageBudgetBytes: 4 << 30},
		{Slug: "bench", Name: "bench", Status: "active", StorageBytes: 512},
	}
	out, code := cliRun(t, f.URL, nil, "admin", "env", "list")
	if code != 0 {
		t.Fatalf("admin env list: exit %d:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "STORAGE") {
		t.Fatalf("admin env list has no STORAGE column:\n%s", out)
	}
	for i, want := range []string{"3.0 GiB / 4.0 GiB (75%)", "1.5 MiB / 4.0 GiB (0%)", "512 B / unlimited"} {
		if !strings.HasSuffix(strings.TrimSpace(lines[i+1]), want) {
			t.Errorf("line %d: %q, want it to end %q", i+1, lines[i+1], want)
		}
	}
}

// TestAgentRefusesUnsafeURLAndKeyFile: the agent sends fleet data, so the
// daemon URL follows the admin CLI's rules (an origin; https unless
// loopback; exit 2 with the usage line, as for admin), and a key file that
// is missing or others can read is refused (exit 1) before any request.
func TestAgentRefusesUnsafeURLAndKeyFile(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	dir, key := agentKeyFile(t)
	args := func(url, keyFile string) []string {
		return []string{"agent", "heartbeat", "--url", url, "--key-id", "env_x_0000000000000000", "--key-file", keyFile, "--env", "x1", "--deployment", "d1"}
	}
	for url, want := range map[string]string{
		"http://chalupa.example.net":  "plain http",
		"http://127.0.0.1:9/api":      "origin",
		"https://u:p@chalupa.example": "user info",
	} {
		out, code := proctest.RunCommand(t, bin, "", nil, args(url, key)...)
		if code != exitUsage || !strings.Contains(out, want) || !strings.Contains(out, "usage: chalupa agent heartbeat") {
			t.Errorf("agent --url %s: exit %d, want %d mentioning %q with the usage line:\n%s", url, code, exitUsage, want, out)
		}
	}
	// A key file that is not there is a refusal about the disk, exit 1 like
	// a missing --activity-file, not a usage mistake.
	missing := filepath.Join(dir, "no-such.key")
	if out, code := proctest.RunCommand(t, bin, "", nil, args("http://127.0.0.1:9", missing)...); code != 1 || !strings.Contains(out, "--key-file") || !strings.Contains(out, "no such file") {
		t.Errorf("agent with a missing key file: exit %d, want 1 naming --key-file:\n%s", code, out)
	}
	loose := filepath.Join(dir, "loose.key")
	if err := os.WriteFile(loose, []byte(signer.NewKeyMaterial()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := proctest.RunCommand(t, bin, "", nil, args("http://127.0.0.1:9", loose)...)
	if code != 1 || !strings.Contains(out, "chmod 600") {
		t.Errorf("agent with a 0644 key file: exit %d:\n%s", code, out)
	}
}

// TestServeOnABusyPortTouchesNothing: serve binds its port before it opens
// the data dir, so with the port taken it exits 1 naming CHALUPA_LISTEN and
// leaves the data dir and the replica as they were: no generated secrets, no
// database, nothing replicated.
func TestServeOnABusyPortTouchesNothing(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dataDir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"CHALUPA_DATA_DIR": dataDir, "CHALUPA_LISTEN": ln.Addr().String()}
	out, code := proctest.RunCommand(t, proctest.BuildBinary(t), "", env, "serve")
	if code != 1 || !strings.Contains(out, "listen on CHALUPA_LISTEN") {
		t.Fatalf("serve on a busy port: exit %d, want 1 naming CHALUPA_LISTEN:\n%s", code, out)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve on a busy port created its data dir (stat: %v)", err)
	}
}

// TestAdminNonJSONErrorNamesTheStatus: an answer that is not a chalupa
// error body (a proxy's error page) exits 1 naming the HTTP status rather
// than printing an empty "code: message".
func TestAdminNonJSONErrorNamesTheStatus(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer ts.Close()
	out, code := cliRun(t, ts.URL, nil, "admin", "status")
	if code != 1 || !strings.Contains(out, "HTTP 502") {
		t.Fatalf("admin status against a non-chalupa 502: exit %d, want 1 naming HTTP 502:\n%s", code, out)
	}
}

// TestAdminRefusesASecretsFileOthersCanRead: like serve, the admin CLI will
// not take its token from a secrets.env readable by group or others.
func TestAdminRefusesASecretsFileOthersCanRead(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	dir := t.TempDir()
	path := filepath.Join(dir, daemon.SecretsFileName)
	if err := os.WriteFile(path, []byte("CHALUPA_ADMIN_TOKEN="+cliTestToken+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Explicitly: an in-process daemon of a parallel test sets the
	// process umask to 077, which WriteFile's mode goes through.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := proctest.RunCommand(t, proctest.BuildBinary(t), "", map[string]string{"CHALUPA_URL": f.URL, "CHALUPA_DATA_DIR": dir}, "admin", "status")
	if code != 1 || !strings.Contains(out, "readable by group or others") {
		t.Fatalf("admin with a 0644 secrets.env: exit %d, want 1:\n%s", code, out)
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Fatalf("the token was sent anyway: %+v", reqs)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := proctest.RunCommand(t, proctest.BuildBinary(t), "", map[string]string{"CHALUPA_URL": f.URL, "CHALUPA_DATA_DIR": dir}, "admin", "status"); code != 0 {
		t.Fatalf("admin with a 0600 secrets.env: exit %d:\n%s", code, out)
	}
}

// TestAgentActivityFile: --activity-file names the file whose mtime is the
// last user activity. A file that does not exist is refused at start (exit
// 1, nothing sent) instead of silently counting from the agent's start; one
// that disappears while the agent runs is warned about once on stderr, and
// the last activity seen keeps being reported (never the start time, which
// could be later than it).
func TestAgentActivityFile(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	dir, key := agentKeyFile(t)
	activity := filepath.Join(dir, "activity")
	if err := os.WriteFile(activity, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	seen := time.Now().Add(-7 * time.Minute).Truncate(time.Second)
	if err := os.Chtimes(activity, seen, seen); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []time.Time
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var hb struct {
			Reaper struct {
				LastActivityAt time.Time `json:"lastActivityAt"`
			} `json:"reaper"`
		}
		_ = json.NewDecoder(r.Body).Decode(&hb)
		mu.Lock()
		reported = append(reported, hb.Reaper.LastActivityAt)
		if len(reported) == 1 {
			_ = os.Remove(activity) // gone after the first heartbeat
		}
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"accepted":true}`)
	}))
	defer ts.Close()
	args := func(activityFile string, extra ...string) []string {
		return append([]string{"agent", "heartbeat", "--url", ts.URL, "--key-id", "env_x1_0000000000000000", "--key-file", key,
			"--env", "x1", "--deployment", "d1", "--activity-file", activityFile}, extra...)
	}

	missing := filepath.Join(dir, "no-such-file")
	out, code := proctest.RunCommand(t, bin, "", nil, args(missing)...)
	if code != 1 || !strings.Contains(out, "--activity-file") || !strings.Contains(out, "no such file") {
		t.Errorf("agent --activity-file naming no file: exit %d, want 1 naming the flag:\n%s", code, out)
	}
	mu.Lock()
	if len(reported) != 0 {
		t.Fatalf("the refused agent sent %d heartbeats", len(reported))
	}
	mu.Unlock()

	out, code = proctest.RunCommand(t, bin, "", nil, args(activity, "--every", "20ms", "--count", "3")...)
	if code != 0 {
		t.Fatalf("agent with an activity file removed mid-run: exit %d:\n%s", code, out)
	}
	if n := strings.Count(out, "--activity-file"); n != 1 {
		t.Errorf("the vanished activity file was reported %d times, want once:\n%s", n, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 3 {
		t.Fatalf("%d heartbeats sent, want 3", len(reported))
	}
	for i, got := range reported {
		if !got.Equal(seen) {
			t.Errorf("heartbeat %d reported last activity %s, want the file's mtime %s", i+1, got, seen)
		}
	}
}

// agentKeyFile writes a fresh ingest key (0600) into a new temporary dir for
// the agent tests and returns the dir and the file's path.
func agentKeyFile(t *testing.T) (dir, key string) {
	t.Helper()
	dir = t.TempDir()
	key = filepath.Join(dir, "ingest.key")
	if err := os.WriteFile(key, []byte(signer.NewKeyMaterial()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, key
}
