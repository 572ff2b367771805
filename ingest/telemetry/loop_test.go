package telemetry

import (
	"context"
	"strings"
	"testing"
	"time"

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
		deadline := time.Now().Add(10 * time.Second)
		for len(runs()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d runs stored, want %d", len(runs()), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(42*time.Minute + 59*time.Second)
	time.Sleep(20 * time.Millisecond)
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
