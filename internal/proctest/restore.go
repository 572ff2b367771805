package proctest

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RestoreTimeout bounds one `litestream restore`.
const RestoreTimeout = 2 * time.Minute

// Restore runs the real `litestream restore -o <dir>/restored.db replicaURL`
// with litestreamBin (usually ToolPath(t, "litestream")) in a clean
// environment: PATH, HOME and env, which carries the credentials for an S3
// replica (S3.Credentials) and may be nil for file://. AWS_CA_BUNDLE is
// never passed (Litestream's S3 client fails with it set). It returns the
// restored file's path in a fresh t.TempDir(). Errors (non-zero exit, no
// exit within RestoreTimeout) fail the test with the command's output.
// Under FastLaneFlag it skips the test instead.
func Restore(t testing.TB, litestreamBin, replicaURL string, env map[string]string) string {
	t.Helper()
	FullRunOnly(t, "runs litestream restore")
	out := filepath.Join(t.TempDir(), "restored.db")
	e := copyEnv(env)
	delete(e, "AWS_CA_BUNDLE")
	ctx, cancel := context.WithTimeout(context.Background(), RestoreTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, litestreamBin, "restore", "-o", out, replicaURL)
	cmd.Env = childEnv(e)
	cmd.SysProcAttr = sysProcAttr()
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("litestream restore %s: %v\n%s", replicaURL, err, b)
	}
	return out
}
