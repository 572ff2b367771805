package storage

import (
	"context"
	"database/sql"
	"fmt"
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
	var session string
	var start int64
	dst := sc.dest([]any{&session, &start})
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return fmt.Errorf("read telemetry windows: %w", err)
		}
		set := sc.set()
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
			set[i] = &MetricAgg{N: m[i].n.Int64, Sum: m[i].sum.Float64, Min: m[i].min.Float64, Max: m[i].max.Float64, Last: m[i].last.Float64}
			lastAt[i] = fromMS(m[i].lastAt)
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
