package proctest

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// RunTimeout bounds one RunCommand.
const RunTimeout = 2 * time.Minute

// RunCommand runs bin args… to completion in dir (empty: a fresh
// t.TempDir()) with a clean environment (PATH, HOME and env) and returns its
// combined stdout and stderr and its exit code. A non-zero exit is returned,
// not a failure; failing to start it, or no exit within RunTimeout, fails
// the test.
func RunCommand(t testing.TB, bin, dir string, env map[string]string, args ...string) (output string, exitCode int) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv(env)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case ctx.Err() != nil:
		t.Fatalf("%s %v did not exit within %s; output:\n%s", bin, args, RunTimeout, out)
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("run %s %v: %v\n%s", bin, args, err, out)
	}
	return "", -1
}
