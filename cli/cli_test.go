package cli

import (
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// noEnv is an environment with no variables set.
func noEnv(string) (string, bool) { return "", false }

// runIn runs the command line in process, as the binary would with
// exactly env as its environment and stdin as its standard input, and
// returns what it wrote to standard output and error (interleaved) and its
// exit status. Only cli's own commands are in the tree.
func runIn(env map[string]string, stdin string, args ...string) (string, int) {
	var out proctest.SyncBuffer
	code := Run(Env{Args: args, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &out}, Wiring{})
	return out.String(), code
}

// TestRunUsesTheInjectedEnvironment: flags read their variables and the
// admin token from Env, not the process, so tests in process see exactly
// what they pass.
func TestRunUsesTheInjectedEnvironment(t *testing.T) {
	t.Parallel()
	f := newFakeAdmin(t)
	out, code := runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": cliTestToken, "CHALUPA_URL": f.URL}, "", "admin", "status", "--json")
	if code != 0 || !strings.Contains(out, `"version": "test"`) {
		t.Fatalf("admin status with CHALUPA_URL and the token injected: exit %d:\n%s", code, out)
	}
	if out, code := runIn(map[string]string{"CHALUPA_URL": f.URL, "CHALUPA_DATA_DIR": t.TempDir()}, "", "admin", "status"); code != 1 || !strings.Contains(out, "CHALUPA_ADMIN_TOKEN is unset") {
		t.Fatalf("admin status without the token: exit %d, want 1:\n%s", code, out)
	}
}

// TestRunExitCodes: --help exits 0 through kong's exit (not the process's),
// an unknown flag exits ExitUsage with the usage line, and the output goes
// to the injected streams.
func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Usage: chalupa <command>"},
		{[]string{"admin", "status", "--no-such-flag"}, ExitUsage, "usage: chalupa admin status"},
		{[]string{"version"}, 0, "chalupa dev (commit"},
		{[]string{"--version"}, 0, "chalupa dev (commit"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, code := runIn(nil, "", tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, tc.code, tc.want, out)
			}
			if tc.args[0] == "--version" {
				if same, _ := runIn(nil, "", "version"); out != same {
					t.Errorf("--version printed %q, version %q", out, same)
				}
			}
		})
	}
}
