package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// TelemetryWindow is one minute source window of one telemetry session, as
// stored in telemetry_windows (docs/operations.md, "Telemetry").
type TelemetryWindow struct {
	EnvironmentID int64
	DeploymentID  string
	SessionID     string
	// WindowStart is the minute the window covers, UTC, minute-aligned.
	WindowStart time.Time
	ReceivedAt  time.Time
	Final       bool
	Metrics     TelemetryMetricSet
}

// metricColumns is "p_n, p_sum, p_min, p_max, p_last" for every metric, in
// TelemetryMetrics order: the column list of telemetry_windows' metrics.
var metricColumns = func() string {
	var b strings.Builder
	for i, m := range TelemetryMetrics {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%[1]s_n, %[1]s_sum, %[1]s_min, %[1]s_max, %[1]s_last", m.Column)
	}
	return b.String()
}()

// TelemetryMetricColumns returns the metric column list of telemetry_windows
// (five columns per metric, TelemetryMetrics order), for queries built
// elsewhere in storage's callers' tests.
func TelemetryMetricColumns() string { return metricColumns }

var insertWindowSQL = `INSERT INTO telemetry_windows (environment_id, deployment_id, session_id, window_start, received_at, final, ` +
	metricColumns + `) VALUES (?, ?, ?, ?, ?, ?` + strings.Repeat(", ?", 5*NumTelemetryMetrics) + `)`

// InsertTelemetryWindow stores one source window. Errors: ErrConflict when
// the identity (environment, deployment, session, windowStart) is already
// stored.
func InsertTelemetryWindow(ctx context.Context, q Querier, w TelemetryWindow) error {
	args := make([]any, 0, 6+5*NumTelemetryMetrics)
	args = append(args, w.EnvironmentID, w.DeploymentID, w.SessionID, ms(w.WindowStart), ms(w.ReceivedAt), boolInt(w.Final))
	args = appendMetricArgs(args, &w.Metrics)
	if _, err := q.ExecContext(ctx, insertWindowSQL, args...); err != nil {
		if isUniqueViolation(err) {
			return ErrConflict
		}
		return fmt.Errorf("insert telemetry window: %w", err)
	}
	return addEnvironmentStorage(ctx, q, w.EnvironmentID, windowRowCharge(w.DeploymentID, w.SessionID))
}

func appendMetricArgs(args []any, set *TelemetryMetricSet) []any {
	for _, a := range set {
		if a == nil {
			args = append(args, nil, nil, nil, nil, nil)
			continue
		}
		args = append(args, a.N, a.Sum, a.Min, a.Max, a.Last)
	}
	return args
}

// metricScan holds the scan destinations of the metric columns.
type metricScan [NumTelemetryMetrics]struct {
	n                   sql.NullInt64
	sum, min, max, last sql.NullFloat64
}

func (s *metricScan) dest(dst []any) []any {
	for i := range s {
		dst = append(dst, &s[i].n, &s[i].sum, &s[i].min, &s[i].max, &s[i].last)
	}
	return dst
}

// setIn is set with its aggregates in buf, which the caller reuses from
// row to row: no allocation per row.
func (s *metricScan) setIn(buf *[NumTelemetryMetrics]MetricAgg) TelemetryMetricSet {
	var out TelemetryMetricSet
	for i := range s {
		if !s[i].n.Valid {
			continue
		}
		buf[i] = MetricAgg{N: s[i].n.Int64, Sum: s[i].sum.Float64, Min: s[i].min.Float64, Max: s[i].max.Float64, Last: s[i].last.Float64}
		out[i] = &buf[i]
	}
	return out
}

func (s *metricScan) set() TelemetryMetricSet {
	var out TelemetryMetricSet
	for i := range s {
		if !s[i].n.Valid {
			continue
		}
		out[i] = &MetricAgg{N: s[i].n.Int64, Sum: s[i].sum.Float64, Min: s[i].min.Float64, Max: s[i].max.Float64, Last: s[i].last.Float64}
	}
	return out
}

// TelemetryWindowsBetween returns the source windows of one deployment
// (every session; sessionID "" means all) whose windowStart is in
// [from, to), ordered by session then windowStart, at most limit rows.
func TelemetryWindowsBetween(ctx context.Context, q Querier, environmentID int64, deploymentID, sessionID string, from, to time.Time, limit int) ([]TelemetryWindow, error) {
	query := `SELECT session_id, window_start, received_at, final, ` + metricColumns + `
		 FROM telemetry_windows
		 WHERE environment_id = ? AND deployment_id = ? AND (? = '' OR session_id = ?) AND window_start >= ? AND window_start < ?
		 ORDER BY session_id, window_start LIMIT ?`
	rows, err := q.QueryContext(ctx, query, environmentID, deploymentID, sessionID, sessionID, ms(from), ms(to), limit)
	if err != nil {
		return nil, fmt.Errorf("read telemetry windows: %w", err)
	}
	defer rows.Close()
	var out []TelemetryWindow
	for rows.Next() {
		w := TelemetryWindow{EnvironmentID: environmentID, DeploymentID: deploymentID}
		var start, received int64
		var final int64
		var ms metricScan
		dst := ms.dest([]any{&w.SessionID, &start, &received, &final})
		if err := rows.Scan(dst...); err != nil {
			return nil, fmt.Errorf("read telemetry windows: %w", err)
		}
		w.WindowStart = time.UnixMilli(start).UTC()
		w.ReceivedAt = time.UnixMilli(received).UTC()
		w.Final = final == 1
		w.Metrics = ms.set()
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read telemetry windows: %w", err)
	}
	return out, nil
}
