package e2e

// End-to-end test of the operations report (docs/operations.md, "Operations report") with the built
// binary as daemon and CLI.

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestOperationsReportEndToEnd: requests served by one daemon process are
// written at its shutdown and reported by the next (`chalupa admin report`,
// table and --json); a since outside 1h–2160h is refused (exit 1,
// bad_since).
func TestOperationsReportEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	if _, err := d.Admin().CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: "report-demo"}); err != nil {
		t.Fatal(err)
	}
	for _, dep := range []string{"dep-a", "dep-b"} {
		if st := opsHeartbeat(t, d, "report-demo", dep); st != 202 {
			t.Fatalf("heartbeat: %d, want 202", st)
		}
	}
	e2eStop(t, d)

	d2 := proctest.StartDaemon(t, bin, d.EnvCopy())
	out, code := opsCLI(t, bin, d2, "admin", "report", "--since", "24h")
	t.Logf("chalupa admin report --since 24h after a restart:\n%s", out)
	if code != 0 || !strings.Contains(out, "ROUTE GROUP") || !strings.Contains(out, "LOOP") || !regexp.MustCompile(`Replica: [1-9][0-9]* objects, [0-9][0-9.]* (B|KiB|MiB|GiB)\b`).MatchString(out) {
		t.Fatalf("admin report: exit %d:\n%s", code, out)
	}
	out, code = opsCLI(t, bin, d2, "admin", "report", "--json")
	var r adminapi.OperationsReport
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("admin report --json: exit %d:\n%s", code, out)
	}
	groups := map[string]int64{}
	for _, g := range r.Routes {
		groups[g.Group] = g.Requests
	}
	// Two signed heartbeats; the environment and two issued keys (at
	// least: readiness probes and the first CLI call add to the others).
	if groups["ingest"] != 2 || groups["admin"] < 3 || r.HoursWithTraffic < 1 || r.Process.WallSeconds <= 0 || r.Database.Bytes <= 0 || !r.Replica.Known || r.Replica.Objects == 0 {
		t.Fatalf("report after a restart: groups %v, %+v", groups, r)
	}
	if out, code = opsCLI(t, bin, d2, "admin", "report", "--since", "1m"); code != 1 || !strings.Contains(out, "bad_since") {
		t.Fatalf("admin report --since 1m: exit %d, want 1 bad_since:\n%s", code, out)
	}
	d2.Signal(syscall.SIGTERM)
	if c := d2.Wait(); c != 0 {
		t.Fatalf("exit %d", c)
	}
}
