package cli

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
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
