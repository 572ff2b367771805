package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminPasswordInputs: `admin password` takes one line of standard
// input when it is not a terminal, or --password-file; it refuses a
// password file others can read and a too-short password without calling
// the daemon, and has no flag that takes the password itself.
func TestAdminPasswordInputs(t *testing.T) {
	f := newFakeAdmin(t)
	const pw = "a password from standard input"
	run := func(stdin string, args ...string) (string, int) {
		t.Helper()
		return runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": cliTestToken, "CHALUPA_URL": f.URL, "HOME": t.TempDir()}, stdin, append([]string{"admin", "password"}, args...)...)
	}
	sent := func() []string {
		var out []string
		for _, r := range f.requests() {
			if r.Path == "/api/admin/console/password" {
				out = append(out, r.Body["password"].(string))
			}
		}
		return out
	}
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	tight := filepath.Join(dir, "tight")
	if err := os.WriteFile(loose, []byte("a password in a loose file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Chmod, not WriteFile's mode alone: the umask (077 once any test in
	// this process ran serve's start-up) would make the file private.
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tight, []byte("a password in a private file\r\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("standard input", func(t *testing.T) {
		run(pw + "\nignored\n")
		if got := sent(); len(got) != 1 || got[0] != pw {
			t.Fatalf("sent %q, want [%q]", got, pw)
		}
	})
	t.Run("password file", func(t *testing.T) {
		run("", "--password-file", tight)
		if got := sent(); len(got) != 2 || got[1] != "a password in a private file" {
			t.Fatalf("sent %q", got)
		}
	})
	t.Run("refused without a request", func(t *testing.T) {
		for name, args := range map[string][]string{
			"loose file": {"--password-file", loose},
			"flag value": {"--password", "nope-nope-nope"},
		} {
			if out, code := run("short\n", args...); code == 0 {
				t.Errorf("%s: exit 0:\n%s", name, out)
			}
		}
		if out, code := run("short\n"); code == 0 || !strings.Contains(out, "at least 12") {
			t.Errorf("short password: exit %d:\n%s", code, out)
		}
		if got := sent(); len(got) != 2 {
			t.Fatalf("a refused input reached the daemon: %q", got)
		}
	})
}
