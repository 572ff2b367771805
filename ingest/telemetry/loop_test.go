package telemetry

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestRetentionRunsHourlyAt43: Run waits for minute 43 of the hour on its
// clock, runs one pass (stored with trigger "schedule"), then waits for
// the next hour's.
func TestRetentionRunsHourlyAt43(t *testing.T) {
	db := storagetest.NewDB(t)
	r, clock := newRetention(db, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	runs := func() []storage.RetentionRun {
		t.Helper()
		rs, err := storage.RecentRetentionRuns(context.Background(), db.Read, 10)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	waitRuns := func(n int) {
		t.Helper()
		testwait.Eventually(t, testwait.Short, fmt.Sprintf("%d runs stored", n), func() (bool, string) {
			got := len(runs())
			return got >= n, fmt.Sprintf("%d runs", got)
		})
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A run that came early would be stamped before 10:43: the check of
	// the stamps below catches it, with no wait here.
	clock.Advance(42*time.Minute + 59*time.Second)
	if n := len(runs()); n != 0 {
		t.Fatalf("%d runs before 10:43", n)
	}
	clock.Advance(time.Second)
	waitRuns(1)
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	waitRuns(2)
	rs := runs()
	if rs[0].Trigger != RetentionTriggerSchedule || !rs[0].StartedAt.Equal(time.Date(2026, 12, 1, 11, 43, 0, 0, time.UTC)) ||
		!rs[1].StartedAt.Equal(time.Date(2026, 12, 1, 10, 43, 0, 0, time.UTC)) {
		t.Errorf("runs %+v, want schedule runs at 10:43 and 11:43", rs)
	}
}

// TestFoldFindsSessionsByIndex: the fold finds its sessions through the
// telemetry_sessions_detail index, not by scanning sessions or detail.
func TestFoldFindsSessionsByIndex(t *testing.T) {
	db := storagetest.NewDB(t)
	rows, err := db.Read.Query(`EXPLAIN QUERY PLAN SELECT environment_id, deployment_id, id FROM telemetry_sessions
		 WHERE detail_from < ? ORDER BY detail_from LIMIT ?`, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "telemetry_sessions_detail") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("plan %q does not walk telemetry_sessions_detail in order", p)
	}
}

// TestPassesNeverOverlap: a second Tick (the operator's run) waits while a
// pass is running (held here between a finalizer's read and write, outside
// any writer unit), and runs once that pass has ended.
func TestPassesNeverOverlap(t *testing.T) {
	db := storagetest.NewDB(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{WindowStart: now.Add(-10 * 24 * time.Hour), Final: true})
	r, _ := newRetention(db, now)
	inside, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	r.afterSnapshot = func(storage.TelemetrySession) {
		if held.CompareAndSwap(false, true) {
			close(inside)
			<-release
		}
	}
	first := make(chan Report, 1)
	go func() {
		rep, err := r.Tick(context.Background(), RetentionTriggerSchedule)
		if err != nil {
			t.Error(err)
		}
		first <- rep
	}()
	<-inside
	second := make(chan Report, 1)
	go func() {
		rep, err := r.Tick(context.Background(), RetentionTriggerAdmin)
		if err != nil {
			t.Error(err)
		}
		second <- rep
	}()
	select {
	case <-second:
		t.Fatal("a second pass ran while the first was running")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if rep := <-first; rep.MinuteRollups != 1 || rep.SessionsFinalized != 1 {
		t.Errorf("first pass %+v, want 1 window folded and 1 session finalized", rep)
	}
	if rep := <-second; rep.MinuteRollups != 0 || rep.SessionsFinalized != 0 || rep.Trigger != RetentionTriggerAdmin {
		t.Errorf("second pass %+v, want an admin pass with nothing left to do", rep)
	}
}
