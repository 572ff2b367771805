package e2e

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// openPTY opens a pseudo-terminal pair: the controller (what a terminal
// emulator holds) and the terminal the command runs on.
func openPTY(t *testing.T) (controller, terminal *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	controller = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	terminal, err = os.OpenFile(filepath.Join("/dev/pts", strconv.Itoa(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	return controller, terminal
}

// onTerminal runs bin args as the foreground process of a terminal of its
// own (its session leader, stdin, stdout and stderr on it), as an operator's
// shell runs a command, and returns everything it wrote there.
func onTerminal(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	controller, terminal := openPTY(t)
	defer controller.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = terminal, terminal, terminal
	// A terminal that would answer colour queries, outside CI (termenv
	// asks no terminal when CI is set).
	cmd.Env = []string{"TERM=xterm-256color", "HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	terminal.Close()
	var out bytes.Buffer
	read := make(chan error, 1)
	go func() { _, err := io.Copy(&out, controller); read <- err }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s %v: %v", bin, args, err)
		}
	case <-time.After(30 * time.Second): // a bound, never a wait: the command ends at once
		_ = cmd.Process.Kill()
		t.Fatalf("%s %v did not end; it wrote %q", bin, args, out.Bytes())
	}
	<-read // EIO once the last holder of the terminal is gone
	return out.Bytes()
}

// TestNoCommandQueriesTheTerminal: on a terminal, chalupa's and
// chalupa-agent's commands write their output and nothing else: no escape
// sequence, so no colour or cursor query that stalls the command while the
// terminal does not answer and swallows what the operator types meanwhile
// (docs/operations.md, "Footprint").
func TestNoCommandQueriesTheTerminal(t *testing.T) {
	t.Parallel()
	chalupa := proctest.BuildBinary(t)
	agent := filepath.Join(t.TempDir(), "chalupa-agent")
	build := exec.Command("go", "build", "-o", agent, "./cmd/chalupa-agent")
	build.Dir = proctest.RepoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build chalupa-agent: %v\n%s", err, b)
	}
	for _, c := range []struct {
		name string
		bin  string
		args []string
	}{
		{"chalupa version", chalupa, []string{"version"}},
		{"chalupa --help", chalupa, []string{"--help"}},
		{"chalupa-agent version", agent, []string{"version"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := onTerminal(t, c.bin, c.args...)
			if i := bytes.IndexByte(out, 0x1b); i >= 0 {
				t.Errorf("%s wrote an escape sequence to the terminal at byte %d: %q…", c.name, i, out[:min(len(out), i+120)])
			}
			if len(bytes.TrimSpace(out)) == 0 {
				t.Errorf("%s wrote nothing", c.name)
			}
		})
	}
}
