package storage

import (
	"context"
	"fmt"
	"time"
)

// CPUMean is the mean CPU % of one deployment's samples in one step-wide
// bucket starting at At.
type CPUMean struct {
	At   time.Time
	Mean float64
}

// EnvironmentCPUMeans returns, for every deployment of the environment with
// a source window starting in [from, to), its CPU % means per bucket of
// step (aligned to multiples of step from the Unix epoch), oldest first:
// the console's per-deployment sparklines (docs/operations.md, "Console").
// It reads detail windows only (kept 7 days, so a range within the last
// day is never folded), and only the sessions with a window since from, so
// its cost is the windows in range, not a deployment's history.
func EnvironmentCPUMeans(ctx context.Context, q Querier, environmentID int64, from, to time.Time, step time.Duration) (map[string][]CPUMean, error) {
	st := step.Milliseconds()
	if st <= 0 {
		return nil, fmt.Errorf("cpu means: step %v is not positive", step)
	}
	rows, err := q.QueryContext(ctx, `SELECT w.deployment_id, (w.window_start / ?1) * ?1 AS b, SUM(w.cpu_pct_sum), SUM(w.cpu_pct_n)
		 FROM telemetry_sessions s
		 JOIN telemetry_windows w ON w.environment_id = s.environment_id AND w.deployment_id = s.deployment_id AND w.session_id = s.id
		      AND w.window_start >= ?3 AND w.window_start < ?4
		 WHERE s.environment_id = ?2 AND s.last_window_at >= ?3 AND w.cpu_pct_n > 0
		 GROUP BY w.deployment_id, b ORDER BY w.deployment_id, b`, st, environmentID, ms(from), ms(to))
	if err != nil {
		return nil, fmt.Errorf("read cpu means: %w", err)
	}
	defer rows.Close()
	out := map[string][]CPUMean{}
	for rows.Next() {
		var dep string
		var at, n int64
		var sum float64
		if err := rows.Scan(&dep, &at, &sum, &n); err != nil {
			return nil, fmt.Errorf("read cpu means: %w", err)
		}
		out[dep] = append(out[dep], CPUMean{At: time.UnixMilli(at).UTC(), Mean: sum / float64(n)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read cpu means: %w", err)
	}
	return out, nil
}
