package storage

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// CPUMark is one deployment's CPU % in the minute window that starts at
// At: the mean of that window's samples.
type CPUMark struct {
	At   time.Time
	Mean float64
}

// MaxCPUMarks bounds the marks one EnvironmentCPUMarks call reads per
// session.
const MaxCPUMarks = 48

// EnvironmentCPUMarks returns, for every deployment of the environment,
// its CPU % in the minute windows that start exactly at marks (at most
// MaxCPUMarks instants, whole minutes), oldest first: the console's
// per-deployment sparklines (docs/operations.md, "Console"). It seeks each
// mark in each session with a window at or after the first mark, so its
// cost is sessions × marks rows, never a deployment's history nor every
// minute of the span. It reads detail windows only, which retention keeps
// 7 days. Errors: more than MaxCPUMarks marks; storage errors.
func EnvironmentCPUMarks(ctx context.Context, q Querier, environmentID int64, marks []time.Time) (map[string][]CPUMark, error) {
	if len(marks) == 0 {
		return map[string][]CPUMark{}, nil
	}
	if len(marks) > MaxCPUMarks {
		return nil, fmt.Errorf("cpu marks: %d marks, at most %d", len(marks), MaxCPUMarks)
	}
	args := make([]any, 0, len(marks)+2)
	first := marks[0]
	for _, m := range marks {
		args = append(args, ms(m))
		if m.Before(first) {
			first = m
		}
	}
	args = append(args, environmentID, ms(first))
	// CROSS JOIN keeps sessions the outer loop (SQLite does not reorder
	// it): each window is then one primary-key seek. Left to itself the
	// planner scans the environment's windows instead.
	in := strings.TrimSuffix(strings.Repeat("?,", len(marks)), ",")
	rows, err := q.QueryContext(ctx, `SELECT w.deployment_id, w.window_start, w.cpu_pct_sum, w.cpu_pct_n
		 FROM telemetry_sessions s
		 CROSS JOIN telemetry_windows w ON w.environment_id = s.environment_id AND w.deployment_id = s.deployment_id AND w.session_id = s.id
		      AND w.window_start IN (`+in+`)
		 WHERE s.environment_id = ? AND s.last_window_at >= ? AND w.cpu_pct_n > 0
		 ORDER BY w.deployment_id, w.window_start`, args...)
	if err != nil {
		return nil, fmt.Errorf("read cpu marks: %w", err)
	}
	defer rows.Close()
	out := map[string][]CPUMark{}
	for rows.Next() {
		var dep string
		var at, n int64
		var sum float64
		if err := rows.Scan(&dep, &at, &sum, &n); err != nil {
			return nil, fmt.Errorf("read cpu marks: %w", err)
		}
		out[dep] = append(out[dep], CPUMark{At: time.UnixMilli(at).UTC(), Mean: sum / float64(n)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read cpu marks: %w", err)
	}
	return out, nil
}
