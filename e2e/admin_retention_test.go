package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestAdminRetentionCommands: `admin retention run` runs a pass on the
// daemon and prints its report as a table; `admin retention runs --json`
// lists it with the report's fields. Not parallel: the in-process daemon
// sets the process umask to 077 (daemon.Open), which other tests here must
// not inherit (TestAdminRefusesASecretsFileOthersCanRead writes a 0644
// file), so it runs before the parallel tests and restores the umask.
func TestAdminRetentionCommands(t *testing.T) {
	umask := syscall.Umask(0o022)
	syscall.Umask(umask)
	t.Cleanup(func() { syscall.Umask(umask) })
	now := time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clockwork.NewFakeClockAt(now)})
	old := now.Add(-8 * 24 * time.Hour).Truncate(time.Hour)
	d := storagetest.Deployment(t, p.App.DB, storage.Deployment{LaunchedAt: old})
	for m := range 3 {
		storagetest.TelemetryWindow(t, p.App.DB, storage.TelemetryWindow{EnvironmentID: d.EnvironmentID, DeploymentID: d.ID,
			SessionID: "s1", WindowStart: old.Add(time.Duration(m) * time.Minute)})
	}
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": p.Env[proctest.AdminTokenVar], "CHALUPA_URL": p.URL}
	bin := proctest.BuildBinary(t)

	out, code := proctest.RunCommand(t, bin, "", env, "admin", "retention", "run")
	if code != 0 {
		t.Fatalf("retention run: exit %d: %s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "MINUTE ROLLUPS") {
		t.Fatalf("retention run printed %q, want a header and one row", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 11 || f[1] != "admin" || f[3] != "3" || f[4] != "1" || f[5] != "1" || f[6] != "no" || f[7] != "drained" {
		t.Errorf("row %q: want trigger admin, 3 minute rollups, 1 hourly, 1 batch, no backlog, drained", lines[1])
	}

	out, code = proctest.RunCommand(t, bin, "", env, "admin", "retention", "runs", "--json")
	if code != 0 {
		t.Fatalf("retention runs --json: exit %d: %s", code, out)
	}
	var l adminapi.RetentionRunList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("retention runs --json printed %q: %v", out, err)
	}
	if len(l.Runs) != 1 || l.Runs[0].TelemetryMinuteRollups != 3 || l.Runs[0].Trigger != "admin" || !l.Runs[0].StartedAt.Equal(now) {
		t.Errorf("runs %+v, want the one admin pass at %v with 3 minute rollups", l.Runs, now)
	}
}
