package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// EachTelemetryWindow calls fn with every source window of one deployment
// (every session) whose windowStart is in [from, to), in no promised
// order, streaming rather than holding them all (the performance API reads
// up to 7 days of minutes per session; docs/operations.md, "Performance
// API"). fn must not keep m past its return. An error from fn stops the
// scan and is returned.
func EachTelemetryWindow(ctx context.Context, q Querier, environmentID int64, deploymentID string, from, to time.Time,
	fn func(sessionID string, windowStart time.Time, m *TelemetryMetricSet) error) error {
	rows, err := q.QueryContext(ctx, `SELECT session_id, window_start, `+metricColumns+`
		 FROM telemetry_windows
		 WHERE environment_id = ? AND deployment_id = ? AND window_start >= ? AND window_start < ?`,
		environmentID, deploymentID, ms(from), ms(to))
	if err != nil {
		return fmt.Errorf("read telemetry windows: %w", err)
	}
	defer rows.Close()
	var sc metricScan
	var buf [NumTelemetryMetrics]MetricAgg
	var session string
	var start int64
	dst := sc.dest([]any{&session, &start})
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return fmt.Errorf("read telemetry windows: %w", err)
		}
		set := sc.setIn(&buf)
		if err := fn(session, time.UnixMilli(start).UTC(), &set); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read telemetry windows: %w", err)
	}
	return nil
}

// EachTelemetryHourly calls fn with every hourly rollup of one deployment
// (every session) whose hour starts in [from, to): its hour, its
// aggregates, and per metric the windowStart its Last came from. Streaming
// and unordered, like EachTelemetryWindow; fn must not keep m or lastAt.
func EachTelemetryHourly(ctx context.Context, q Querier, environmentID int64, deploymentID string, from, to time.Time,
	fn func(hourStart time.Time, m *TelemetryMetricSet, lastAt *[NumTelemetryMetrics]time.Time) error) error {
	rows, err := q.QueryContext(ctx, `SELECT hour_start, `+hourlyMetricColumns+`
		 FROM telemetry_hourly
		 WHERE environment_id = ? AND deployment_id = ? AND hour_start >= ? AND hour_start < ?`,
		environmentID, deploymentID, ms(from), ms(to))
	if err != nil {
		return fmt.Errorf("read telemetry hourly: %w", err)
	}
	defer rows.Close()
	var hour int64
	var m [NumTelemetryMetrics]struct {
		n, lastAt           sql.NullInt64
		sum, min, max, last sql.NullFloat64
	}
	dst := []any{&hour}
	for i := range m {
		dst = append(dst, &m[i].n, &m[i].sum, &m[i].min, &m[i].max, &m[i].last, &m[i].lastAt)
	}
	var buf [NumTelemetryMetrics]MetricAgg
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return fmt.Errorf("read telemetry hourly: %w", err)
		}
		var set TelemetryMetricSet
		var lastAt [NumTelemetryMetrics]time.Time
		for i := range m {
			if !m[i].n.Valid {
				continue
			}
			buf[i] = MetricAgg{N: m[i].n.Int64, Sum: m[i].sum.Float64, Min: m[i].min.Float64, Max: m[i].max.Float64, Last: m[i].last.Float64}
			set[i], lastAt[i] = &buf[i], fromMS(m[i].lastAt)
		}
		if err := fn(time.UnixMilli(hour).UTC(), &set, &lastAt); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read telemetry hourly: %w", err)
	}
	return nil
}

// Preparer prepares statements: *sql.Tx (the performance read's
// transaction) and *sql.DB satisfy it.
type Preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// TelemetryPoint is the aggregate of one session's detail windows whose
// windowStart lies in one span: per metric the merged aggregate (N 0 when
// none of the windows had the metric) and the windowStart of the latest
// window that had it, where its Last comes from.
type TelemetryPoint struct {
	// Windows counts the windows in the span; 0 means Metrics is empty.
	Windows int64
	Metrics [NumTelemetryMetrics]MetricAgg
	LastAt  [NumTelemetryMetrics]time.Time
}

// TelemetryPointReader aggregates one deployment's detail windows span by
// span inside SQLite, for the performance API's coarse steps
// (docs/operations.md, "Performance API"): a point of an hour or more
// covers 60 or more windows per session, and summing them in SQLite costs a
// fraction of carrying 65 columns of each into Go. Each Point is two
// primary-key range seeks (the aggregates, then the latest window for the
// Last values), so no sort is needed, unlike one GROUP BY over the range.
// Sums come from SQLite's sum(), which is compensated (Kahan-Babuska-
// Neumaier): a Sum may differ in its last bits from adding the windows one
// by one, N, Min, Max and Last never do. It relies on what window.go's
// validation guarantees: a stored metric has N ≥ 1 and all five columns.
// Close releases the statements.
type TelemetryPointReader struct {
	q             Preparer
	environmentID int64
	deploymentID  string
	agg, last     *sql.Stmt
	// lastOf holds, per metric, the statement that finds the latest
	// window having it, prepared on first need: only a span whose latest
	// window lacks a metric an earlier window had needs it.
	lastOf [NumTelemetryMetrics]*sql.Stmt
}

// The point reader's statements: one span of one session (PRIMARY KEY
// prefix plus a window_start range).
var (
	pointAggSQL = func() string {
		var b strings.Builder
		b.WriteString(`SELECT count(*)`)
		for _, m := range TelemetryMetrics {
			fmt.Fprintf(&b, ", sum(%[1]s_n), sum(%[1]s_sum), min(%[1]s_min), max(%[1]s_max)", m.Column)
		}
		b.WriteString(` FROM telemetry_windows` + pointWhere)
		return b.String()
	}()
	pointLastSQL = func() string {
		var b strings.Builder
		b.WriteString(`SELECT window_start`)
		for _, m := range TelemetryMetrics {
			fmt.Fprintf(&b, ", %[1]s_n, %[1]s_last", m.Column)
		}
		b.WriteString(` FROM telemetry_windows` + pointWhere + ` ORDER BY window_start DESC LIMIT 1`)
		return b.String()
	}()
)

const pointWhere = ` WHERE environment_id = ? AND deployment_id = ? AND session_id = ? AND window_start >= ? AND window_start < ?`

// NewTelemetryPointReader prepares the point reader of one deployment on q
// (the caller's read transaction, for one snapshot). Errors: storage
// errors.
func NewTelemetryPointReader(ctx context.Context, q Preparer, environmentID int64, deploymentID string) (*TelemetryPointReader, error) {
	r := &TelemetryPointReader{q: q, environmentID: environmentID, deploymentID: deploymentID}
	var err error
	if r.agg, err = q.PrepareContext(ctx, pointAggSQL); err != nil {
		return nil, fmt.Errorf("prepare telemetry points: %w", err)
	}
	if r.last, err = q.PrepareContext(ctx, pointLastSQL); err != nil {
		r.agg.Close()
		return nil, fmt.Errorf("prepare telemetry points: %w", err)
	}
	return r, nil
}

// Close releases the prepared statements.
func (r *TelemetryPointReader) Close() error {
	err := r.agg.Close()
	if e := r.last.Close(); err == nil {
		err = e
	}
	for _, s := range r.lastOf {
		if s == nil {
			continue
		}
		if e := s.Close(); err == nil {
			err = e
		}
	}
	return err
}

// Point aggregates the detail windows of one session whose windowStart is
// in [from, to) into p (overwritten). Errors: storage errors.
func (r *TelemetryPointReader) Point(ctx context.Context, sessionID string, from, to time.Time, p *TelemetryPoint) error {
	*p = TelemetryPoint{}
	args := []any{r.environmentID, r.deploymentID, sessionID, ms(from), ms(to)}
	var agg [NumTelemetryMetrics]struct {
		n           sql.NullInt64
		sum, lo, hi sql.NullFloat64
	}
	dst := make([]any, 0, 1+4*NumTelemetryMetrics)
	dst = append(dst, &p.Windows)
	for i := range agg {
		dst = append(dst, &agg[i].n, &agg[i].sum, &agg[i].lo, &agg[i].hi)
	}
	if err := r.agg.QueryRowContext(ctx, args...).Scan(dst...); err != nil {
		return fmt.Errorf("read telemetry points: %w", err)
	}
	if p.Windows == 0 {
		return nil
	}
	var start int64
	var last [NumTelemetryMetrics]struct {
		n sql.NullInt64
		v sql.NullFloat64
	}
	dst = append(dst[:0], &start)
	for i := range last {
		dst = append(dst, &last[i].n, &last[i].v)
	}
	if err := r.last.QueryRowContext(ctx, args...).Scan(dst...); err != nil {
		return fmt.Errorf("read telemetry points: %w", err)
	}
	for i, a := range agg {
		if !a.n.Valid || a.n.Int64 == 0 {
			continue
		}
		m := MetricAgg{N: a.n.Int64, Sum: a.sum.Float64, Min: a.lo.Float64, Max: a.hi.Float64}
		at := start
		if last[i].n.Valid {
			m.Last = last[i].v.Float64
		} else {
			var err error
			if at, m.Last, err = r.latestOf(ctx, i, args); err != nil {
				return err
			}
		}
		p.Metrics[i], p.LastAt[i] = m, time.UnixMilli(at).UTC()
	}
	return nil
}

// latestOf reads the windowStart and Last of the latest window in the
// span that has metric i.
func (r *TelemetryPointReader) latestOf(ctx context.Context, i int, args []any) (at int64, last float64, err error) {
	if r.lastOf[i] == nil {
		c := TelemetryMetrics[i].Column
		if r.lastOf[i], err = r.q.PrepareContext(ctx, `SELECT window_start, `+c+`_last FROM telemetry_windows`+pointWhere+
			` AND `+c+`_n IS NOT NULL ORDER BY window_start DESC LIMIT 1`); err != nil {
			return 0, 0, fmt.Errorf("prepare telemetry points: %w", err)
		}
	}
	if err := r.lastOf[i].QueryRowContext(ctx, args...).Scan(&at, &last); err != nil {
		return 0, 0, fmt.Errorf("read telemetry points: %w", err)
	}
	return at, last, nil
}
