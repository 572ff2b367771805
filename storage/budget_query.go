package storage

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"
)

// The budget alert's and the daily digest's reads (docs/operations.md,
// "Alerts").

// BudgetDeployment is an active deployment as the budget projection reads
// it: its cost columns and the reaper's view of it.
type BudgetDeployment struct {
	CostDeployment
	// DecideAt is the reaper's next decision time (decideAtSQL: the idle
	// deadline or the session expiry, never before a hold); zero when it
	// has none.
	DecideAt time.Time
	// HoldUntil is the reaper's hold (zero: none).
	HoldUntil time.Time
	// InReaperScope is false when no token may reap it: a customer
	// organization's deployment while that organization holds no active
	// provider token.
	InReaperScope bool
}

// BudgetDeployments returns every active deployment, of every
// organization, in environment and id order. fresh is how long a
// heartbeat's CI report counts as live (the reaper's decision time).
func BudgetDeployments(ctx context.Context, q Querier, fresh time.Duration) ([]BudgetDeployment, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+costDeploymentCols+`, `+decideAtSQL+`, d.reaper_hold_until, (`+platformScopeSQL+` OR `+customerScopeSQL+`)
		 FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.status = 'active' ORDER BY e.slug, d.id`, fresh.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("budget deployments: %w", err)
	}
	defer rows.Close()
	var out []BudgetDeployment
	for rows.Next() {
		var b BudgetDeployment
		var drop, ended, created, hold sql.NullInt64
		var launched, decide int64
		var hourly, monthly sql.NullFloat64
		var scope int
		d := &b.CostDeployment
		if err := rows.Scan(&d.EnvironmentID, &d.OrgID, &d.EnvironmentSlug, &d.ID, &drop, &d.Size, &d.Status, &d.Source,
			&launched, &ended, &created, &hourly, &monthly, &decide, &hold, &scope); err != nil {
			return nil, fmt.Errorf("budget deployments: %w", err)
		}
		d.DropletID = drop.Int64
		d.LaunchedAt = time.UnixMilli(launched).UTC()
		d.EndedAt, d.DropletCreatedAt = fromMS(ended), fromMS(created)
		d.HourlyUSD, d.MonthlyUSD, d.Priced = hourly.Float64, monthly.Float64, hourly.Valid
		if decide != math.MaxInt64 {
			b.DecideAt = time.UnixMilli(decide).UTC()
		}
		b.HoldUntil, b.InReaperScope = fromMS(hold), scope == 1
		out = append(out, b)
	}
	return out, rows.Err()
}

// DigestFleet is the fleet as the daily digest tells it.
type DigestFleet struct {
	// Active counts active deployments; Environments the environments
	// holding at least one.
	Active, Environments int
	// Reaped counts the reaper's destroys (events reaper-destroyed)
	// since the digest's period began.
	Reaped int
}

// DigestFleetSince reads the fleet's active deployments now and the
// reaper's destroys at or after since.
func DigestFleetSince(ctx context.Context, q Querier, since time.Time) (DigestFleet, error) {
	var f DigestFleet
	if err := q.QueryRowContext(ctx,
		`SELECT count(*), count(DISTINCT environment_id) FROM deployments WHERE status = 'active'`).Scan(&f.Active, &f.Environments); err != nil {
		return DigestFleet{}, fmt.Errorf("digest fleet: %w", err)
	}
	if err := q.QueryRowContext(ctx,
		`SELECT count(*) FROM lifecycle_events WHERE kind = 'reaper-destroyed' AND occurred_at >= ?`, ms(since)).Scan(&f.Reaped); err != nil {
		return DigestFleet{}, fmt.Errorf("digest fleet: %w", err)
	}
	return f, nil
}

// EscalateAlert raises the open alert id to severity, with detail, and
// records its message queued at at (repeats count from it). ErrNotFound
// when it is not open.
func EscalateAlert(ctx context.Context, q Querier, id, severity, detail string, at time.Time) error {
	return alertUpdate(ctx, q, `UPDATE alerts SET severity = ?, detail = ?, last_sent_at = ? WHERE id = ? AND resolved_at IS NULL`,
		severity, detail, ms(at), id)
}
