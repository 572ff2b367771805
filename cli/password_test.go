package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestAdminPasswordSaysWhy: empty standard input says so, and a missing
// --password-file names its path and the reason; neither calls the daemon.
func TestAdminPasswordSaysWhy(t *testing.T) {
	f := newFakeAdmin(t)
	missing := filepath.Join(t.TempDir(), "console-password")
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        []string
	}{
		{"empty standard input", "", nil, []string{"standard input is empty", "--password-file"}},
		{"missing file", "", []string{"--password-file", missing}, []string{missing, "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": cliTestToken, "CHALUPA_URL": f.URL, "HOME": t.TempDir()},
				tc.stdin, append([]string{"admin", "password"}, tc.args...)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
		})
	}
	for _, r := range f.requests() {
		if r.Path == "/api/admin/console/password" {
			t.Fatal("a refused input reached the daemon")
		}
	}
}

// TestPromptInterrupted: Ctrl-C at a prompt ends the read with exit 130
// (SIGTERM: 143), whatever the terminal still holds; a line read before
// any signal is returned as is (docs/operations.md, "Exit codes").
func TestPromptInterrupted(t *testing.T) {
	for _, tc := range []struct {
		sig  os.Signal
		want int
	}{{os.Interrupt, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			r, w := io.Pipe()
			defer w.Close()
			sigs := make(chan os.Signal, 1)
			sigs <- tc.sig
			_, err := readLine(r, 100, sigs)
			var ee *exitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.want {
				t.Fatalf("readLine = %v, want exit %d", err, tc.want)
			}
		})
	}
	line, err := readLine(strings.NewReader("erase telemetry x\r\n"), 100, make(chan os.Signal))
	if err != nil || line != "erase telemetry x" {
		t.Fatalf("readLine = %q, %v", line, err)
	}
}
