package light

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/cli"
)

// execCall records one call of a test Forwarder's Exec.
type execCall struct {
	path string
	args []string
}

// testForwarder runs as if this binary were self, with PATH holding
// onPath (or nothing); its Exec records the call and answers exit code.
func testForwarder(self, onPath string, code int) (*Forwarder, *[]execCall) {
	var calls []execCall
	return &Forwarder{
		Executable: func() (string, error) { return self, nil },
		LookPath: func(file string) (string, error) {
			if onPath == "" {
				return "", exec.ErrNotFound
			}
			return onPath, nil
		},
		Exec: func(path string, args []string) error {
			calls = append(calls, execCall{path, slices.Clone(args)})
			return cli.Exit(code, nil)
		},
	}, &calls
}

// runLight runs the light binary's command line in process.
func runLight(f *Forwarder, args ...string) (int, string) {
	var out bytes.Buffer
	env := cli.Env{Args: args, LookupEnv: func(string) (string, bool) { return "", false },
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}
	return cli.Run(env, Wiring(f)), out.String()
}

// executable writes an executable file at dir/name and returns its path.
func executable(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForward: every server command hands its whole command line,
// unchanged (its --help and flags included), to chalupad beside the
// binary, and ends with chalupad's exit status.
func TestForward(t *testing.T) {
	dir := t.TempDir()
	self := executable(t, dir, "chalupa")
	server := executable(t, dir, ServerBinary)
	for _, args := range [][]string{
		{"serve"},
		{"serve", "--pause-loops", "reaper,jobs", "--lag-limit=5m"},
		{"serve", "--help"},
		{"migrate", "status", "--json"},
		{"migrate", "restore-points"},
		{"migrate", "rollback", "--to", "x.db", "--", "-odd"},
		{"config", "check"},
		{"config", "cloud-init", "--env", "demo", "--url", "https://c.example"},
		{"rewrap"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f, calls := testForwarder(self, "", 7)
			code, out := runLight(f, args...)
			if code != 7 || out != "" {
				t.Errorf("exit %d, output %q; want chalupad's 7 and nothing of its own", code, out)
			}
			if len(*calls) != 1 || (*calls)[0].path != server || !slices.Equal((*calls)[0].args, args) {
				t.Fatalf("exec calls %v; want one of %s with %q", *calls, server, args)
			}
		})
	}
}

// TestLightCommandsRunHere: the operator's and the agent's commands run in
// the light binary itself; nothing is forwarded.
func TestLightCommandsRunHere(t *testing.T) {
	dir := t.TempDir()
	f, calls := testForwarder(executable(t, dir, "chalupa"), "", 0)
	executable(t, dir, ServerBinary)
	for _, args := range [][]string{{"version"}, {"--help"}, {"admin", "--help"}, {"agent", "systemd-unit"}, {"migrate", "--help"}} {
		if code, out := runLight(f, args...); code != 0 || out == "" {
			t.Errorf("%v: exit %d, output %q", args, code, out)
		}
	}
	if len(*calls) != 0 {
		t.Fatalf("forwarded %v", *calls)
	}
}

// TestServerLookup: chalupad beside the binary comes first, then PATH;
// the binary itself (a chalupad that is this file) and a file that cannot
// run are passed over; none found is exit 1 naming what to install.
func TestServerLookup(t *testing.T) {
	dir, pathDir := t.TempDir(), t.TempDir()
	self := executable(t, dir, "chalupa")
	onPath := executable(t, pathDir, ServerBinary)
	t.Run("beside first", func(t *testing.T) {
		beside := executable(t, t.TempDir(), ServerBinary)
		f, _ := testForwarder(filepath.Join(filepath.Dir(beside), "chalupa"), onPath, 0)
		if got, err := f.Server(); err != nil || got != beside {
			t.Fatalf("Server() = %q, %v; want %q", got, err, beside)
		}
	})
	t.Run("then PATH", func(t *testing.T) {
		f, _ := testForwarder(self, onPath, 0)
		if got, err := f.Server(); err != nil || got != onPath {
			t.Fatalf("Server() = %q, %v; want %q", got, err, onPath)
		}
	})
	t.Run("not executable", func(t *testing.T) {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, ServerBinary), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _ := testForwarder(filepath.Join(d, "chalupa"), onPath, 0)
		if got, err := f.Server(); err != nil || got != onPath {
			t.Fatalf("Server() = %q, %v; want %q", got, err, onPath)
		}
	})
	t.Run("only a file that is not executable", func(t *testing.T) {
		d := t.TempDir()
		beside := filepath.Join(d, ServerBinary)
		if err := os.WriteFile(beside, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _ := testForwarder(filepath.Join(d, "chalupa"), "", 0)
		if _, err := f.Server(); !errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), beside+" is there but not executable") {
			t.Fatalf("Server() error %v; want ErrNoServer naming %s as not executable", err, beside)
		}
	})
	t.Run("never itself", func(t *testing.T) {
		d := t.TempDir()
		me := executable(t, d, ServerBinary)
		f, _ := testForwarder(me, me, 0)
		if got, err := f.Server(); !errors.Is(err, ErrNoServer) {
			t.Fatalf("Server() = %q, %v; want ErrNoServer", got, err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		f, calls := testForwarder(self, "", 0)
		code, out := runLight(f, "migrate", "status")
		for _, want := range []string{"`chalupa migrate status` is a server command", "chalupad not found beside " + self + " or on PATH",
			"chalupa_VERSION_linux_ARCH.tar.gz", "go build -o chalupad ."} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if code != 1 || len(*calls) != 0 {
			t.Fatalf("exit %d, exec calls %v; want 1 and none", code, *calls)
		}
	})
}

// TestExecFails: a chalupad that cannot be started is exit 1 naming it.
func TestExecFails(t *testing.T) {
	dir := t.TempDir()
	f, _ := testForwarder(executable(t, dir, "chalupa"), "", 0)
	server := executable(t, dir, ServerBinary)
	f.Exec = func(string, []string) error { return errors.New("exec format error") }
	code, out := runLight(f, "serve")
	if code != 1 || !strings.Contains(out, "run "+server+": exec format error") {
		t.Fatalf("exit %d, output %q", code, out)
	}
}

// TestOpenAPIFromServer: `admin api --openapi` prints what chalupad
// prints (the document is built from the server's wire types), and says
// what to install without it.
func TestOpenAPIFromServer(t *testing.T) {
	dir := t.TempDir()
	self := executable(t, dir, "chalupa")
	f, _ := testForwarder(self, "", 0)
	if code, out := runLight(f, "admin", "api", "--openapi"); code != 1 || !strings.Contains(out, "chalupad not found") {
		t.Fatalf("without chalupad: exit %d, output %q", code, out)
	}
	script := "#!/bin/sh\n[ \"$*\" = 'admin api --openapi' ] || exit 9\necho '{\"openapi\":\"3.1.0\"}'\n"
	if err := os.WriteFile(filepath.Join(dir, ServerBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, out := runLight(f, "admin", "api", "--openapi"); code != 0 || out != "{\"openapi\":\"3.1.0\"}\n" {
		t.Fatalf("exit %d, output %q", code, out)
	}
}
