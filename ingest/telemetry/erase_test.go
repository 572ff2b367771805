package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// eraseFixture is two environments with telemetry in all five tables,
// heartbeats and a lifecycle event each.
type eraseFixture struct {
	db     *storage.DB
	clock  *clockwork.FakeClock
	a, b   storage.Environment
	before map[int64]storage.TelemetryCounts
}

// testOtherState is everything an erase must leave alone, as text.
func testOtherState(t *testing.T, db *storage.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, slug, name, status, org_id, created_at, updated_at FROM environments ORDER BY id`,
		`SELECT environment_id, id, status, launched_at, coalesce(ended_at, 0), last_heartbeat_at FROM deployments ORDER BY environment_id, id`,
		`SELECT environment_id, deployment_id, received_at FROM heartbeats ORDER BY 1, 2, 3`,
		`SELECT id, kind, message, occurred_at FROM lifecycle_events WHERE kind != 'telemetry-erased' ORDER BY id`,
		`SELECT key_id, status FROM ingest_keys ORDER BY key_id`,
	} {
		rows, err := db.Read.QueryContext(t.Context(), q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
	}
	return b.String()
}

// testCounts returns the telemetry rows one environment holds.
func testCounts(t *testing.T, db *storage.DB, envID int64) storage.TelemetryCounts {
	t.Helper()
	c, err := storage.TelemetryRowCounts(t.Context(), db.Read, envID)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testExec runs one writer unit of SQL statements.
func testExec(t *testing.T, db *storage.DB, stmts ...string) {
	t.Helper()
	if err := db.Writer.Do(t.Context(), func(tx storage.Tx) error {
		for _, s := range stmts {
			if _, err := tx.ExecContext(context.Background(), s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// testHourlyRow is an INSERT of one hourly rollup with a cpuPct aggregate.
func testHourlyRow(envID int64, dep, sess string, hour time.Time, n int64, sum, lo, hi, last float64) string {
	return fmt.Sprintf(`INSERT INTO telemetry_hourly (environment_id, deployment_id, session_id, hour_start, windows, first_window_at, last_window_at,
		cpu_pct_n, cpu_pct_sum, cpu_pct_min, cpu_pct_max, cpu_pct_last, cpu_pct_last_at)
		VALUES (%d, '%s', '%s', %d, %d, %d, %d, %d, %g, %g, %g, %g, %d)`,
		envID, dep, sess, hour.UnixMilli(), n/12, hour.UnixMilli(), hour.Add(59*time.Minute).UnixMilli(),
		n, sum, lo, hi, last, hour.Add(59*time.Minute).UnixMilli())
}

// testAnomalyRow is an INSERT of one anomaly.
func testAnomalyRow(envID int64, dep, sess, kind string, at time.Time) string {
	return fmt.Sprintf(`INSERT INTO telemetry_anomalies (environment_id, deployment_id, session_id, kind, first_seen_at, last_seen_at, windows)
		VALUES (%d, '%s', '%s', '%s', %d, %d, 30)`, envID, dep, sess, kind, at.UnixMilli(), at.Add(30*time.Minute).UnixMilli())
}

func newEraseFixture(t *testing.T, windowsPerSession int) *eraseFixture {
	t.Helper()
	db := storagetest.NewDB(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := &eraseFixture{db: db, clock: clockwork.NewFakeClockAt(now), before: map[int64]storage.TelemetryCounts{}}
	f.a = storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	f.b = storagetest.Environment(t, db, storage.Environment{Slug: "other-harbor"})
	for _, env := range []storage.Environment{f.a, f.b} {
		for d := range 2 {
			dep := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: fmt.Sprintf("dep-%d", d), LaunchedAt: now.Add(-10 * 24 * time.Hour)})
			storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: dep.ID, ReceivedAt: now.Add(-time.Hour)})
			for s := range 2 {
				sess := fmt.Sprintf("sess-%d", s)
				for w := range windowsPerSession {
					storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: env.ID, DeploymentID: dep.ID, SessionID: sess,
						WindowStart: now.Add(-3*time.Hour + time.Duration(w)*time.Minute)})
				}
				testExec(t, db,
					testHourlyRow(env.ID, dep.ID, sess, now.Add(-9*24*time.Hour), 720, 36000, 10, 90, 40),
					testHourlyRow(env.ID, dep.ID, sess, now.Add(-9*24*time.Hour+time.Hour), 720, 36000, 10, 90, 40),
					testAnomalyRow(env.ID, dep.ID, sess, "gpu-idle", now.Add(-2*time.Hour)))
			}
		}
		testExec(t, db, fmt.Sprintf(`INSERT INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, reason, occurred_at)
			VALUES ('evt-%s', 1, %d, 'dep-0', 'reaper-destroyed', 'idle', %d)`, env.Slug, env.ID, now.UnixMilli()))
		f.before[env.ID] = testCounts(t, db, env.ID)
	}
	return f
}

// TestErase: the receipt's counts equal the rows that existed; the
// environment's five tables are empty afterwards while the other
// environment's telemetry, and every environment's deployments,
// heartbeats, lifecycle events and keys, are untouched; the deployments'
// receipt counters are 0; one telemetry-erased event holds the counts and
// no metric value. At every batch size, down to one row per unit.
func TestErase(t *testing.T) {
	for _, size := range []int{0, 7, 1} {
		t.Run(fmt.Sprintf("batch %d", size), func(t *testing.T) {
			f := newEraseFixture(t, 5)
			want := f.before[f.a.ID]
			if want.Windows != 20 || want.Receipts != 20 || want.Sessions != 4 || want.Hourly != 8 || want.Anomalies != 4 {
				t.Fatalf("fixture holds %+v", want)
			}
			others := testOtherState(t, f.db)
			e := &Eraser{DB: f.db, Clock: f.clock, BatchSize: size}
			r, err := e.Erase(t.Context(), "demo-harbor", "erase telemetry demo-harbor")
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Removed; got != apiCounts(want) {
				t.Errorf("receipt removed %+v, want %+v", got, apiCounts(want))
			}
			if r.Remaining.Total() != 0 || r.Resumed || r.FinishedAt.IsZero() || r.EnvironmentSlug != "demo-harbor" || r.ErasureID == "" {
				t.Errorf("receipt %+v", r)
			}
			if size == 1 && r.Batches < want.Total() {
				t.Errorf("batch size 1 used %d writer units for %d rows", r.Batches, want.Total())
			}
			if got := testCounts(t, f.db, f.a.ID); got.Total() != 0 {
				t.Errorf("erased environment still holds %+v", got)
			}
			if got := testCounts(t, f.db, f.b.ID); got != f.before[f.b.ID] {
				t.Errorf("other environment holds %+v, had %+v", got, f.before[f.b.ID])
			}
			if got := testOtherState(t, f.db); got != others {
				t.Errorf("erase changed what it must keep:\nbefore\n%s\nafter\n%s", others, got)
			}
			var counters string
			if err := f.db.Read.QueryRow(`SELECT group_concat(environment_id || ':' || telemetry_receipts, ',') FROM (SELECT * FROM deployments ORDER BY environment_id, id)`).Scan(&counters); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d:0,%d:0,%d:10,%d:10", f.a.ID, f.a.ID, f.b.ID, f.b.ID); counters != want {
				t.Errorf("receipt counters %s, want %s", counters, want)
			}
			var id, msg string
			var n int
			if err := f.db.Read.QueryRow(`SELECT count(*), max(id), max(message) FROM lifecycle_events WHERE kind = 'telemetry-erased' AND environment_id = ?`, f.a.ID).Scan(&n, &id, &msg); err != nil {
				t.Fatal(err)
			}
			if n != 1 || id != r.ErasureID || !strings.Contains(msg, "20 source windows") || strings.Contains(msg, "36000") {
				t.Errorf("telemetry-erased events: %d, id %s (want %s), message %q", n, id, r.ErasureID, msg)
			}

			again, err := e.Erase(t.Context(), "demo-harbor", "erase telemetry demo-harbor")
			if err != nil {
				t.Fatal(err)
			}
			if again.Removed.Total() != 0 || again.Resumed || again.ErasureID == r.ErasureID {
				t.Errorf("second erase: %+v, want zero counts under a new erasure", again)
			}
		})
	}
}

// TestEraseRefusals: a phrase that is not exactly "erase telemetry
// <slug>" erases nothing; an unknown environment is ErrUnknownEnvironment.
func TestEraseRefusals(t *testing.T) {
	f := newEraseFixture(t, 2)
	e := &Eraser{DB: f.db, Clock: f.clock}
	for _, phrase := range []string{"", "erase telemetry", "erase telemetry other-harbor", "Erase telemetry demo-harbor",
		"erase telemetry demo-harbor ", " erase telemetry demo-harbor", "erase  telemetry demo-harbor", "erase telemetry demo-harbor\n"} {
		t.Run(fmt.Sprintf("%q", phrase), func(t *testing.T) {
			if _, err := e.Erase(t.Context(), "demo-harbor", phrase); !errors.Is(err, ErrConfirmationMismatch) {
				t.Errorf("Erase with %q = %v, want ErrConfirmationMismatch", phrase, err)
			}
			if got := testCounts(t, f.db, f.a.ID); got != f.before[f.a.ID] {
				t.Errorf("after a refused erase the environment holds %+v, had %+v", got, f.before[f.a.ID])
			}
		})
	}
	var erasures int
	if err := f.db.Read.QueryRow(`SELECT count(*) FROM telemetry_erasures`).Scan(&erasures); err != nil || erasures != 0 {
		t.Errorf("refused erases left %d erasures (%v)", erasures, err)
	}
	if _, err := e.Erase(t.Context(), "no-such-env", "erase telemetry no-such-env"); !errors.Is(err, ErrUnknownEnvironment) {
		t.Errorf("Erase of an unknown environment = %v, want ErrUnknownEnvironment", err)
	}
}

// TestEraseResumesAfterACrash: an erase stopped after k batches (a crash
// between writer units) leaves whole batches removed and counted; the
// next erase resumes the same erasure, empties the environment, and its
// receipt counts every row removed since the first call: the totals equal
// the rows that existed. One telemetry-erased event is recorded.
func TestEraseResumesAfterACrash(t *testing.T) {
	crash := errors.New("crash")
	for _, k := range []int{1, 3, 6, 9} {
		t.Run(fmt.Sprintf("after %d batches", k), func(t *testing.T) {
			f := newEraseFixture(t, 6)
			want := apiCounts(f.before[f.a.ID])
			batches := 0
			e := &Eraser{DB: f.db, Clock: f.clock, BatchSize: 5, afterBatch: func() error {
				if batches++; batches == k {
					return crash
				}
				return nil
			}}
			if _, err := e.Erase(t.Context(), "demo-harbor", "erase telemetry demo-harbor"); !errors.Is(err, crash) {
				t.Fatalf("first erase = %v, want the injected crash", err)
			}
			left := testCounts(t, f.db, f.a.ID)
			if left.Total() == 0 || left.Total() < want.Total()-int64(5*k) || left.Total() >= want.Total() {
				t.Errorf("after %d batches of at most 5 the environment holds %d rows of %d", k, left.Total(), want.Total())
			}
			var open, recorded int64
			if err := f.db.Read.QueryRow(`SELECT count(*), coalesce(sum(sessions + windows + hourly + receipts + anomalies), 0) FROM telemetry_erasures WHERE finished_at IS NULL`).Scan(&open, &recorded); err != nil {
				t.Fatal(err)
			}
			if open != 1 || recorded != want.Total()-left.Total() {
				t.Errorf("open erasures %d counting %d rows; want 1 counting %d", open, recorded, want.Total()-left.Total())
			}

			e.afterBatch = nil
			f.clock.Advance(time.Minute)
			r, err := e.Erase(t.Context(), "demo-harbor", "erase telemetry demo-harbor")
			if err != nil {
				t.Fatal(err)
			}
			if !r.Resumed || r.Removed != want || r.Remaining.Total() != 0 || !r.StartedAt.Before(r.FinishedAt) {
				t.Errorf("resumed receipt %+v; want Resumed with removed %+v", r, want)
			}
			if got := testCounts(t, f.db, f.a.ID); got.Total() != 0 {
				t.Errorf("after the resumed erase the environment holds %+v", got)
			}
			var events int
			if err := f.db.Read.QueryRow(`SELECT count(*) FROM lifecycle_events WHERE kind = 'telemetry-erased'`).Scan(&events); err != nil || events != 1 {
				t.Errorf("%d telemetry-erased events (%v), want 1", events, err)
			}
		})
	}
}

// TestAudit: the audit counts every environment's rows per table.
func TestAudit(t *testing.T) {
	f := newEraseFixture(t, 3)
	e := &Eraser{DB: f.db, Clock: f.clock}
	au, err := e.Audit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.before[f.a.ID], f.before[f.b.ID]
	want := adminapi.TelemetryTableCounts{Sessions: a.Sessions + b.Sessions, Windows: a.Windows + b.Windows, Hourly: a.Hourly + b.Hourly,
		Receipts: a.Receipts + b.Receipts, Anomalies: a.Anomalies + b.Anomalies}
	if au.Tables != want || au.Total != want.Total() {
		t.Errorf("audit %+v, want %+v", au, want)
	}
}
