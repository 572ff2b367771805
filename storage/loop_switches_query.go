package storage

import (
	"context"
	"fmt"
	"time"
)

// LoopSwitch is one row of loop_switches: a loop the operator paused or
// resumed (docs/operations.md, "Loop switches").
type LoopSwitch struct {
	// Name is the switch name: reaper, retention, costs or jobs.
	Name string
	// Paused is true while the loop is paused.
	Paused bool
	// ChangedAt is when it was last switched (stored in unix milliseconds).
	ChangedAt time.Time
}

// ListLoopSwitches returns every loop ever switched, by name.
func ListLoopSwitches(ctx context.Context, q Querier) ([]LoopSwitch, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, paused, changed_at FROM loop_switches ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list loop switches: %w", err)
	}
	defer rows.Close()
	var out []LoopSwitch
	for rows.Next() {
		var s LoopSwitch
		var at int64
		if err := rows.Scan(&s.Name, &s.Paused, &at); err != nil {
			return nil, fmt.Errorf("list loop switches: %w", err)
		}
		s.ChangedAt = time.UnixMilli(at).UTC()
		out = append(out, s)
	}
	return out, rows.Err()
}

// SetLoopPaused records name as paused or resumed at at and reports whether
// that changed anything (false when it already was in that state; the row is
// then left as it was).
func SetLoopPaused(ctx context.Context, q Querier, name string, paused bool, at time.Time) (changed bool, err error) {
	res, err := q.ExecContext(ctx,
		`INSERT INTO loop_switches (name, paused, changed_at) VALUES (?1, ?2, ?3)
		 ON CONFLICT (name) DO UPDATE SET paused = ?2, changed_at = ?3 WHERE paused <> ?2`,
		name, paused, ms(at))
	if err != nil {
		return false, fmt.Errorf("set loop switch: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("set loop switch: %w", err)
	}
	return n == 1, nil
}

// InsertPlatformEvent records an organization-level lifecycle event of the
// platform organization (no environment, no deployment) unless an event with
// its id exists, and reports whether it inserted one. ev.EnvironmentID and
// ev.DeploymentID are ignored; inside a writer unit OccurredAt is stored as
// the writer's event time (Writer.SetEventTime).
func InsertPlatformEvent(ctx context.Context, q Querier, ev LifecycleEvent) (bool, error) {
	res, err := q.ExecContext(ctx,
		`INSERT OR IGNORE INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, reason, message, occurred_at)
		 VALUES (?, ?, NULL, NULL, ?, ?, ?, ?)`,
		ev.ID, PlatformOrgID, ev.Kind, ev.Reason, ev.Message, ms(eventTime(q, ev.OccurredAt)))
	if err != nil {
		return false, fmt.Errorf("insert platform event: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("insert platform event: %w", err)
	}
	return n == 1, nil
}
