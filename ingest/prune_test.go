package ingest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// metricValue returns the value of the counter or gauge name{labels} in
// reg, and whether it exists.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// Run prunes when the clock passes its schedule (PruneInterval after the
// previous tick), not before, and counts each tick in its metrics.
func TestNoncePrunerRunsOnItsSchedule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := storagetest.NewDB(t)
	start := time.Unix(1767225600, 0)
	clock := clockwork.NewFakeClockAt(start)
	claimOld := func(prefix string, n int) {
		t.Helper()
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			for i := 0; i < n; i++ {
				if err := storage.ClaimNonce(ctx, tx, "env_a_0000000000000001", fmt.Sprintf("%s-%012d", prefix, i), clock.Now().Add(-time.Hour)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	nonces := func() int {
		t.Helper()
		var n int
		if err := db.Read.QueryRowContext(ctx, `SELECT count(*) FROM nonces`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	reg := prometheus.NewRegistry()
	m, err := ingest.NewPruneMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ticks := func() float64 {
		t.Helper()
		v, ok := metricValue(t, reg, "chalupa_nonce_prune_ticks_total", map[string]string{"result": "ok"})
		if !ok {
			t.Fatal("chalupa_nonce_prune_ticks_total{result=\"ok\"} is not registered")
		}
		return v
	}
	parked := func() {
		t.Helper()
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("the pruner set no timer: %v", err)
		}
	}

	claimOld("nonce-first", 3)
	p := &ingest.NoncePruner{DB: db, Clock: clock, Log: zerolog.Nop(), Metrics: m}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()

	parked()
	clock.Advance(ingest.PruneInterval - time.Nanosecond)
	if got := ticks(); got != 0 {
		t.Fatalf("%v ticks one ns before the first run time", got)
	}
	if n := nonces(); n != 3 {
		t.Fatalf("%d nonces before the first run time, want 3", n)
	}
	clock.Advance(time.Nanosecond)
	parked() // the tick is done once the next run is scheduled
	if got := ticks(); got != 1 {
		t.Fatalf("%v ticks after the first run time, want 1", got)
	}
	if n := nonces(); n != 0 {
		t.Fatalf("%d nonces left after the first tick, want 0", n)
	}

	claimOld("nonce-second", 2)
	clock.Advance(ingest.PruneInterval - time.Nanosecond)
	if got := ticks(); got != 1 {
		t.Fatalf("%v ticks before the second run time, want 1", got)
	}
	clock.Advance(time.Nanosecond)
	parked()
	if got := ticks(); got != 2 {
		t.Fatalf("%v ticks after the second run time, want 2", got)
	}
	if v, _ := metricValue(t, reg, "chalupa_nonces_pruned_total", nil); v != 5 {
		t.Errorf("chalupa_nonces_pruned_total = %v, want 5", v)
	}
	if v, ok := metricValue(t, reg, "chalupa_nonce_prune_ticks_total", map[string]string{"result": "error"}); !ok || v != 0 {
		t.Errorf("chalupa_nonce_prune_ticks_total{result=\"error\"} = %v (present %v), want 0", v, ok)
	}
	if _, ok := metricValue(t, reg, "chalupa_nonce_prune_last_tick_duration_seconds", nil); !ok {
		t.Error("chalupa_nonce_prune_last_tick_duration_seconds is not registered")
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v at shutdown, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after its context ended")
	}
}

// One registry holds one pruner's series: a second registration is an error,
// not a silent second set.
func TestPruneMetricsRegisterOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := ingest.NewPruneMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.NewPruneMetrics(reg); err == nil {
		t.Fatal("registering the pruner's metrics twice on one registry succeeded")
	}
}

// TestNoncePrunerSleepsUntilActivity: with Activity set and no nonce
// stored, the pruner holds no timer at all, however far the clock moves; an
// activity signal starts its PruneInterval timer and it ticks; once the
// table is empty again it goes back to waiting without a timer.
func TestNoncePrunerSleepsUntilActivity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	m, err := ingest.NewPruneMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	activity := make(chan struct{}, 1)
	p := &ingest.NoncePruner{DB: db, Clock: clock, Log: zerolog.Nop(), Metrics: m, Activity: activity}
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { done <- p.Run(rctx) }()

	ticksOK := func() float64 {
		v, _ := metricValue(t, reg, "chalupa_nonce_prune_ticks_total", map[string]string{"result": "ok"})
		return v
	}
	idle := func(n int64) {
		t.Helper()
		testwait.Eventually(t, testwait.Short, fmt.Sprintf("Run's idle wait #%d (no timer)", n), func() (bool, string) {
			return p.IdleWaits() >= n, fmt.Sprintf("%d idle waits", p.IdleWaits())
		})
	}
	idle(1)
	clock.Advance(time.Hour)
	if n := ticksOK(); n != 0 {
		t.Fatalf("%v ticks with no nonce stored", n)
	}
	// A stored nonce (already past the window once the clock moves) and
	// the signal ingest sends for it.
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.ClaimNonce(ctx, tx, "env_demo_0000000000000000", "nonce-0000000000000001", clock.Now())
	}); err != nil {
		t.Fatal(err)
	}
	activity <- struct{}{}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("no PruneInterval timer after activity: %v", err)
	}
	clock.Advance(ingest.PruneInterval)
	testwait.Eventually(t, testwait.Short, "one tick after activity and PruneInterval", func() (bool, string) {
		n := ticksOK()
		return n == 1, fmt.Sprintf("%v ticks", n)
	})
	if any, err := storage.AnyNonces(ctx, db.Read); err != nil || any {
		t.Fatalf("nonces left after the tick: %v %v", any, err)
	}
	// Empty again: back to no timer.
	idle(2)
	clock.Advance(time.Hour)
	if n := ticksOK(); n != 1 {
		t.Fatalf("%v ticks after the table emptied, want still 1", n)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
