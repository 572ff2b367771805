package storage

import (
	"context"
	"database/sql"
	"errors"
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
// organization is the environment's; inside a writer unit OccurredAt is
// stored as the writer's event time (Writer.SetEventTime). Errors: ErrNotFound when the
// environment does not exist.
func InsertLifecycleEvent(ctx context.Context, q Querier, ev LifecycleEvent) (inserted bool, err error) {
	var dep any
	if ev.DeploymentID != "" {
		dep = ev.DeploymentID
	}
	res, err := q.ExecContext(ctx,
		`INSERT OR IGNORE INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, reason, message, occurred_at)
		 SELECT ?, org_id, id, ?, ?, ?, ?, ? FROM environments WHERE id = ?`,
		ev.ID, dep, ev.Kind, ev.Reason, ev.Message, ms(eventTime(q, ev.OccurredAt)), ev.EnvironmentID)
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

// LifecycleEventRow is a lifecycle event as listed, with its environment's
// slug.
type LifecycleEventRow struct {
	LifecycleEvent
	// EnvironmentSlug is "" for an organization-level event.
	EnvironmentSlug string
}

// EventFilter selects lifecycle events; empty fields select all.
type EventFilter struct {
	// EnvironmentSlug keeps one environment's events.
	EnvironmentSlug string
	// Kind keeps one kind.
	Kind string
	// Limit is the most rows returned (required, > 0).
	Limit int
}

// ListLifecycleEvents returns the events f selects, newest first (ties by
// id), at most f.Limit.
func ListLifecycleEvents(ctx context.Context, q Querier, f EventFilter) ([]LifecycleEventRow, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT l.id, coalesce(l.environment_id, 0), coalesce(e.slug, ''), coalesce(l.deployment_id, ''), l.kind, l.reason, l.message, l.occurred_at
		 FROM lifecycle_events l LEFT JOIN environments e ON e.id = l.environment_id
		 WHERE (?1 = '' OR e.slug = ?1) AND (?2 = '' OR l.kind = ?2)
		 ORDER BY l.occurred_at DESC, l.id DESC LIMIT ?3`,
		f.EnvironmentSlug, f.Kind, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list lifecycle events: %w", err)
	}
	defer rows.Close()
	out := []LifecycleEventRow{}
	for rows.Next() {
		var r LifecycleEventRow
		var at int64
		if err := rows.Scan(&r.ID, &r.EnvironmentID, &r.EnvironmentSlug, &r.DeploymentID, &r.Kind, &r.Reason, &r.Message, &at); err != nil {
			return nil, fmt.Errorf("list lifecycle events: %w", err)
		}
		r.OccurredAt = time.UnixMilli(at).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// LatestLifecycleEventAt returns when the newest event whose id starts with
// idPrefix occurred (zero when there is none): a writer that suppresses
// repeats by its own stable id scheme reads its last one here.
func LatestLifecycleEventAt(ctx context.Context, q Querier, idPrefix string) (time.Time, error) {
	var at sql.NullInt64
	if err := q.QueryRowContext(ctx,
		`SELECT max(occurred_at) FROM lifecycle_events WHERE substr(id, 1, length(?1)) = ?1`, idPrefix).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("latest lifecycle event: %w", err)
	}
	return fromMS(at), nil
}

// PlatformEventFromAhead reports whether the platform event id (one with
// no environment) was written under a wall clock that was ahead: it is
// stamped after now (the writer's trusted time), or more than tolerance
// after a platform event inserted later. Platform events are stamped by
// the server alone, so their times follow their insertion but for
// tolerance. A writer whose ids are bucketed by time asks it when its id is
// taken, so an event of a wrong clock never silently drops a genuine one
// (docs/operations.md, "Reaper", event times). False when there is no such
// event.
func PlatformEventFromAhead(ctx context.Context, q Querier, id string, now time.Time, tolerance time.Duration) (bool, error) {
	var ahead bool
	err := q.QueryRowContext(ctx,
		`SELECT e.occurred_at > ?2 OR EXISTS (
		   SELECT 1 FROM lifecycle_events l
		   WHERE l.rowid > e.rowid AND l.environment_id IS NULL AND l.occurred_at < e.occurred_at - ?3)
		 FROM lifecycle_events e WHERE e.id = ?1 AND e.environment_id IS NULL`,
		id, ms(now), tolerance.Milliseconds()).Scan(&ahead)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("platform event from ahead: %w", err)
	}
	return ahead, nil
}
