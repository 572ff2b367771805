package daemon_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestAdminRunRetention: adminRunRetention runs one pass on the daemon's
// clock and answers its report (windows older than 7 days folded, an old
// heartbeat pruned), adminListRetentionRuns lists it, and concurrent runs
// are serialized: every window is folded exactly once across them.
func TestAdminRunRetention(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clockwork.NewFakeClockAt(now)})
	ctx := context.Background()
	db := p.App.DB

	old := now.Add(-10 * 24 * time.Hour).Truncate(time.Hour)
	d := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: old})
	// 90 minutes: one whole hour plus half of the next, all older than 7
	// days, and one recent window that stays in detail.
	for m := range 90 {
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: d.EnvironmentID, DeploymentID: d.ID,
			SessionID: "s1", WindowStart: old.Add(time.Duration(m) * time.Minute)})
	}
	storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: d.EnvironmentID, DeploymentID: d.ID,
		SessionID: "s1", WindowStart: now.Add(-time.Hour)})
	// The deployment's launch heartbeat is old; a recent one makes it prunable.
	storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: d.EnvironmentID, DeploymentID: d.ID, ReceivedAt: now.Add(-time.Minute)})

	rep, err := p.Admin.RunRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := adminapi.RetentionRun{ID: rep.ID, Trigger: "admin", StartedAt: now, TelemetryMinuteRollups: 90,
		TelemetryHourlyRollups: 2, TelemetryBatches: 1, TelemetryDrainStopReason: "drained", HeartbeatsPruned: 1}
	if rep != want {
		t.Errorf("report\n got %+v\nwant %+v", rep, want)
	}
	list, err := p.Admin.ListRetentionRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Runs) != 1 || list.Runs[0] != rep {
		t.Errorf("runs %+v, want just %+v", list.Runs, rep)
	}

	// Concurrent runs after more old detail arrived: serialized, so the
	// 30 new windows are folded by exactly one of them.
	for m := range 30 {
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: d.EnvironmentID, DeploymentID: d.ID,
			SessionID: "s2", WindowStart: old.Add(time.Duration(m) * time.Minute)})
	}
	var wg sync.WaitGroup
	reports := make(chan adminapi.RetentionRun, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.Admin.RunRetention(ctx)
			if err != nil {
				t.Error(err)
			}
			reports <- r
		}()
	}
	wg.Wait()
	close(reports)
	var folded int64
	for r := range reports {
		folded += r.TelemetryMinuteRollups
	}
	if folded != 30 {
		t.Errorf("concurrent runs folded %d windows in total, want 30", folded)
	}
	list, err = p.Admin.ListRetentionRuns(ctx)
	if err != nil || len(list.Runs) != 5 {
		t.Errorf("%d runs listed (%v), want 5", len(list.Runs), err)
	}
}

// TestRetentionLoopSharesTheAdminWorker: the registered retention loop is
// the worker adminRunRetention runs, so the two never overlap, and it
// runs at :43 on the daemon's clock.
func TestRetentionLoopSharesTheAdminWorker(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 10, 42, 0, 0, time.UTC))
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock, StartLoops: true})
	ctx := context.Background()
	if _, err := p.Admin.RunRetention(ctx); err != nil {
		t.Fatal(err)
	}
	var list adminapi.RetentionRunList
	// Ten seconds an ask: the loops arm their timers when they get to it,
	// and the run at 10:43:00 is stamped within minute 43 either way.
	testwait.Eventually(t, testwait.Short, "the scheduled run beside the admin run", func() (bool, string) {
		clock.Advance(10 * time.Second)
		var err error
		if list, err = p.Admin.ListRetentionRuns(ctx); err != nil {
			t.Fatal(err)
		}
		return len(list.Runs) == 2, fmt.Sprintf("clock %v, runs %+v", clock.Now(), list.Runs)
	})
	if list.Runs[0].Trigger != telemetry.RetentionTriggerSchedule || list.Runs[1].Trigger != telemetry.RetentionTriggerAdmin {
		t.Errorf("runs %+v, want the admin run then the scheduled one", list.Runs)
	}
	if got := list.Runs[0].StartedAt; got.Hour() != 10 || got.Minute() != 43 {
		t.Errorf("scheduled run at %v, want 10:43", got)
	}
}
