package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// TelemetryHourly is one hourly rollup of one telemetry session
// (telemetry_hourly; docs/operations.md, "Telemetry"): the aggregate of
// every source window of the hour that retention folded. Windows counts
// those source windows; each metric's aggregate merges their samples.
type TelemetryHourly struct {
	EnvironmentID int64
	DeploymentID  string
	SessionID     string
	// HourStart is the hour, UTC, hour-aligned.
	HourStart time.Time
	Windows   int64
	// FirstWindowAt and LastWindowAt bound the folded windowStarts.
	FirstWindowAt, LastWindowAt time.Time
	// GPUIdleWindows counts the folded windows whose gpuUtilPct max was
	// under 5 (docs/operations.md, "Retention").
	GPUIdleWindows int64
	Metrics        TelemetryMetricSet
	// LastAt holds, per metric, the windowStart its Last value came from
	// (zero when the metric is nil), so a later fold merges Last correctly.
	LastAt [NumTelemetryMetrics]time.Time
}

// hourlyMetricColumns is metricColumns plus each metric's _last_at.
var hourlyMetricColumns = func() string {
	var b strings.Builder
	for i, m := range TelemetryMetrics {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%[1]s_n, %[1]s_sum, %[1]s_min, %[1]s_max, %[1]s_last, %[1]s_last_at", m.Column)
	}
	return b.String()
}()

// TelemetryHourlyBetween returns the hourly rollups of one deployment
// (every session; sessionID "" means all) whose hour starts in [from, to),
// ordered by session then hour, at most limit rows.
func TelemetryHourlyBetween(ctx context.Context, q Querier, environmentID int64, deploymentID, sessionID string, from, to time.Time, limit int) ([]TelemetryHourly, error) {
	rows, err := q.QueryContext(ctx, `SELECT session_id, hour_start, windows, first_window_at, last_window_at, gpu_idle_windows, `+hourlyMetricColumns+`
		 FROM telemetry_hourly
		 WHERE environment_id = ? AND deployment_id = ? AND (? = '' OR session_id = ?) AND hour_start >= ? AND hour_start < ?
		 ORDER BY session_id, hour_start LIMIT ?`,
		environmentID, deploymentID, sessionID, sessionID, ms(from), ms(to), limit)
	if err != nil {
		return nil, fmt.Errorf("read telemetry hourly: %w", err)
	}
	defer rows.Close()
	var out []TelemetryHourly
	for rows.Next() {
		h := TelemetryHourly{EnvironmentID: environmentID, DeploymentID: deploymentID}
		var hour, first, last int64
		var m [NumTelemetryMetrics]struct {
			n, lastAt           sql.NullInt64
			sum, min, max, last sql.NullFloat64
		}
		dst := []any{&h.SessionID, &hour, &h.Windows, &first, &last, &h.GPUIdleWindows}
		for i := range m {
			dst = append(dst, &m[i].n, &m[i].sum, &m[i].min, &m[i].max, &m[i].last, &m[i].lastAt)
		}
		if err := rows.Scan(dst...); err != nil {
			return nil, fmt.Errorf("read telemetry hourly: %w", err)
		}
		h.HourStart = time.UnixMilli(hour).UTC()
		h.FirstWindowAt = time.UnixMilli(first).UTC()
		h.LastWindowAt = time.UnixMilli(last).UTC()
		for i := range m {
			if !m[i].n.Valid {
				continue
			}
			h.Metrics[i] = &MetricAgg{N: m[i].n.Int64, Sum: m[i].sum.Float64, Min: m[i].min.Float64, Max: m[i].max.Float64, Last: m[i].last.Float64}
			h.LastAt[i] = fromMS(m[i].lastAt)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read telemetry hourly: %w", err)
	}
	return out, nil
}
