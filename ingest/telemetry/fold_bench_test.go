package telemetry

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// The fold benchmark (docs/operations.md, "Retention"): retention's
// batched fold against a reference that does the same aggregate as one
// INSERT … SELECT … GROUP BY plus one DELETE in a single transaction, on
// the same driver, pragmas and data. Run it with
//
//	go test ./ingest/telemetry -run '^$' -bench BenchmarkFold -benchtime 1x
//
// CHALUPA_FOLD_BENCH_ROWS sets the source windows (default 2,000,000: a
// few minutes and ~2 GB of temporary files). contrib/test.sh does not run
// it; TestFoldMatchesReference runs the same machinery on 4,000 rows.

// foldBenchNow is the benchmark's clock: every generated window is older
// than 7 days then.
var foldBenchNow = time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC)

// benchSessionMinutes is the minutes of windows per generated session (two
// weeks, every minute, all 13 metrics).
const benchSessionMinutes = 14 * 24 * 60

// buildFoldDB creates a migrated database at path holding rows source
// windows (whole sessions of sessionMinutes, the last one shorter),
// generated inside SQLite so that setting up 2 M rows takes seconds.
func buildFoldDB(tb testing.TB, path string, rows, sessionMinutes int) {
	tb.Helper()
	ctx := context.Background()
	db, err := storage.Open(ctx, path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Migrate(ctx, storage.MigrateOptions{Logger: zerolog.Nop()}); err != nil {
		tb.Fatal(err)
	}
	env := storagetest.Environment(tb, db, storage.Environment{})
	start := foldBenchNow.Add(-30 * 24 * time.Hour).Truncate(time.Hour)
	var cols, vals strings.Builder
	for i, m := range storage.TelemetryMetrics {
		fmt.Fprintf(&cols, ", %[1]s_n, %[1]s_sum, %[1]s_min, %[1]s_max, %[1]s_last", m.Column)
		// Deterministic, integer-valued, varying per minute and metric.
		fmt.Fprintf(&vals, ", 12, 12 * ((i * %[1]d) %% 97 + 0.25), (i * %[1]d) %% 97 - 2.75, (i * %[1]d) %% 97 + 3.25, (i * %[1]d + 1) %% 97 + 0.25", 7+i)
	}
	for s := 0; s*sessionMinutes < rows; s++ {
		n := min(sessionMinutes, rows-s*sessionMinutes)
		dep := storagetest.Deployment(tb, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: start})
		sess := fmt.Sprintf("bench-%d", s)
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m WHERE i + 1 < ?4)
				INSERT INTO telemetry_windows (environment_id, deployment_id, session_id, window_start, received_at, final%s)
				SELECT ?1, ?2, ?3, ?5 + i * 60000, ?5 + i * 60000 + 60000, 0%s FROM m`, cols.String(), vals.String()),
				env.ID, dep.ID, sess, n, start.UnixMilli()); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO telemetry_sessions (environment_id, deployment_id, id, created_at,
				first_window_at, last_window_at, windows, detail_from, version) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?4, ?6)`,
				env.ID, dep.ID, sess, start.UnixMilli(), start.Add(time.Duration(n-1)*time.Minute).UnixMilli(), n)
			return err
		}); err != nil {
			tb.Fatal(err)
		}
	}
}

// referenceFoldSQL is the reference: every foldable window of every
// session aggregated per hour in one INSERT … SELECT … GROUP BY (the same
// columns the fold writes, last values read back by primary key), for an
// empty telemetry_hourly.
func referenceFoldSQL() string {
	var agg, cols, vals strings.Builder
	for _, m := range storage.TelemetryMetrics {
		c := m.Column
		fmt.Fprintf(&agg, `, sum(%[1]s_n) AS %[1]s_n, sum(%[1]s_sum) AS %[1]s_sum, min(%[1]s_min) AS %[1]s_min, max(%[1]s_max) AS %[1]s_max,
		   max(CASE WHEN %[1]s_n IS NOT NULL THEN window_start END) AS %[1]s_last_at`, c)
		fmt.Fprintf(&cols, `, %[1]s_n, %[1]s_sum, %[1]s_min, %[1]s_max, %[1]s_last, %[1]s_last_at`, c)
		fmt.Fprintf(&vals, `, g.%[1]s_n, g.%[1]s_sum, g.%[1]s_min, g.%[1]s_max,
		   (SELECT w.%[1]s_last FROM telemetry_windows w WHERE w.environment_id = g.e AND w.deployment_id = g.d
		     AND w.session_id = g.s AND w.window_start = g.%[1]s_last_at), g.%[1]s_last_at`, c)
	}
	return fmt.Sprintf(`WITH g AS (
		 SELECT environment_id AS e, deployment_id AS d, session_id AS s, window_start - window_start %% 3600000 AS hour_start,
		   count(*) AS windows, min(window_start) AS first_at, max(window_start) AS last_at,
		   sum(gpu_util_pct_n IS NOT NULL AND gpu_util_pct_max < 5) AS gpu_idle%s
		 FROM telemetry_windows WHERE window_start < ?1 GROUP BY 1, 2, 3, 4)
		INSERT INTO telemetry_hourly (environment_id, deployment_id, session_id, hour_start, windows, first_window_at,
		   last_window_at, gpu_idle_windows%s)
		SELECT g.e, g.d, g.s, g.hour_start, g.windows, g.first_at, g.last_at, g.gpu_idle%s FROM g`,
		agg.String(), cols.String(), vals.String())
}

// referenceFold runs the reference in one writer unit and returns the
// source rows it removed.
func referenceFold(tb testing.TB, db *storage.DB, before time.Time) int64 {
	tb.Helper()
	var n int64
	if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		if _, err := tx.ExecContext(context.Background(), referenceFoldSQL(), before.UnixMilli()); err != nil {
			return err
		}
		res, err := tx.ExecContext(context.Background(), `DELETE FROM telemetry_windows WHERE window_start < ?`, before.UnixMilli())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return n
}

// retentionFold runs retention passes until drained (no drain deadline or
// batch cap in the way) and returns the source rows they folded.
func retentionFold(tb testing.TB, db *storage.DB) int64 {
	tb.Helper()
	r := &Retention{DB: db, Clock: clockwork.NewFakeClockAt(foldBenchNow), Log: zerolog.Nop(), MaxBatches: 1 << 30}
	var n int64
	for {
		rep, err := r.Tick(context.Background(), RetentionTriggerSchedule)
		if err != nil {
			tb.Fatal(err)
		}
		n += rep.MinuteRollups
		if !rep.BacklogPending {
			return n
		}
	}
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	src, err := os.Open(from)
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		tb.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		tb.Fatal(err)
	}
}

// openCopy copies the checkpointed base database into dir and opens it.
func openCopy(tb testing.TB, base, dir, name string) *storage.DB {
	tb.Helper()
	path := filepath.Join(dir, name)
	copyFile(tb, base, path)
	db, err := storage.Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

// hourlyDump is telemetry_hourly as text, row by row in key order.
func hourlyDump(tb testing.TB, db *storage.DB) []string {
	tb.Helper()
	rows, err := db.Read.Query(`SELECT * FROM telemetry_hourly ORDER BY environment_id, deployment_id, session_id, hour_start`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		v := make([]any, len(cols))
		p := make([]any, len(cols))
		for i := range v {
			p[i] = &v[i]
		}
		if err := rows.Scan(p...); err != nil {
			tb.Fatal(err)
		}
		out = append(out, fmt.Sprint(v...))
	}
	return out
}

// TestFoldMatchesReference: on the benchmark's data (4,000 windows in
// sessions of 1,500 minutes), retention's batched fold leaves exactly the rollups and the
// detail the one-statement reference does.
func TestFoldMatchesReference(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.db")
	buildFoldDB(t, base, 4000, 1500)
	ref := openCopy(t, base, dir, "ref.db")
	defer ref.Close()
	ret := openCopy(t, base, dir, "ret.db")
	defer ret.Close()
	nRef := referenceFold(t, ref, FoldCutoff(foldBenchNow))
	nRet := retentionFold(t, ret)
	if nRef != nRet || nRef == 0 {
		t.Fatalf("reference folded %d rows, retention %d", nRef, nRet)
	}
	a, b := hourlyDump(t, ref), hourlyDump(t, ret)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("rollups differ: reference %d rows, retention %d rows", len(a), len(b))
	}
}

var foldBase struct {
	once sync.Once
	path string
	rows int
}

// BenchmarkFold reports, per iteration, the rows per second of retention's
// fold and of the reference over the same CHALUPA_FOLD_BENCH_ROWS windows,
// and their ratio (target ≥ 0.8).
func BenchmarkFold(b *testing.B) {
	rows := 2_000_000
	if s := os.Getenv("CHALUPA_FOLD_BENCH_ROWS"); s != "" {
		var err error
		if rows, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	foldBase.once.Do(func() {
		dir, err := os.MkdirTemp("", "chalupa-fold-bench-")
		if err != nil {
			b.Fatal(err)
		}
		foldBase.path, foldBase.rows = filepath.Join(dir, "base.db"), rows
		start := time.Now()
		buildFoldDB(b, foldBase.path, rows, benchSessionMinutes)
		b.Logf("built %d windows in %v (%d bytes)", rows, time.Since(start).Round(time.Millisecond), fileSize(foldBase.path))
	})
	b.Cleanup(func() { os.RemoveAll(filepath.Dir(foldBase.path)) })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		ref := openCopy(b, foldBase.path, dir, "ref.db")
		ret := openCopy(b, foldBase.path, dir, "ret.db")
		b.StartTimer()
		t0 := time.Now()
		nRef := referenceFold(b, ref, FoldCutoff(foldBenchNow))
		refDur := time.Since(t0)
		t0 = time.Now()
		nRet := retentionFold(b, ret)
		retDur := time.Since(t0)
		b.StopTimer()
		if nRef != nRet || nRet != int64(foldBase.rows) {
			b.Fatalf("reference folded %d, retention %d, of %d", nRef, nRet, foldBase.rows)
		}
		ref.Close()
		ret.Close()
		refRate, retRate := float64(nRef)/refDur.Seconds(), float64(nRet)/retDur.Seconds()
		b.ReportMetric(retRate, "retention-rows/s")
		b.ReportMetric(refRate, "reference-rows/s")
		b.ReportMetric(retRate/refRate, "ratio")
		b.StartTimer()
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// BenchmarkDeploymentDayBytes reports the database bytes one
// deployment-day of minute windows costs (1,440 windows with all 13
// metrics, stored as ingest stores them: detail row, receipt, session),
// measured as the growth of a vacuumed database over 7 deployment-days.
func BenchmarkDeploymentDayBytes(b *testing.B) {
	const days = 7
	for i := 0; i < b.N; i++ {
		db := storagetest.NewDB(b)
		size := func() int64 {
			var pages, pageSize int64
			if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error { return nil }); err != nil {
				b.Fatal(err)
			}
			if _, err := db.Read.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
				b.Logf("checkpoint: %v", err)
			}
			if err := db.Read.QueryRow(`SELECT page_count * page_size, page_size FROM pragma_page_count, pragma_page_size`).Scan(&pages, &pageSize); err != nil {
				b.Fatal(err)
			}
			return pages
		}
		before := size()
		dep := storagetest.Deployment(b, db, storage.Deployment{})
		start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		var ws []storage.TelemetryWindow
		for m := range days * 1440 {
			var set storage.TelemetryMetricSet
			for j := range set {
				v := float64((m*(7+j))%97) + 0.25
				set[j] = &storage.MetricAgg{N: 12, Sum: 12 * v, Min: v - 3, Max: v + 3, Last: v + 1}
			}
			at := start.Add(time.Duration(m) * time.Minute)
			ws = append(ws, storage.TelemetryWindow{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID, SessionID: "day",
				WindowStart: at, ReceivedAt: at.Add(time.Minute), Metrics: set})
		}
		insertWindows(b, db, ws)
		after := size()
		b.ReportMetric(float64(after-before)/days, "bytes/deployment-day")
		var detail int64
		if err := db.Read.QueryRow(`SELECT sum(pgsize) FROM dbstat WHERE name IN ('telemetry_windows')`).Scan(&detail); err == nil {
			b.ReportMetric(float64(detail)/days, "window-bytes/deployment-day")
		}
	}
}
