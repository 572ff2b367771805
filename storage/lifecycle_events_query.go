package storage

import (
	"context"
	"fmt"
	"time"
)

// LifecycleEvent is one row of lifecycle_events: lifecycle evidence under a
// stable id, so a retried or concurrent writer records it at most once.
type LifecycleEvent struct {
	// ID is the stable event id.
	ID string
	// EnvironmentID is the environment; the row's organization is its.
	EnvironmentID int64
	// DeploymentID is the deployment, or "" for an environment-level event.
	// It must exist in the environment (a foreign key).
	DeploymentID string
	// Kind is the event kind ("quota-exceeded", …).
	Kind string
	// Reason is "" or one of idle, session-expired, provider, manual.
	Reason string
	// Message is operator-facing text (ids at most, never fleet data).
	Message string
	// OccurredAt is when it happened (stored in unix milliseconds).
	OccurredAt time.Time
}

// InsertLifecycleEvent records ev unless an event with its id exists
// (INSERT OR IGNORE) and reports whether it inserted a row. The
// organization is the environment's. Errors: ErrNotFound when the
// environment does not exist.
func InsertLifecycleEvent(ctx context.Context, q Querier, ev LifecycleEvent) (inserted bool, err error) {
	var dep any
	if ev.DeploymentID != "" {
		dep = ev.DeploymentID
	}
	res, err := q.ExecContext(ctx,
		`INSERT OR IGNORE INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, reason, message, occurred_at)
		 SELECT ?, org_id, id, ?, ?, ?, ?, ? FROM environments WHERE id = ?`,
		ev.ID, dep, ev.Kind, ev.Reason, ev.Message, ms(ev.OccurredAt), ev.EnvironmentID)
	if err != nil {
		return false, fmt.Errorf("insert lifecycle event: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("insert lifecycle event: %w", err)
	}
	if n == 0 {
		var one int
		if err := q.QueryRowContext(ctx, `SELECT 1 FROM environments WHERE id = ?`, ev.EnvironmentID).Scan(&one); err != nil {
			return false, notFound(err)
		}
	}
	return n == 1, nil
}
