package telemetry

import (
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// eraseBenchWindows is the environment size BenchmarkErase erases: about
// 14 days of minutes for 20 sessions, in detail and in receipts.
const eraseBenchWindows = 200_000

// BenchmarkErase erases an environment holding eraseBenchWindows source
// windows and as many receipts, and reports the rows removed per second
// and the writer units' (batches') durations in milliseconds, median, 99th
// percentile and longest, each including its commit: the time ingest can
// wait behind an erase (docs/operations.md, "Erasing telemetry").
func BenchmarkErase(b *testing.B) {
	db := storagetest.NewDB(b)
	env := storagetest.Environment(b, db, storage.Environment{Slug: "bench-harbor"})
	storagetest.Deployment(b, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-1"})
	fill := func() {
		err := db.Writer.Do(b.Context(), func(tx storage.Tx) error {
			if _, err := tx.ExecContext(b.Context(), `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?2)
				INSERT INTO telemetry_windows (environment_id, deployment_id, session_id, window_start, received_at, final,
				    cpu_pct_n, cpu_pct_sum, cpu_pct_min, cpu_pct_max, cpu_pct_last,
				    mem_used_bytes_n, mem_used_bytes_sum, mem_used_bytes_min, mem_used_bytes_max, mem_used_bytes_last,
				    gpu_util_pct_n, gpu_util_pct_sum, gpu_util_pct_min, gpu_util_pct_max, gpu_util_pct_last)
				SELECT ?1, 'dep-1', 'sess-' || (i % 20), i * 60000, i * 60000 + 1000, 0,
				    12, 600.5, 10.25, 90.75, 40.5, 12, 1.2e10, 1e9, 1e9, 1e9, 12, 0.5, 0, 0.1, 0 FROM n`,
				env.ID, eraseBenchWindows); err != nil {
				return err
			}
			_, err := tx.ExecContext(b.Context(), `INSERT INTO telemetry_receipts (environment_id, deployment_id, session_id, window_start, body_hash, received_at)
				SELECT environment_id, deployment_id, session_id, window_start, randomblob(32), received_at FROM telemetry_windows WHERE environment_id = ?`, env.ID)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var rows int64
	var longest time.Duration
	var units []time.Duration
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		fill()
		last := time.Now()
		e := &Eraser{DB: db, Clock: clockwork.NewRealClock(), afterBatch: func() error {
			now := time.Now()
			longest = max(longest, now.Sub(last))
			units = append(units, now.Sub(last))
			last = now
			return nil
		}}
		b.StartTimer()
		start := time.Now()
		r, err := e.Erase(b.Context(), "bench-harbor", "erase telemetry bench-harbor")
		elapsed += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if r.Removed.Windows != eraseBenchWindows || r.Removed.Receipts != eraseBenchWindows {
			b.Fatalf("removed %+v", r.Removed)
		}
		rows += r.Removed.Total()
	}
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	slices.Sort(units)
	b.ReportMetric(float64(units[len(units)/2].Microseconds())/1000, "p50-unit-ms")
	b.ReportMetric(float64(units[len(units)*99/100].Microseconds())/1000, "p99-unit-ms")
	b.ReportMetric(float64(longest.Microseconds())/1000, "max-unit-ms")
}
