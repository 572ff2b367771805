package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// The retention loop's queries over the telemetry tables (docs/operations.md,
// "Retention"): the fold of minute source windows into hourly rollups, and
// the terminal-summary finalizer's reads and guarded write. They live
// together because each touches several telemetry tables in one step.

// hourMS is one hour in the schema's unit.
const hourMS = int64(time.Hour / time.Millisecond)

// gpuIdleBelow is the gpuUtilPct max under which a window counts as GPU
// idle (docs/operations.md, "Retention", terminal summary).
const gpuIdleBelow = 5

// TelemetrySessionRef names one telemetry session.
type TelemetrySessionRef struct {
	EnvironmentID int64
	DeploymentID  string
	ID            string
}

// FoldableTelemetrySessions returns up to limit sessions that still hold
// detail older than before (telemetry_sessions.detail_from < before), the
// oldest detail first, through the telemetry_sessions_detail index: the
// fold never scans detail to find work.
func FoldableTelemetrySessions(ctx context.Context, q Querier, before time.Time, limit int) ([]TelemetrySessionRef, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT environment_id, deployment_id, id FROM telemetry_sessions
		 WHERE detail_from < ? ORDER BY detail_from LIMIT ?`, ms(before), limit)
	if err != nil {
		return nil, fmt.Errorf("read foldable telemetry sessions: %w", err)
	}
	defer rows.Close()
	var out []TelemetrySessionRef
	for rows.Next() {
		var s TelemetrySessionRef
		if err := rows.Scan(&s.EnvironmentID, &s.DeploymentID, &s.ID); err != nil {
			return nil, fmt.Errorf("read foldable telemetry sessions: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read foldable telemetry sessions: %w", err)
	}
	return out, nil
}

// TelemetryDetailBefore reports whether any session holds detail older
// than before (the retention report's backlog flag).
func TelemetryDetailBefore(ctx context.Context, q Querier, before time.Time) (bool, error) {
	var any bool
	if err := q.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM telemetry_sessions WHERE detail_from < ?)`, ms(before)).Scan(&any); err != nil {
		return false, fmt.Errorf("read telemetry backlog: %w", err)
	}
	return any, nil
}

// TelemetryWindowStartAt returns the windowStart of the session's source
// window at position offset (0-based, in windowStart order) among those
// before before, and false when fewer windows than offset+1 exist. The fold
// uses it to end a batch on an hour boundary.
func TelemetryWindowStartAt(ctx context.Context, q Querier, s TelemetrySessionRef, before time.Time, offset int) (time.Time, bool, error) {
	var at int64
	err := q.QueryRowContext(ctx,
		`SELECT window_start FROM telemetry_windows
		 WHERE environment_id = ? AND deployment_id = ? AND session_id = ? AND window_start < ?
		 ORDER BY window_start LIMIT 1 OFFSET ?`,
		s.EnvironmentID, s.DeploymentID, s.ID, ms(before), offset).Scan(&at)
	switch {
	case err == sql.ErrNoRows:
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("read telemetry window bound: %w", err)
	}
	return time.UnixMilli(at).UTC(), true, nil
}

// TelemetryHourCount is the number of source windows one session holds in
// one hour (a fold's indivisible group).
type TelemetryHourCount struct {
	// Hour is the hour's start, UTC.
	Hour time.Time
	// Windows is the source windows in it, each one row.
	Windows int
}

// TelemetryHourCounts returns, hour by hour in order, how many source
// windows of session s start before to. The fold plans its writer units
// with it; callers bound to (TelemetryWindowStartAt) so that the read stays
// within one batch's share of the session.
func TelemetryHourCounts(ctx context.Context, q Querier, s TelemetrySessionRef, to time.Time) ([]TelemetryHourCount, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT window_start - window_start % ?5, count(*) FROM telemetry_windows
		 WHERE environment_id = ?1 AND deployment_id = ?2 AND session_id = ?3 AND window_start < ?4
		 GROUP BY 1 ORDER BY 1`, s.EnvironmentID, s.DeploymentID, s.ID, ms(to), hourMS)
	if err != nil {
		return nil, fmt.Errorf("read telemetry hour counts: %w", err)
	}
	defer rows.Close()
	var out []TelemetryHourCount
	for rows.Next() {
		var h int64
		var c TelemetryHourCount
		if err := rows.Scan(&h, &c.Windows); err != nil {
			return nil, fmt.Errorf("read telemetry hour counts: %w", err)
		}
		c.Hour = time.UnixMilli(h).UTC()
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read telemetry hour counts: %w", err)
	}
	return out, nil
}

// TelemetryFold is what one FoldTelemetryWindows call did.
type TelemetryFold struct {
	// SourceRows is the number of source windows deleted (each one folded).
	SourceRows int64
	// HourlyOps is the number of hourly rows inserted or updated.
	HourlyOps int64
}

// foldSQL folds one session's source windows before ?4 into
// telemetry_hourly, one row per hour: n and sum add, min and max combine,
// last is the value of the latest window holding the metric (read back by
// primary key), and an existing hourly row merges with the new aggregate
// (its _last_at decides which last is later).
var foldSQL = func() string {
	var agg, cols, vals, set strings.Builder
	for _, m := range TelemetryMetrics {
		c := m.Column
		fmt.Fprintf(&agg, `, sum(%[1]s_n) AS %[1]s_n, sum(%[1]s_sum) AS %[1]s_sum, min(%[1]s_min) AS %[1]s_min, max(%[1]s_max) AS %[1]s_max,
		   max(CASE WHEN %[1]s_n IS NOT NULL THEN window_start END) AS %[1]s_last_at`, c)
		fmt.Fprintf(&cols, `, %[1]s_n, %[1]s_sum, %[1]s_min, %[1]s_max, %[1]s_last, %[1]s_last_at`, c)
		fmt.Fprintf(&vals, `, g.%[1]s_n, g.%[1]s_sum, g.%[1]s_min, g.%[1]s_max,
		   (SELECT w.%[1]s_last FROM telemetry_windows w
		     WHERE w.environment_id = ?1 AND w.deployment_id = ?2 AND w.session_id = ?3 AND w.window_start = g.%[1]s_last_at),
		   g.%[1]s_last_at`, c)
		// Every right-hand side reads the row as it was before the update.
		fmt.Fprintf(&set, `,
		   %[1]s_n = CASE WHEN excluded.%[1]s_n IS NULL THEN %[1]s_n WHEN %[1]s_n IS NULL THEN excluded.%[1]s_n ELSE %[1]s_n + excluded.%[1]s_n END,
		   %[1]s_sum = CASE WHEN excluded.%[1]s_n IS NULL THEN %[1]s_sum WHEN %[1]s_n IS NULL THEN excluded.%[1]s_sum ELSE %[1]s_sum + excluded.%[1]s_sum END,
		   %[1]s_min = CASE WHEN excluded.%[1]s_n IS NULL THEN %[1]s_min WHEN %[1]s_n IS NULL THEN excluded.%[1]s_min ELSE min(%[1]s_min, excluded.%[1]s_min) END,
		   %[1]s_max = CASE WHEN excluded.%[1]s_n IS NULL THEN %[1]s_max WHEN %[1]s_n IS NULL THEN excluded.%[1]s_max ELSE max(%[1]s_max, excluded.%[1]s_max) END,
		   %[1]s_last = CASE WHEN excluded.%[1]s_n IS NULL THEN %[1]s_last WHEN %[1]s_n IS NULL OR excluded.%[1]s_last_at > %[1]s_last_at THEN excluded.%[1]s_last ELSE %[1]s_last END,
		   %[1]s_last_at = CASE WHEN excluded.%[1]s_n IS NULL THEN %[1]s_last_at WHEN %[1]s_n IS NULL OR excluded.%[1]s_last_at > %[1]s_last_at THEN excluded.%[1]s_last_at ELSE %[1]s_last_at END`, c)
	}
	return fmt.Sprintf(`WITH g AS (
		 SELECT window_start - window_start %% %[1]d AS hour_start, count(*) AS windows,
		   min(window_start) AS first_at, max(window_start) AS last_at,
		   sum(gpu_util_pct_n IS NOT NULL AND gpu_util_pct_max < %[2]d) AS gpu_idle%[3]s
		 FROM telemetry_windows
		 WHERE environment_id = ?1 AND deployment_id = ?2 AND session_id = ?3 AND window_start < ?4
		 GROUP BY 1)
		INSERT INTO telemetry_hourly (environment_id, deployment_id, session_id, hour_start, windows,
		   first_window_at, last_window_at, gpu_idle_windows%[4]s)
		SELECT ?1, ?2, ?3, g.hour_start, g.windows, g.first_at, g.last_at, g.gpu_idle%[5]s
		FROM g WHERE true
		ON CONFLICT (environment_id, deployment_id, session_id, hour_start) DO UPDATE SET
		   windows = windows + excluded.windows,
		   first_window_at = min(first_window_at, excluded.first_window_at),
		   last_window_at = max(last_window_at, excluded.last_window_at),
		   gpu_idle_windows = gpu_idle_windows + excluded.gpu_idle_windows%[6]s`,
		hourMS, gpuIdleBelow, agg.String(), cols.String(), vals.String(), set.String())
}()

// FoldTelemetryWindows folds every source window of session s that starts
// before to into telemetry_hourly and deletes exactly those windows, then
// sets the session's detail_from to its oldest remaining window (NULL when
// none is left). to must be hour-aligned, so an hour is folded whole; run it
// inside one writer unit, which makes the move atomic: a reader sees each
// window either in detail or in its hourly row, never both or neither.
// Folding into an hour that already has a rollup merges (docs/operations.md,
// "Retention").
func FoldTelemetryWindows(ctx context.Context, q Querier, s TelemetrySessionRef, to time.Time) (TelemetryFold, error) {
	var f TelemetryFold
	if ms(to)%hourMS != 0 {
		return f, fmt.Errorf("fold telemetry windows: bound %v is not hour-aligned", to)
	}
	// The session's hourly rows before and after the fold say how many it
	// created (a primary-key range): each is charged, each folded window
	// uncharged, in this unit (docs/operations.md, "Quotas").
	hourly := func() (int64, error) {
		var n int64
		err := q.QueryRowContext(ctx, `SELECT count(*) FROM telemetry_hourly WHERE environment_id = ? AND deployment_id = ? AND session_id = ?`,
			s.EnvironmentID, s.DeploymentID, s.ID).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("count telemetry hourly rows: %w", err)
		}
		return n, nil
	}
	hourlyBefore, err := hourly()
	if err != nil {
		return f, err
	}
	res, err := q.ExecContext(ctx, foldSQL, s.EnvironmentID, s.DeploymentID, s.ID, ms(to))
	if err != nil {
		return f, fmt.Errorf("fold telemetry windows: %w", err)
	}
	if f.HourlyOps, err = res.RowsAffected(); err != nil {
		return f, fmt.Errorf("fold telemetry windows: %w", err)
	}
	res, err = q.ExecContext(ctx,
		`DELETE FROM telemetry_windows WHERE environment_id = ? AND deployment_id = ? AND session_id = ? AND window_start < ?`,
		s.EnvironmentID, s.DeploymentID, s.ID, ms(to))
	if err != nil {
		return f, fmt.Errorf("delete folded telemetry windows: %w", err)
	}
	if f.SourceRows, err = res.RowsAffected(); err != nil {
		return f, fmt.Errorf("delete folded telemetry windows: %w", err)
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE telemetry_sessions SET detail_from = (
		     SELECT min(window_start) FROM telemetry_windows
		     WHERE environment_id = ?1 AND deployment_id = ?2 AND session_id = ?3)
		 WHERE environment_id = ?1 AND deployment_id = ?2 AND id = ?3`,
		s.EnvironmentID, s.DeploymentID, s.ID); err != nil {
		return f, fmt.Errorf("update telemetry detail_from: %w", err)
	}
	hourlyAfter, err := hourly()
	if err != nil {
		return f, err
	}
	delta := (hourlyAfter-hourlyBefore)*hourlyCharge(s.DeploymentID, s.ID) - f.SourceRows*windowRowCharge(s.DeploymentID, s.ID)
	return f, addEnvironmentStorage(ctx, q, s.EnvironmentID, delta)
}

// TelemetrySessionsToFinalize returns up to limit ended sessions without a
// terminal summary that are due for one: those ended by a final window,
// and those ended with their deployment at or before endedBy (the grace for
// late final windows has passed). Oldest end first.
func TelemetrySessionsToFinalize(ctx context.Context, q Querier, endedBy time.Time, limit int) ([]TelemetrySession, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+sessionColumns+` FROM telemetry_sessions
		 WHERE ended_at IS NOT NULL AND summary IS NULL AND (end_reason = ? OR ended_at <= ?)
		 ORDER BY ended_at LIMIT ?`, SessionEndFinal, ms(endedBy), limit)
	if err != nil {
		return nil, fmt.Errorf("read telemetry sessions to finalize: %w", err)
	}
	defer rows.Close()
	var out []TelemetrySession
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("read telemetry sessions to finalize: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read telemetry sessions to finalize: %w", err)
	}
	return out, nil
}

// TelemetryTotals aggregates a set of windows (detail, hourly, or both):
// how many, which minutes they span, how many were GPU idle, and per
// metric the samples, their sum and the largest sample.
type TelemetryTotals struct {
	Windows int64
	// First and Last are the earliest and latest windowStart; zero when
	// Windows is 0.
	First, Last time.Time
	// GPUIdleWindows counts windows whose gpuUtilPct max was under 5.
	GPUIdleWindows int64
	// N, Sum and Max per metric, TelemetryMetrics order; N 0 means no
	// sample (Sum and Max are then meaningless).
	N   [NumTelemetryMetrics]int64
	Sum [NumTelemetryMetrics]float64
	Max [NumTelemetryMetrics]float64
}

// Add merges o into t.
func (t *TelemetryTotals) Add(o TelemetryTotals) {
	if o.Windows == 0 {
		return
	}
	if t.Windows == 0 || o.First.Before(t.First) {
		t.First = o.First
	}
	if t.Windows == 0 || o.Last.After(t.Last) {
		t.Last = o.Last
	}
	t.Windows += o.Windows
	t.GPUIdleWindows += o.GPUIdleWindows
	for i := range t.N {
		if o.N[i] == 0 {
			continue
		}
		if t.N[i] == 0 || o.Max[i] > t.Max[i] {
			t.Max[i] = o.Max[i]
		}
		t.N[i] += o.N[i]
		t.Sum[i] += o.Sum[i]
	}
}

// totalsSQL aggregates one session's rows of table; first, last, idle are
// the table's expressions for a row's first/last windowStart, windows and
// idle windows.
func totalsSQL(table, sessionCol, windows, first, last, idle string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `SELECT coalesce(sum(%s), 0), min(%s), max(%s), coalesce(sum(%s), 0)`, windows, first, last, idle)
	for _, m := range TelemetryMetrics {
		fmt.Fprintf(&b, `, coalesce(sum(%[1]s_n), 0), coalesce(sum(%[1]s_sum), 0), max(%[1]s_max)`, m.Column)
	}
	fmt.Fprintf(&b, ` FROM %s WHERE environment_id = ? AND deployment_id = ? AND %s = ?`, table, sessionCol)
	return b.String()
}

var (
	detailTotalsSQL = totalsSQL("telemetry_windows", "session_id", "1", "window_start", "window_start",
		fmt.Sprintf("gpu_util_pct_n IS NOT NULL AND gpu_util_pct_max < %d", gpuIdleBelow))
	hourlyTotalsSQL = totalsSQL("telemetry_hourly", "session_id", "windows", "first_window_at", "last_window_at", "gpu_idle_windows")
)

// TelemetrySessionTotals returns the totals of session s's detail windows
// and of its hourly rollups, separately. Run it on one read transaction
// together with the session row, so that a concurrent fold (which moves
// windows from detail to hourly in one unit) shows each window on exactly
// one side.
func TelemetrySessionTotals(ctx context.Context, q Querier, s TelemetrySessionRef) (detail, hourly TelemetryTotals, err error) {
	if detail, err = sessionTotals(ctx, q, detailTotalsSQL, s); err != nil {
		return detail, hourly, err
	}
	hourly, err = sessionTotals(ctx, q, hourlyTotalsSQL, s)
	return detail, hourly, err
}

func sessionTotals(ctx context.Context, q Querier, query string, s TelemetrySessionRef) (TelemetryTotals, error) {
	var t TelemetryTotals
	var first, last sql.NullInt64
	var max [NumTelemetryMetrics]sql.NullFloat64
	dst := []any{&t.Windows, &first, &last, &t.GPUIdleWindows}
	for i := range t.N {
		dst = append(dst, &t.N[i], &t.Sum[i], &max[i])
	}
	if err := q.QueryRowContext(ctx, query, s.EnvironmentID, s.DeploymentID, s.ID).Scan(dst...); err != nil {
		return t, fmt.Errorf("read telemetry session totals: %w", err)
	}
	t.First, t.Last = fromMS(first), fromMS(last)
	for i := range max {
		t.Max[i] = max[i].Float64
	}
	return t, nil
}

// SetTelemetrySessionSummary stores the terminal summary of session s if
// its version is still version and it has none; it reports whether it did.
// A window accepted after the finalizer read the session incremented the
// version (RecordSessionWindow), so the stale summary is not written and a
// later run recomputes it (docs/operations.md, "Retention").
func SetTelemetrySessionSummary(ctx context.Context, q Querier, s TelemetrySessionRef, version int64, summary string, at time.Time) (bool, error) {
	res, err := q.ExecContext(ctx,
		`UPDATE telemetry_sessions SET summary = ?, summarized_at = ?
		 WHERE environment_id = ? AND deployment_id = ? AND id = ? AND version = ? AND summary IS NULL`,
		summary, ms(at), s.EnvironmentID, s.DeploymentID, s.ID, version)
	if err != nil {
		return false, fmt.Errorf("write telemetry session summary: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("write telemetry session summary: %w", err)
	}
	return n == 1, nil
}
