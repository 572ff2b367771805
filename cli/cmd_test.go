package cli

// Tests of the command line itself: cli.Run in process, with injected
// arguments, environment and streams, against a fake admin API (httptest on loopback) that records every request, so a
// test can tell "refused before calling the daemon" from "called it".

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/datadir"
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
		case "GET /api/admin/fleet":
			_ = json.NewEncoder(w).Encode(adminapi.Fleet{Environments: []adminapi.FleetEnvironment{{Slug: "demo-harbor", Status: "active",
				Keys: map[string]int{"active": 1, "rotating": 2, "revoked": 3}}}})
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

// cliRun runs the command line in process with the admin token and
// CHALUPA_URL set to url (extra env on top) and returns its combined output
// and exit status.
func cliRun(t *testing.T, url string, extra map[string]string, args ...string) (string, int) {
	t.Helper()
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": cliTestToken, "CHALUPA_URL": url}
	for k, v := range extra {
		env[k] = v
	}
	return runIn(env, "", args...)
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
			if code != ExitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("admin api %s --body %s: exit %d, want %d with %q:\n%s", tc.op, tc.body, code, ExitUsage, tc.want, out)
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
			if code != ExitUsage || !strings.Contains(out, usage) {
				t.Errorf("chalupa %s: exit %d, want %d with\n%s\ngot:\n%s", strings.Join(args, " "), code, ExitUsage, usage, out)
			}
		})
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Fatalf("mistakes reached the daemon: %+v", reqs)
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
		if code != ExitUsage || !strings.Contains(out, tc.want) || !strings.Contains(out, "usage: chalupa admin status [flags]\n") {
			t.Errorf("CHALUPA_URL=%s chalupa %s: exit %d, want %d with %q and the usage line:\n%s", tc.env, strings.Join(args, " "), code, ExitUsage, tc.want, out)
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
	path := filepath.Join(dir, datadir.SecretsFileName)
	if err := os.WriteFile(path, []byte("CHALUPA_ADMIN_TOKEN="+cliTestToken+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Explicitly: an in-process daemon of a parallel test sets the
	// process umask to 077, which WriteFile's mode goes through.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runIn(map[string]string{"CHALUPA_URL": f.URL, "CHALUPA_DATA_DIR": dir}, "", "admin", "status")
	if code != 1 || !strings.Contains(out, "readable by group or others") {
		t.Fatalf("admin with a 0644 secrets.env: exit %d, want 1:\n%s", code, out)
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Fatalf("the token was sent anyway: %+v", reqs)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := runIn(map[string]string{"CHALUPA_URL": f.URL, "CHALUPA_DATA_DIR": dir}, "", "admin", "status"); code != 0 {
		t.Fatalf("admin with a 0600 secrets.env: exit %d:\n%s", code, out)
	}
}

// TestFleetKeysSpelledOut: `admin fleet` names its key counts' columns in
// words, not "a/r/x".
func TestFleetKeysSpelledOut(t *testing.T) {
	f := newFakeAdmin(t)
	out, code := cliRun(t, f.URL, nil, "admin", "fleet")
	if code != 0 || !strings.Contains(out, "KEYS ACTIVE/ROTATING/REVOKED") || !strings.Contains(out, "1/2/3") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestMD5Fingerprint: the fingerprint `admin ssh-key --fingerprint`
// prints is ssh-keygen -l -E md5's (the value below is its output for
// this key).
func TestMD5Fingerprint(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEh9mNr6H8bZxUYl2Gm3Z1vlJ9QYx3dJm0JpD3u3t3Jj chalupa"
	got, err := md5Fingerprint(key)
	if err != nil {
		t.Fatal(err)
	}
	if want := "ce:d5:f9:1f:a9:0e:51:5e:73:55:a4:0a:e2:8c:e3:f5"; got != want {
		t.Fatalf("md5Fingerprint = %s, want %s", got, want)
	}
}
