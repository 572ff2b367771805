package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestSmokeEndToEnd runs `chalupa smoke` against the built binary: every
// row passes and it exits 0; with a wrong ready token the readiness row
// fails and the exit status says so; the synthetic deployment is ended and
// its telemetry erased either way; --json prints the rows; without the
// ready token the readiness row is skipped; a --url on localhost against
// a daemon whose origin is 127.0.0.1 is one "origin" row naming both.
func TestSmokeEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("the smoke test's console password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ingestE2ECLI(t, bin, d, "admin", "password", "--password-file", pwFile)
	smoke := func(ready string) (string, int) {
		return proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(),
			"CHALUPA_READY_TOKEN": ready, "CHALUPA_URL": d.URL}, "smoke", "--password-file", pwFile)
	}
	t.Run("every row passes", func(t *testing.T) {
		out, code := smoke(d.ReadyToken())
		if code != 0 || strings.Contains(out, "FAIL") {
			t.Fatalf("smoke exited %d:\n%s", code, out)
		}
		for _, row := range []string{"health", "readiness", "login", "signed heartbeat", "replayed nonce", "signed Monitor window",
			"exact window retry", "changed window retry", "run with artifact", "fleet", "performance", "landing page", "/app signed out", "logout", "cleanup"} {
			if !strings.Contains(out, row+" ") {
				t.Errorf("no %q row:\n%s", row, out)
			}
		}
		if strings.Contains(out, d.AdminToken()) || strings.Contains(out, d.ReadyToken()) {
			t.Fatal("a token appears in the output")
		}
	})
	t.Run("a wrong ready token fails readiness", func(t *testing.T) {
		out, code := smoke("not-the-ready-token-0123456789abcdef")
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		var failed []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.Contains(line, " FAIL ") {
				failed = append(failed, f[0])
			}
		}
		if len(failed) != 1 || failed[0] != "readiness" {
			t.Fatalf("failed rows %q, want only readiness:\n%s", failed, out)
		}
	})
	t.Run("--json", func(t *testing.T) {
		out, code := proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(),
			"CHALUPA_READY_TOKEN": d.ReadyToken(), "CHALUPA_URL": d.URL}, "smoke", "--json", "--password-file", pwFile)
		var rep struct {
			OK   bool `json:"ok"`
			Rows []struct{ Check, Result, Detail string }
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.OK || len(rep.Rows) < 15 {
			t.Fatalf("exit %d, %v, report %+v:\n%s", code, err, rep, out)
		}
		for _, r := range rep.Rows {
			if r.Result != "pass" {
				t.Errorf("row %s: %s (%s)", r.Check, r.Result, r.Detail)
			}
		}
	})
	t.Run("without the ready token readiness is skipped", func(t *testing.T) {
		out, code := smoke("")
		if code != 0 || strings.Contains(out, "FAIL") || !regexp.MustCompile(`(?m)^readiness +skip +no ready token`).MatchString(out) {
			t.Fatalf("exit %d, want 0 with readiness skipped:\n%s", code, out)
		}
	})
	t.Run("localhost against 127.0.0.1 is one origin row", func(t *testing.T) {
		local := strings.Replace(d.URL, "127.0.0.1", "localhost", 1)
		out, code := proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(),
			"CHALUPA_READY_TOKEN": d.ReadyToken(), "CHALUPA_URL": local}, "smoke", "--password-file", pwFile)
		var failed []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[1] == "FAIL" {
				failed = append(failed, f[0])
			}
		}
		if code != 1 || len(failed) != 1 || failed[0] != "origin" || !strings.Contains(out, "is not the daemon's origin "+d.URL) {
			t.Fatalf("exit %d, failed rows %q; want only origin, naming %s:\n%s", code, failed, d.URL, out)
		}
	})
	audit := ingestE2ECLI(t, bin, d, "admin", "api", "adminGetTelemetryAudit")
	if !strings.Contains(audit, `"total": 0`) && !strings.Contains(audit, `"total":0`) {
		t.Fatalf("the smoke run left telemetry behind:\n%s", audit)
	}
}
