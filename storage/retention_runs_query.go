package storage

import (
	"context"
	"fmt"
	"time"
)

// RetentionRun is one retention pass's evidence (retention_runs;
// docs/operations.md, "Retention").
type RetentionRun struct {
	ID int64
	// Trigger is "schedule" (the loop) or "admin" (adminRunRetention).
	Trigger   string
	StartedAt time.Time
	// Duration is the pass's wall time, stored in milliseconds.
	Duration time.Duration
	// MinuteRollups is the exact number of source windows folded (and
	// deleted); HourlyRollups the hourly rows inserted or updated;
	// Batches the fold batches committed.
	MinuteRollups, HourlyRollups, Batches int64
	// BacklogPending is true when detail older than the fold cutoff was
	// left at the end of the pass.
	BacklogPending bool
	// DrainStopReason is "drained", "deadline" or "batch-limit".
	DrainStopReason string
	// HeartbeatsPruned and SessionsFinalized count the pass's other steps.
	HeartbeatsPruned, SessionsFinalized int64
	// StackStatesPruned counts checkpoints (stack_states rows) deleted.
	StackStatesPruned int64
	// Error names the step that failed, "" for a complete pass; never SQL
	// or data.
	Error string
}

// InsertRetentionRun stores r (its ID is ignored) and returns its id.
func InsertRetentionRun(ctx context.Context, q Querier, r RetentionRun) (int64, error) {
	var id int64
	if err := q.QueryRowContext(ctx,
		`INSERT INTO retention_runs (trigger, started_at, duration_ms, minute_rollups, hourly_rollups, batches,
		     backlog_pending, drain_stop_reason, heartbeats_pruned, sessions_finalized, stack_states_pruned, error)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		r.Trigger, ms(r.StartedAt), r.Duration.Milliseconds(), r.MinuteRollups, r.HourlyRollups, r.Batches,
		boolInt(r.BacklogPending), r.DrainStopReason, r.HeartbeatsPruned, r.SessionsFinalized, r.StackStatesPruned, r.Error).Scan(&id); err != nil {
		return 0, fmt.Errorf("insert retention run: %w", err)
	}
	return id, nil
}

// RecentRetentionRuns returns the newest limit retention runs, newest first.
func RecentRetentionRuns(ctx context.Context, q Querier, limit int) ([]RetentionRun, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT id, trigger, started_at, duration_ms, minute_rollups, hourly_rollups, batches, backlog_pending,
		     drain_stop_reason, heartbeats_pruned, sessions_finalized, stack_states_pruned, error
		 FROM retention_runs ORDER BY started_at DESC, id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("read retention runs: %w", err)
	}
	defer rows.Close()
	var out []RetentionRun
	for rows.Next() {
		var r RetentionRun
		var started, dur, pending int64
		if err := rows.Scan(&r.ID, &r.Trigger, &started, &dur, &r.MinuteRollups, &r.HourlyRollups, &r.Batches, &pending,
			&r.DrainStopReason, &r.HeartbeatsPruned, &r.SessionsFinalized, &r.StackStatesPruned, &r.Error); err != nil {
			return nil, fmt.Errorf("read retention runs: %w", err)
		}
		r.StartedAt = time.UnixMilli(started).UTC()
		r.Duration = time.Duration(dur) * time.Millisecond
		r.BacklogPending = pending == 1
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read retention runs: %w", err)
	}
	return out, nil
}
