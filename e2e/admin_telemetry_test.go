package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// telemetryDaemon is an in-process daemon holding telemetry in two
// environments (demo-harbor: 4 windows; other-harbor: 2), and a runner of
// the built binary against it.
func telemetryDaemon(t *testing.T) (*daemontest.InProcess, func(args ...string) (string, int)) {
	t.Helper()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	for slug, n := range map[string]int{"demo-harbor": 4, "other-harbor": 2} {
		env := storagetest.Environment(t, p.App.DB, storage.Environment{Slug: slug})
		dep := storagetest.Deployment(t, p.App.DB, storage.Deployment{EnvironmentID: env.ID, ID: "dep-1"})
		for i := range n {
			storagetest.TelemetryWindow(t, p.App.DB, storage.TelemetryWindow{EnvironmentID: env.ID, DeploymentID: dep.ID, SessionID: "s1",
				WindowStart: start.Add(time.Duration(i) * time.Minute)})
		}
	}
	bin := proctest.BuildBinary(t)
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": p.Env[proctest.AdminTokenVar], "CHALUPA_URL": p.URL}
	return p, func(args ...string) (string, int) {
		t.Helper()
		return proctest.RunCommand(t, bin, "", env, args...)
	}
}

// TestAdminTelemetryErase: without a terminal the phrase must come with
// --confirm (else exit 2, nothing erased); a wrong phrase is the daemon's
// 422 (exit 1, nothing erased); the right one prints the receipt's counts.
func TestAdminTelemetryErase(t *testing.T) {
	t.Parallel()
	p, run := telemetryDaemon(t)
	audit := func() adminapi.TelemetryAudit {
		au, err := p.Admin.GetTelemetryAudit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return au
	}
	refused := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"admin", "telemetry", "erase", "demo-harbor"}, exitUsage, "stdin is not a terminal: pass --confirm 'erase telemetry demo-harbor'"},
		{[]string{"admin", "telemetry", "erase"}, exitUsage, "give an environment slug or --all"},
		{[]string{"admin", "telemetry", "erase", "demo-harbor", "--all", "--confirm", "erase all telemetry"}, exitUsage, "not both"},
		{[]string{"admin", "telemetry", "erase", "demo-harbor", "--confirm", "erase telemetry other-harbor"}, 1, "confirmation_mismatch"},
		{[]string{"admin", "telemetry", "erase", "--all", "--confirm", "erase telemetry demo-harbor"}, 1, "nothing was erased"},
	}
	for _, tc := range refused {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, code := run(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}
	if au := audit(); au.Tables.Windows != 6 {
		t.Fatalf("refused erases removed rows: %+v", au.Tables)
	}
	out, code := run("admin", "telemetry", "erase", "demo-harbor", "--confirm", "erase telemetry demo-harbor")
	if code != 0 || !strings.Contains(out, "erased telemetry of demo-harbor") || !regexpLine(out, "telemetry_windows", "4") || !regexpLine(out, "telemetry_receipts", "4") {
		t.Fatalf("erase: exit %d:\n%s", code, out)
	}
	if au := audit(); au.Tables.Windows != 2 || au.Tables.Sessions != 1 {
		t.Errorf("after erasing demo-harbor the tables hold %+v; want other-harbor's 2 windows and 1 session", au.Tables)
	}
	out, code = run("admin", "telemetry", "erase", "demo-harbor", "--confirm", "erase telemetry demo-harbor", "--json")
	var r adminapi.TelemetryErasure
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Removed.Total() != 0 {
		t.Errorf("second erase --json: exit %d, removed %+v:\n%s", code, r.Removed, out)
	}
}

// regexpLine reports whether out has a line whose fields are name, value.
func regexpLine(out, name, value string) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name && f[1] == value {
			return true
		}
	}
	return false
}

// TestAdminTelemetryEraseAll: --all erases every environment, verifies
// each receipt and prints the daemon's audit of the five tables, all zero.
func TestAdminTelemetryEraseAll(t *testing.T) {
	t.Parallel()
	p, run := telemetryDaemon(t)
	out, code := run("admin", "telemetry", "erase", "--all", "--confirm", "erase all telemetry")
	if code != 0 {
		t.Fatalf("erase --all: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"erased telemetry of demo-harbor", "erased telemetry of other-harbor", "audit at "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	audit := out[strings.Index(out, "audit at "):]
	if !regexpLine(audit, "total", "0") || !regexpLine(audit, "telemetry_windows", "0") {
		t.Errorf("printed audit is not all zero:\n%s", audit)
	}
	if au, err := p.Admin.GetTelemetryAudit(t.Context()); err != nil || au.Total != 0 {
		t.Errorf("audit after --all: %+v, %v", au, err)
	}
	out, code = run("admin", "telemetry", "audit", "--json")
	var au adminapi.TelemetryAudit
	if code != 0 || json.Unmarshal([]byte(out), &au) != nil || au.Total != 0 {
		t.Errorf("admin telemetry audit --json: exit %d:\n%s", code, out)
	}
}

// TestAdminPerformance: the table shows one row per minute with data and
// the session; --json is the API's answer; a bad step is the daemon's 422
// and an unknown deployment its 404 (exit 1 each).
func TestAdminPerformance(t *testing.T) {
	t.Parallel()
	_, run := telemetryDaemon(t)
	out, code := run("admin", "performance", "demo-harbor", "dep-1", "--since", "1h")
	if code != 0 || !strings.Contains(out, "CPU%") || !strings.Contains(out, "step 1m0s") || !strings.Contains(out, "sessions: 1") || !strings.Contains(out, "50.0") {
		t.Fatalf("admin performance: exit %d:\n%s", code, out)
	}
	out, code = run("admin", "performance", "demo-harbor", "dep-1", "--step", "5m", "--json")
	var p adminapi.DeploymentPerformance
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p.StepSeconds != 300 {
		t.Fatalf("admin performance --json: exit %d:\n%s", code, out)
	}
	var n int64
	for _, pt := range p.Series[0].Points {
		n += pt.N
	}
	if n != 4*12 {
		t.Errorf("cpuPct samples %d, want %d", n, 4*12)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "performance", "demo-harbor", "dep-1", "--step", "7m"}, "bad_param"},
		{[]string{"admin", "performance", "demo-harbor", "dep-404"}, "deployment_not_found"},
	} {
		if out, code := run(tc.args...); code != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 1 with %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	out, code = run("admin", "api", adminapi.OpGetDeploymentPerformance, "--param", "slug=demo-harbor", "--param", "id=dep-1", "--param", "step=1h")
	if code != 0 || !strings.Contains(out, `"stepSeconds":3600`) {
		t.Errorf("admin api with --param: exit %d:\n%s", code, out)
	}
	if out, code := run("admin", "api", adminapi.OpGetDeploymentPerformance, "--param", "slug=demo-harbor"); code != exitUsage || !strings.Contains(out, `needs path parameter "id"`) {
		t.Errorf("admin api without a path parameter: exit %d:\n%s", code, out)
	}
}
