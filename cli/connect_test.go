package cli

// Tests of which daemon the CLI talks to, and that every connection error
// says so (docs/operations.md, "Embedded default").

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/datadir"
)

// deadAddr is a loopback host:port nothing listens on (a listener taken
// and closed again).
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestConnectionErrorNamesTheURL: a daemon that does not answer exits 1
// naming the origin tried and how it was chosen (--url, or the address
// recorded in the data dir by a serve that has gone), never the token, the
// path or the query.
func TestConnectionErrorNamesTheURL(t *testing.T) {
	t.Parallel()
	addr := deadAddr(t)
	recorded := t.TempDir()
	if err := datadir.WriteAddress(recorded, addr); err != nil {
		t.Fatal(err)
	}
	rows := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"--url", map[string]string{"CHALUPA_DATA_DIR": t.TempDir()}, []string{"admin", "--url", "http://" + addr, "status"},
			"no answer from the daemon at http://" + addr + " (--url or CHALUPA_URL) to adminGetStatus: "},
		{"CHALUPA_URL", map[string]string{"CHALUPA_URL": "http://" + addr}, []string{"admin", "environment", "list"},
			"no answer from the daemon at http://" + addr + " (--url or CHALUPA_URL) to adminListEnvironments: "},
		{"serve.addr of a serve gone", map[string]string{"CHALUPA_DATA_DIR": recorded}, []string{"admin", "performance", "demo-harbor", "dep-1", "--since", "6h"},
			"no answer from the daemon at http://" + addr + " (recorded in " + filepath.Join(recorded, datadir.AddressFileName) + ") to "},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"CHALUPA_ADMIN_TOKEN": cliTestToken}
			for k, v := range r.env {
				env[k] = v
			}
			out, code := runIn(env, "", r.args...)
			if code != 1 || !strings.Contains(out, r.want) || !strings.Contains(out, "--url or CHALUPA_URL names another daemon") {
				t.Fatalf("exit %d, want 1 with %q and how to name another daemon:\n%s", code, r.want, out)
			}
			for _, leak := range []string{cliTestToken, "/api/", "since="} {
				if strings.Contains(out, leak) {
					t.Errorf("the error carries %q:\n%s", leak, out)
				}
			}
		})
	}
}

// TestNoFallbackWhenTheDataDirRecordsNoDaemon: with CHALUPA_URL unset and
// a data dir that exists but holds no serve.addr (its serve stopped, or
// never ran there), the CLI refuses before calling anything rather than
// trying http://127.0.0.1:8080, where another daemon may answer: exit 1
// naming the file looked for and how to name a daemon.
func TestNoFallbackWhenTheDataDirRecordsNoDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"admin", "status"}, {"mcp"}, {"smoke"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			out, code := runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": cliTestToken, "CHALUPA_DATA_DIR": dir}, "", args...)
			want := "no daemon address in " + filepath.Join(dir, datadir.AddressFileName)
			if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "--url or CHALUPA_URL") || !strings.Contains(out, "not falling back to "+datadir.DefaultURL) {
				t.Fatalf("exit %d, want 1 with %q and how to name a daemon:\n%s", code, want, out)
			}
			if strings.Contains(out, "no answer from") || strings.Contains(out, "unauthorized") {
				t.Fatalf("a daemon was called anyway:\n%s", out)
			}
		})
	}
}

// TestUnauthorizedNamesTheDaemon: a daemon that refuses the token (another
// daemon than the one meant, say) is named with how it was chosen, so the
// operator can tell a wrong token from a wrong daemon.
func TestUnauthorizedNamesTheDaemon(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	dir := t.TempDir()
	if err := datadir.WriteAddress(dir, strings.TrimPrefix(f.URL, "http://")); err != nil {
		t.Fatal(err)
	}
	out, code := runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": "not-this-daemons-token", "CHALUPA_DATA_DIR": dir}, "", "admin", "status")
	want := "unauthorized: no, from the daemon at " + f.URL + " (recorded in " + filepath.Join(dir, datadir.AddressFileName) + "): is it the daemon you meant?"
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want 1 with %q:\n%s", code, want, out)
	}
}

// TestNonChalupaAnswerNamesTheDaemon: an answer that is not a chalupa
// error body names the origin that gave it.
func TestNonChalupaAnswerNamesTheDaemon(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	defer ts.Close()
	out, code := cliRun(t, ts.URL, nil, "admin", "status")
	want := "the daemon at " + ts.URL + " (--url or CHALUPA_URL) answered HTTP 404"
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want 1 with %q:\n%s", code, want, out)
	}
}

// TestDefaultURLOnlyWithoutADataDir: the default daemon URL is taken only
// when the data dir does not exist, and then says so.
func TestDefaultURLOnlyWithoutADataDir(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nothing-here")
	u, from, err := resolveDaemon("", missing)
	if err != nil || u != datadir.DefaultURL || !strings.Contains(from, "the default: no data directory at "+missing) {
		t.Fatalf("resolveDaemon with no data dir = %q, %q, %v", u, from, err)
	}
	if err := os.Mkdir(missing, 0o700); err != nil {
		t.Fatal(err)
	}
	if u, _, err := resolveDaemon("", missing); err == nil {
		t.Fatalf("resolveDaemon with a data dir and no serve.addr = %q, want a refusal", u)
	}
}
