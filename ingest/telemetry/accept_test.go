package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// snapshot counts every row window admission can write.
type snapshot struct {
	sessions, windows, receipts, anomalies, hourly, counter int64
	versions                                                int64
}

func take(t *testing.T, db *storage.DB) snapshot {
	t.Helper()
	var s snapshot
	for _, c := range []struct {
		dst   *int64
		query string
	}{
		{&s.sessions, `SELECT count(*) FROM telemetry_sessions`},
		{&s.windows, `SELECT count(*) FROM telemetry_windows`},
		{&s.receipts, `SELECT count(*) FROM telemetry_receipts`},
		{&s.anomalies, `SELECT coalesce(sum(windows), 0) FROM telemetry_anomalies`},
		{&s.hourly, `SELECT count(*) FROM telemetry_hourly`},
		{&s.counter, `SELECT coalesce(sum(telemetry_receipts), 0) FROM deployments`},
		{&s.versions, `SELECT coalesce(sum(version), 0) FROM telemetry_sessions`},
	} {
		if err := db.Read.QueryRow(c.query).Scan(c.dst); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// win returns a valid window for the deployment starting at start.
func win(d storage.Deployment, session string, start time.Time) *protocol.WindowV1 {
	return &protocol.WindowV1{
		EnvironmentSlug: "ignored-here", DeploymentID: d.ID, SessionID: session,
		WindowStart: start, WindowSeconds: 60,
		Metrics: protocol.MetricsV1{CPUPct: &protocol.PercentAggV1{N: 12, Sum: 120, Min: 5, Max: 15, Last: 9}},
	}
}

// accept runs Accept in its own writer unit; a refusal rolls the unit back.
func accept(t *testing.T, db *storage.DB, d storage.Deployment, w *protocol.WindowV1, now time.Time, lim telemetry.Limits) (telemetry.Result, error) {
	t.Helper()
	var res telemetry.Result
	err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		var err error
		res, err = telemetry.Accept(context.Background(), tx, telemetry.Admission{
			EnvironmentID: d.EnvironmentID, Window: w, Now: now, SkewWindow: 300 * time.Second, Limits: lim,
		})
		return err
	})
	return res, err
}

// TestAcceptBoundaries is the boundary table of docs/operations.md,
// "Telemetry": each refused row writes nothing, each admitted row writes
// exactly one window.
func TestAcceptBoundaries(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)
	minute := now.Truncate(time.Minute)
	endedAt := now.Add(-10 * time.Minute)
	for _, tc := range []struct {
		name string
		// start of the window; ended: the deployment ended at endedAt;
		// at: the server's clock (default now).
		start   time.Time
		ended   bool
		at      time.Time
		limits  telemetry.Limits
		preload int // windows of other sessions stored first (cap rows)
		want    error
	}{
		{name: "fresh window", start: minute.Add(-time.Minute)},
		// The window's end (start + 60 s) may be two hours old, not one
		// second more.
		{name: "ends 2h-1s ago", start: minute.Add(-2*time.Hour - time.Minute), at: minute.Add(-time.Second)},
		{name: "ends exactly 2h ago", start: minute.Add(-2*time.Hour - time.Minute), at: minute},
		{name: "ends 2h+1s ago", start: minute.Add(-2*time.Hour - time.Minute), at: minute.Add(time.Second), want: telemetry.ErrWindowTooOld},
		{name: "ends 300s ahead", start: minute.Add(4 * time.Minute), at: minute},
		{name: "ends 301s ahead", start: minute.Add(4 * time.Minute), at: minute.Add(-time.Second), want: telemetry.ErrWindowInFuture},
		{name: "final window 14:59 after teardown", start: endedAt.Truncate(time.Minute).Add(-time.Minute), ended: true, at: endedAt.Add(14*time.Minute + 59*time.Second)},
		{name: "final window 15:00 after teardown", start: endedAt.Truncate(time.Minute).Add(-time.Minute), ended: true, at: endedAt.Add(15 * time.Minute)},
		{name: "final window 15:01 after teardown", start: endedAt.Truncate(time.Minute).Add(-time.Minute), ended: true, at: endedAt.Add(15*time.Minute + time.Second), want: telemetry.ErrDeploymentEnded},
		{name: "window starting after teardown", start: endedAt.Truncate(time.Minute).Add(time.Minute), ended: true, at: endedAt.Add(5 * time.Minute), want: telemetry.ErrDeploymentEnded},
		{name: "receipt cap reached", start: minute.Add(-time.Minute), limits: telemetry.Limits{MaxReceipts: 3}, preload: 3, want: telemetry.ErrTelemetryQuota},
		{name: "receipt cap not yet reached", start: minute.Add(-time.Minute), limits: telemetry.Limits{MaxReceipts: 3}, preload: 2},
		{name: "open session cap reached", start: minute.Add(-time.Minute), limits: telemetry.Limits{OpenSessions: 2}, preload: 2, want: telemetry.ErrSessionQuota},
		{name: "open session cap not reached", start: minute.Add(-time.Minute), limits: telemetry.Limits{OpenSessions: 3}, preload: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := storagetest.NewDB(t)
			d := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: now.Add(-3 * time.Hour)})
			for i := 0; i < tc.preload; i++ {
				storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: d.EnvironmentID, DeploymentID: d.ID,
					SessionID: fmt.Sprintf("pre-%d", i), WindowStart: minute.Add(-time.Hour)})
			}
			if tc.ended {
				storagetest.EndDeployment(t, db, d.EnvironmentID, d.ID, endedAt)
			}
			at := tc.at
			if at.IsZero() {
				at = now
			}
			lim := tc.limits
			if lim == (telemetry.Limits{}) {
				lim = telemetry.DefaultLimits()
			}
			before := take(t, db)
			_, err := accept(t, db, d, win(d, "s1", tc.start), at, lim)
			after := take(t, db)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Accept = %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				if after != before {
					t.Fatalf("a refused window wrote: %+v -> %+v", before, after)
				}
				return
			}
			if after.windows != before.windows+1 || after.receipts != before.receipts+1 || after.counter != before.counter+1 {
				t.Fatalf("an admitted window wrote %+v -> %+v; want one window, one receipt, counter +1", before, after)
			}
		})
	}
}

// TestAcceptRetries: an exact retry is deduplicated and a changed one is a
// conflict, both while the detail row exists and after it is gone (as
// after retention folded it, weeks later, when the age rule alone would
// refuse it).
func TestAcceptRetries(t *testing.T) {
	db := storagetest.NewDB(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: now.Add(-time.Hour)})
	w := win(d, "s1", now.Add(-5*time.Minute))
	if res, err := accept(t, db, d, w, now, telemetry.DefaultLimits()); err != nil || res.Deduplicated || !res.SessionCreated {
		t.Fatalf("first window: %+v %v", res, err)
	}
	changed := *w
	changed.Metrics.CPUPct = &protocol.PercentAggV1{N: 12, Sum: 121, Min: 5, Max: 15, Last: 9}
	finalFlag := *w
	finalFlag.Final = true
	check := func(t *testing.T, at time.Time) {
		before := take(t, db)
		res, err := accept(t, db, d, w, at, telemetry.DefaultLimits())
		if err != nil || !res.Deduplicated {
			t.Fatalf("exact retry: %+v %v; want deduplicated", res, err)
		}
		for _, c := range []*protocol.WindowV1{&changed, &finalFlag} {
			if _, err := accept(t, db, d, c, at, telemetry.DefaultLimits()); !errors.Is(err, telemetry.ErrWindowConflict) {
				t.Fatalf("changed retry: %v; want ErrWindowConflict", err)
			}
		}
		if after := take(t, db); after != before {
			t.Fatalf("retries wrote: %+v -> %+v", before, after)
		}
	}
	t.Run("detail present", func(t *testing.T) { check(t, now) })
	if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		_, err := tx.Exec(`DELETE FROM telemetry_windows`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Run("detail gone, 8 days later", func(t *testing.T) { check(t, now.Add(8*24*time.Hour)) })
	// An equivalent encoding (another time offset) is the same window.
	t.Run("same instant, other offset", func(t *testing.T) {
		o := *w
		o.WindowStart = w.WindowStart.In(time.FixedZone("X", 3600))
		if res, err := accept(t, db, d, &o, now, telemetry.DefaultLimits()); err != nil || !res.Deduplicated {
			t.Fatalf("%+v %v; want deduplicated", res, err)
		}
	})
}

// TestAcceptSessions: windows count on their session's version; a final
// window ends the session; a delayed window clears a terminal summary.
func TestAcceptSessions(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: now.Add(-time.Hour)})
	for i := 10; i >= 2; i-- {
		if _, err := accept(t, db, d, win(d, "s1", now.Add(-time.Duration(i)*time.Minute)), now, telemetry.DefaultLimits()); err != nil {
			t.Fatal(err)
		}
	}
	last := win(d, "s1", now.Add(-time.Minute))
	last.Final = true
	if _, err := accept(t, db, d, last, now, telemetry.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	s, err := storage.TelemetrySessionByID(ctx, db.Read, d.EnvironmentID, d.ID, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Windows != 10 || s.Version != 10 || s.EndReason != storage.SessionEndFinal || !s.EndedAt.Equal(now) ||
		!s.FirstWindowAt.Equal(now.Add(-10*time.Minute)) || !s.LastWindowAt.Equal(now.Add(-time.Minute)) {
		t.Fatalf("session %+v", s)
	}
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := tx.Exec(`UPDATE telemetry_sessions SET summary = '{}', summarized_at = 1`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := accept(t, db, d, win(d, "s1", now.Add(-11*time.Minute)), now, telemetry.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	s, err = storage.TelemetrySessionByID(ctx, db.Read, d.EnvironmentID, d.ID, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Summary != "" || !s.SummarizedAt.IsZero() || s.Version != 11 || !s.FirstWindowAt.Equal(now.Add(-11*time.Minute)) {
		t.Fatalf("a delayed window left summary %q version %d first %v", s.Summary, s.Version, s.FirstWindowAt)
	}
}

// TestAcceptReceiptCapAtTheRealLimit stores 20,160 windows for one
// deployment and shows the next is refused with nothing written.
func TestAcceptReceiptCapAtTheRealLimit(t *testing.T) {
	if telemetry.DefaultMaxReceipts != 20160 {
		t.Fatalf("DefaultMaxReceipts = %d, docs/operations.md says 20,160", telemetry.DefaultMaxReceipts)
	}
	db := storagetest.NewDB(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: now.Add(-time.Hour)})
	lim := telemetry.DefaultLimits()
	// 20,159 receipts seeded in one statement (as Accept would have left
	// them: rows plus the deployment's counter), then the 20,160th window
	// through Accept.
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		if _, err := tx.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20159)
			INSERT INTO telemetry_receipts (environment_id, deployment_id, session_id, window_start, body_hash, received_at)
			SELECT ?, ?, 'seeded', i * 60000, zeroblob(32), ? FROM n`, d.EnvironmentID, d.ID, now.UnixMilli()); err != nil {
			return err
		}
		_, err := tx.Exec(`UPDATE deployments SET telemetry_receipts = 20159 WHERE environment_id = ? AND id = ?`, d.EnvironmentID, d.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := accept(t, db, d, win(d, "s-last", now.Add(-time.Minute)), now, lim); err != nil {
		t.Fatalf("window 20,160: %v", err)
	}
	before := take(t, db)
	if before.receipts != 20160 || before.counter != 20160 {
		t.Fatalf("stored %d receipts (counter %d), want 20,160", before.receipts, before.counter)
	}
	if _, err := accept(t, db, d, win(d, "s-next", now.Add(-time.Minute)), now, lim); !errors.Is(err, telemetry.ErrTelemetryQuota) {
		t.Fatalf("window 20,161: %v, want ErrTelemetryQuota", err)
	}
	if after := take(t, db); after != before {
		t.Fatalf("the refused window wrote: %+v -> %+v", before, after)
	}
}

// TestValidateBoundsKeepTotalsFinite: every metric's range is finite, so
// no sum of samples, windows or points can overflow to an infinity that
// JSON cannot carry (docs/operations.md, "Telemetry").
func TestValidateBoundsKeepTotalsFinite(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    protocol.MetricsV1
		ok   bool
	}{
		{"1 EiB of memory", protocol.MetricsV1{MemUsedBytes: &protocol.BytesAggV1{N: 600, Sum: 600 * (1 << 60), Min: 1 << 60, Max: 1 << 60, Last: 1 << 60}}, true},
		{"beyond 1 EiB", protocol.MetricsV1{MemUsedBytes: &protocol.BytesAggV1{N: 600, Sum: 1.7e308, Min: 0, Max: 1.7e308, Last: 1.7e308}}, false},
		{"load of 1e7", protocol.MetricsV1{Load1: &protocol.LoadAggV1{N: 1, Sum: 1e7, Min: 1e7, Max: 1e7, Last: 1e7}}, false},
		{"10 MW", protocol.MetricsV1{GPUPowerW: &protocol.WattsAggV1{N: 1, Sum: 1e7, Min: 1e7, Max: 1e7, Last: 1e7}}, false},
		{"negative bytes", protocol.MetricsV1{NetRxBytes: &protocol.BytesAggV1{N: 1, Sum: -1, Min: -1, Max: -1, Last: -1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := protocol.WindowV1{EnvironmentSlug: "demo-harbor", DeploymentID: "d", SessionID: "s",
				WindowStart: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), WindowSeconds: 60, Metrics: tc.m}
			err := telemetry.ValidateWindow(&w)
			var inv *telemetry.Invalid
			if tc.ok != (err == nil) || (err != nil && !errors.As(err, &inv)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestCanonicalNegativeZero: -0 and 0 are one value, so one window.
func TestCanonicalNegativeZero(t *testing.T) {
	negZero := math.Copysign(0, -1)
	a := protocol.WindowV1{EnvironmentSlug: "demo-harbor", DeploymentID: "d", SessionID: "s",
		WindowStart: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), WindowSeconds: 60,
		Metrics: protocol.MetricsV1{GPUTempC: &protocol.CelsiusAggV1{N: 1, Sum: 0, Min: 0, Max: 0, Last: 0}}}
	b := a
	b.Metrics.GPUTempC = &protocol.CelsiusAggV1{N: 1, Sum: negZero, Min: negZero, Max: 0, Last: negZero}
	if _, ha := telemetry.CanonicalWindow(&a); func() bool { _, hb := telemetry.CanonicalWindow(&b); return ha != hb }() {
		t.Fatal("a window with -0 hashes differently from the same window with 0")
	}
	if !math.Signbit(b.Metrics.GPUTempC.Sum) {
		t.Fatal("Canonical changed the caller's window")
	}
}
