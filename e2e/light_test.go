package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// buildLight builds the light binary (cmd/chalupa) as dir/chalupa.
func buildLight(t *testing.T, dir string) string {
	t.Helper()
	proctest.FullRunOnly(t, "builds the light chalupa binary")
	bin := filepath.Join(dir, "chalupa")
	build := exec.Command("go", "build", "-o", bin, "./cmd/chalupa")
	build.Dir = proctest.RepoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build cmd/chalupa: %v\n%s", err, b)
	}
	return bin
}

// TestLightForwardsToChalupad: the light binary's server commands replace
// the process with the chalupad beside it (the same process id), with the
// same arguments, environment and standard input, and end with its exit
// status; without a chalupad beside it or on PATH they exit 1 saying what
// to install (docs/operations.md, "Releases").
func TestLightForwardsToChalupad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	light := buildLight(t, dir)
	args := []string{"migrate", "rollback", "--to", "a name with spaces.db", "--confirmation=roll back", "--help"}

	t.Run("missing", func(t *testing.T) {
		cmd := exec.Command(light, args...)
		cmd.Env = []string{"PATH=" + t.TempDir(), "HOME=" + t.TempDir()}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit %v; want 1", err)
		}
		for _, want := range []string{"`chalupa migrate rollback` is a server command", "chalupad not found beside " + light + " or on PATH", "chalupa_VERSION_linux_ARCH.tar.gz"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
			}
		}
	})

	t.Run("forwarded", func(t *testing.T) {
		// The stand-in prints its process id, each argument on a line, a
		// variable and its standard input, and exits 7.
		script := "#!/bin/sh\necho \"pid $$\"\nfor a in \"$@\"; do echo \"arg $a\"; done\necho \"probe $LIGHT_PROBE\"\necho \"stdin $(cat)\"\nexit 7\n"
		if err := os.WriteFile(filepath.Join(dir, "chalupad"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(dir, "chalupad"))
		cmd := exec.Command(light, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LIGHT_PROBE=kept"}
		cmd.Stdin = strings.NewReader("typed")
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Fatalf("exit %v; want chalupad's 7\n%s", err, out)
		}
		want := "pid " + strconv.Itoa(cmd.Process.Pid) + "\n"
		for _, a := range args {
			want += "arg " + a + "\n"
		}
		want += "probe kept\nstdin typed\n"
		if string(out) != want {
			t.Fatalf("chalupad saw:\n%s\nwant:\n%s", out, want)
		}
	})
}

// TestLightServesThroughChalupad: the light binary beside the real
// chalupad gives the server commands' help and runs `serve` as the
// systemd unit and a shell do: the daemon is the same process (its
// /proc/PID/exe is chalupad), answers, and SIGTERM stops it with exit 0.
func TestLightServesThroughChalupad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	light := buildLight(t, dir)
	full := proctest.BuildBinary(t)
	if err := os.Symlink(full, filepath.Join(dir, "chalupad")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"serve", "--help"}, {"migrate", "rollback", "--help"}, {"config", "cloud-init", "--help"}, {"smoke", "--help"}} {
		got, err1 := exec.Command(light, args...).CombinedOutput()
		want, err2 := exec.Command(full, args...).CombinedOutput()
		if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
			t.Errorf("%v: light (%v):\n%s\nfull (%v):\n%s", args, err1, got, err2, want)
		}
	}
	d := proctest.Start(t, light, proctest.Options{})
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(d.Pid), "exe"))
	if err != nil || exe != full {
		t.Errorf("the daemon's process runs %q (%v), want chalupad %q", exe, err, full)
	}
	if _, err := d.Admin().GetStatus(t.Context()); err != nil {
		t.Fatalf("admin status: %v", err)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(); code != 0 {
		t.Fatalf("serve through the light binary exited %d after SIGTERM, want 0\n%s", code, d.Logs())
	}
}
