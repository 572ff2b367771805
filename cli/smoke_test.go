package cli

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestSmokeIsACLICommand: `chalupa smoke` is in cli's own command tree (no
// wiring): a non-synthetic --env is a usage mistake, and a daemon that does
// not answer fails the health row, with the rows as JSON on stdout and
// exit 1.
func TestSmokeIsACLICommand(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	t.Run("bad env", func(t *testing.T) {
		out, code := runIn(nil, "", "smoke", "--url", gone, "--env", "production")
		if code != ExitUsage || !strings.Contains(out, "--env must start with smoke-") || !strings.Contains(out, "usage: chalupa smoke") {
			t.Errorf("exit %d, want %d naming --env:\n%s", code, ExitUsage, out)
		}
	})
	t.Run("no daemon", func(t *testing.T) {
		var stdout, stderr strings.Builder
		code := Run(Env{Args: []string{"smoke", "--url", gone, "--json", "--data-dir", t.TempDir()}, LookupEnv: noEnv,
			Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}, Wiring{})
		var rep smokeReport
		if err := json.Unmarshal([]byte(stdout.String()), &rep); code != 1 || err != nil || rep.OK || len(rep.Rows) == 0 ||
			rep.Rows[0].Step != "health" || rep.Rows[0].Result != smokeFail {
			t.Fatalf("exit %d (%v), want 1 with a failed health row as JSON\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
		}
		if !strings.Contains(stderr.String(), errSmokeFailed.Error()) {
			t.Errorf("stderr lacks %q:\n%s", errSmokeFailed, stderr.String())
		}
	})
}

// TestSmokeWithoutAPasswordSaysWhyConsoleRowsWereNotChecked: without a
// console password the login row fails naming the cause, and the rows that
// need a signed-in console say they were not checked rather than failing
// as if the console were broken ("on the console's environment page:
// false", "GET …/deployments/…: 303", "POST /logout: 403"); what needs no
// console still passes.
func TestSmokeWithoutAPasswordSaysWhyConsoleRowsWereNotChecked(t *testing.T) {
	// The daemon's handler served at its own origin, so the console
	// takes the smoke's requests and only the password is missing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{"CHALUPA_ORIGIN": origin}})
	srv := httptest.NewUnstartedServer(p.App.Server.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	var stdout, stderr strings.Builder
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_READY_TOKEN": p.Env[proctest.ReadyTokenVar], "CHALUPA_URL": origin}
	code := Run(Env{Args: []string{"smoke", "--json", "--data-dir", t.TempDir()}, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}, Wiring{})
	var rep smokeReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil || code != 1 {
		t.Fatalf("exit %d (%v), want 1 (the login row fails)\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	rows := map[string]smokeRow{}
	for _, r := range rep.Rows {
		rows[r.Step] = r
	}
	if r := rows["login"]; r.Result != smokeFail || !strings.Contains(r.Detail, "no console password given") {
		t.Errorf("login row %+v, want a failure naming the missing password", r)
	}
	for _, step := range []string{"console deployment page", "logout"} {
		if r := rows[step]; r.Result != smokeSkip || !strings.Contains(r.Detail, "not signed in") {
			t.Errorf("%s row %+v, want skipped: not signed in", step, r)
		}
	}
	if r := rows["run with artifact"]; r.Result != smokePass || !strings.Contains(r.Detail, "console page not checked (not signed in)") {
		t.Errorf("run row %+v, want a pass that says the console page was not checked", r)
	}
	for _, step := range []string{"signed heartbeat", "fleet", "cleanup"} {
		if r := rows[step]; r.Result != smokePass {
			t.Errorf("%s row %+v, want a pass", step, r)
		}
	}
}
