package storage

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"
)

// The reaper's reads and writes of deployments (docs/operations.md,
// "Reaper"). Every query computes a deployment's decision time with
// decideAtSQL, so the schedule, the due list and the re-check inside the
// claim's transaction cannot disagree.

// decideAtSQL is an active deployment's next decision time in unix ms,
// with ?1 the CI freshness in ms: the session expiry or the idle-due time,
// whichever comes first, where the idle-due time is the idle deadline, or,
// while the last heartbeat reported CI, no earlier than the moment that
// report goes stale (last heartbeat + freshness); then never before the
// reaper's hold. A missing deadline never comes (math.MaxInt64).
const decideAtSQL = `max(
	    min(coalesce(d.session_expires_at, 9223372036854775807),
	        CASE WHEN d.ci_active = 1
	             THEN max(coalesce(d.idle_deadline_at, 9223372036854775807), coalesce(d.last_heartbeat_at, 0) + ?1)
	             ELSE coalesce(d.idle_deadline_at, 9223372036854775807) END),
	    coalesce(d.reaper_hold_until, 0))`

// platformScopeSQL selects the deployments the platform write token reaps:
// the platform organization's and managed ones (customer organizations'
// deployments are their own sweep's, with their own token).
const platformScopeSQL = `(e.org_id = 1 OR d.managed = 1)`

// customerScopeSQL selects the deployments customer sweeps reap: a
// deployment is a customer's when its environment's organization has kind
// customer and it is not managed; it is in scope only while that
// organization holds an active provider token (docs/operations.md,
// "Customer organizations"). Without one nothing may reap it, so it is not
// due for anyone and cannot make the reaper spin.
const customerScopeSQL = `(d.managed = 0 AND e.org_id IN (SELECT t.org_id FROM org_provider_tokens t
	JOIN organizations o ON o.id = t.org_id WHERE o.kind = 'customer' AND t.status = 'active'))`

// ReaperCandidate is an active deployment as the reaper judges it.
type ReaperCandidate struct {
	// EnvironmentID, EnvironmentSlug and OrgID locate the deployment.
	EnvironmentID   int64
	EnvironmentSlug string
	OrgID           int64
	// DeploymentID is the agent's deployment id.
	DeploymentID string
	// DropletID is 0 while unknown.
	DropletID int64
	// Managed deployments are reaped with the platform token.
	Managed bool
	// Status is active or ended (a re-check may find it ended).
	Status string
	// LaunchedAt is the first heartbeat's arrival.
	LaunchedAt time.Time
	// SessionExpiresAt, IdleDeadlineAt and LastHeartbeatAt are zero when
	// absent.
	SessionExpiresAt, IdleDeadlineAt, LastHeartbeatAt time.Time
	// CIActive is the last heartbeat's CI flag.
	CIActive bool
	// HoldUntil is the reaper's hold (zero: none).
	HoldUntil time.Time
	// DecideAt is the next decision time (zero: never).
	DecideAt time.Time
}

// Due reports whether the candidate is active and its decision time has
// come at now.
func (c ReaperCandidate) Due(now time.Time) bool {
	return c.Status == DeploymentActive && !c.DecideAt.IsZero() && !c.DecideAt.After(now)
}

const reaperCandidateCols = `d.environment_id, e.slug, e.org_id, d.id, d.droplet_id, d.managed, d.status, d.launched_at,
	d.session_expires_at, d.idle_deadline_at, d.last_heartbeat_at, d.ci_active, d.reaper_hold_until, ` + decideAtSQL

func scanReaperCandidate(row interface{ Scan(...any) error }) (ReaperCandidate, error) {
	var c ReaperCandidate
	var drop, launched, sess, idle, last, hold sql.NullInt64
	var managed, ci int
	var decide int64
	if err := row.Scan(&c.EnvironmentID, &c.EnvironmentSlug, &c.OrgID, &c.DeploymentID, &drop, &managed, &c.Status, &launched,
		&sess, &idle, &last, &ci, &hold, &decide); err != nil {
		return ReaperCandidate{}, err
	}
	c.DropletID, c.Managed, c.CIActive = drop.Int64, managed == 1, ci == 1
	c.LaunchedAt, c.SessionExpiresAt, c.IdleDeadlineAt = fromMS(launched), fromMS(sess), fromMS(idle)
	c.LastHeartbeatAt, c.HoldUntil = fromMS(last), fromMS(hold)
	if decide != math.MaxInt64 {
		c.DecideAt = time.UnixMilli(decide).UTC()
	}
	return c, nil
}

// ReaperDue returns at most limit active platform-scope deployments whose
// decision time is at or before now, the earliest first. fresh is how long
// a heartbeat's CI report counts as live.
func ReaperDue(ctx context.Context, q Querier, now time.Time, fresh time.Duration, limit int) ([]ReaperCandidate, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+reaperCandidateCols+` AS decide_at
		 FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.status = 'active' AND `+platformScopeSQL+` AND `+decideAtSQL+` <= ?2
		 ORDER BY decide_at, d.environment_id, d.id LIMIT ?3`,
		fresh.Milliseconds(), ms(now), limit)
	if err != nil {
		return nil, fmt.Errorf("reaper due: %w", err)
	}
	defer rows.Close()
	var out []ReaperCandidate
	for rows.Next() {
		c, err := scanReaperCandidate(rows)
		if err != nil {
			return nil, fmt.Errorf("reaper due: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ReaperCandidateByID reads one deployment as ReaperDue would judge it,
// whatever its status: the claim re-reads it inside its transaction.
// Errors: ErrNotFound.
func ReaperCandidateByID(ctx context.Context, q Querier, environmentID int64, deploymentID string, fresh time.Duration) (ReaperCandidate, error) {
	c, err := scanReaperCandidate(q.QueryRowContext(ctx,
		`SELECT `+reaperCandidateCols+`
		 FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.environment_id = ?2 AND d.id = ?3`,
		fresh.Milliseconds(), environmentID, deploymentID))
	if err != nil {
		return ReaperCandidate{}, notFound(err)
	}
	return c, nil
}

// ReaperSchedule is what the reaper sleeps on.
type ReaperSchedule struct {
	// Active counts every active deployment, of any organization: while
	// there is one, the reaper re-checks at least every 5 minutes.
	Active int
	// Due counts platform- and customer-scope deployments whose decision
	// time has come.
	Due int
	// Next is the earliest platform- or customer-scope decision time after
	// now (zero: none).
	Next time.Time
}

// ReaperNext computes the reaper's schedule at now in one read.
func ReaperNext(ctx context.Context, q Querier, now time.Time, fresh time.Duration) (ReaperSchedule, error) {
	var s ReaperSchedule
	var next sql.NullInt64
	err := q.QueryRowContext(ctx,
		`SELECT count(*),
		        coalesce(sum(in_scope AND decide_at <= ?2), 0),
		        min(CASE WHEN in_scope AND decide_at > ?2 AND decide_at < 9223372036854775807 THEN decide_at END)
		 FROM (SELECT (`+platformScopeSQL+` OR `+customerScopeSQL+`) AS in_scope, `+decideAtSQL+` AS decide_at
		       FROM deployments d JOIN environments e ON e.id = d.environment_id
		       WHERE d.status = 'active')`,
		fresh.Milliseconds(), ms(now)).Scan(&s.Active, &s.Due, &next)
	if err != nil {
		return ReaperSchedule{}, fmt.Errorf("reaper schedule: %w", err)
	}
	s.Next = fromMS(next)
	return s, nil
}

// SetReaperHold sets an active deployment's reaper hold: it is not looked
// at again before until, unless a heartbeat changes its state first.
func SetReaperHold(ctx context.Context, q Querier, environmentID int64, deploymentID string, until time.Time) error {
	if _, err := q.ExecContext(ctx,
		`UPDATE deployments SET reaper_hold_until = ? WHERE environment_id = ? AND id = ? AND status = 'active'`,
		ms(until), environmentID, deploymentID); err != nil {
		return fmt.Errorf("set reaper hold: %w", err)
	}
	return nil
}

// SetDropletIDIfUnknown records the droplet a deployment without one was
// found to run on (the reaper's look-up by tags); a known droplet id never
// changes (docs/operations.md, "Heartbeats and deadlines").
func SetDropletIDIfUnknown(ctx context.Context, q Querier, environmentID int64, deploymentID string, dropletID int64) error {
	if _, err := q.ExecContext(ctx,
		`UPDATE deployments SET droplet_id = ? WHERE environment_id = ? AND id = ? AND droplet_id IS NULL`,
		dropletID, environmentID, deploymentID); err != nil {
		return fmt.Errorf("set droplet id: %w", err)
	}
	return nil
}

// CustomerDueOrgs returns the customer organizations with at least one
// customer-scope deployment due at now (so an active provider token),
// ordered by id: the customer sweep's candidates.
func CustomerDueOrgs(ctx context.Context, q Querier, now time.Time, fresh time.Duration) ([]Organization, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT o.id, o.slug, o.name, o.kind FROM organizations o
		 WHERE EXISTS (SELECT 1 FROM deployments d JOIN environments e ON e.id = d.environment_id
		               WHERE e.org_id = o.id AND d.status = 'active' AND `+customerScopeSQL+` AND `+decideAtSQL+` <= ?2)
		 ORDER BY o.id`,
		fresh.Milliseconds(), ms(now))
	if err != nil {
		return nil, fmt.Errorf("customer due organizations: %w", err)
	}
	defer rows.Close()
	var out []Organization
	for rows.Next() {
		var o Organization
		if err := rows.Scan(&o.ID, &o.Slug, &o.Name, &o.Kind); err != nil {
			return nil, fmt.Errorf("customer due organizations: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// ReaperDueInOrg returns at most limit customer-scope deployments of
// organization orgID due at now, the earliest first.
func ReaperDueInOrg(ctx context.Context, q Querier, orgID int64, now time.Time, fresh time.Duration, limit int) ([]ReaperCandidate, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+reaperCandidateCols+` AS decide_at
		 FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.status = 'active' AND e.org_id = ?4 AND `+customerScopeSQL+` AND `+decideAtSQL+` <= ?2
		 ORDER BY decide_at, d.environment_id, d.id LIMIT ?3`,
		fresh.Milliseconds(), ms(now), limit, orgID)
	if err != nil {
		return nil, fmt.Errorf("reaper due in organization: %w", err)
	}
	defer rows.Close()
	var out []ReaperCandidate
	for rows.Next() {
		c, err := scanReaperCandidate(rows)
		if err != nil {
			return nil, fmt.Errorf("reaper due in organization: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ActiveWithoutHeartbeatSince counts the active deployments (of
// environment envSlug, or of all when it is "") whose last heartbeat
// arrived before since: the reaper's clock guard lifts once none is left
// (docs/operations.md, "Reaper").
func ActiveWithoutHeartbeatSince(ctx context.Context, q Querier, envSlug string, since time.Time) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx,
		`SELECT count(*) FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.status = 'active' AND (?1 = '' OR e.slug = ?1) AND coalesce(d.last_heartbeat_at, 0) < ?2`,
		envSlug, ms(since)).Scan(&n); err != nil {
		return 0, fmt.Errorf("active without heartbeat: %w", err)
	}
	return n, nil
}

// MassDue is an environment where many active deployments are due at once.
type MassDue struct {
	// EnvironmentID and EnvironmentSlug name the environment.
	EnvironmentID   int64
	EnvironmentSlug string
	// Active counts its active deployments; Due those due (platform or
	// customer scope).
	Active, Due int
}

// ReaperMassDue returns the environments where more than half of the
// active deployments, and at least minDue, are due at now.
func ReaperMassDue(ctx context.Context, q Querier, now time.Time, fresh time.Duration, minDue int) ([]MassDue, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT environment_id, slug, count(*), coalesce(sum(in_scope AND decide_at <= ?2), 0) AS due
		 FROM (SELECT d.environment_id, e.slug, (`+platformScopeSQL+` OR `+customerScopeSQL+`) AS in_scope, `+decideAtSQL+` AS decide_at
		       FROM deployments d JOIN environments e ON e.id = d.environment_id
		       WHERE d.status = 'active')
		 GROUP BY environment_id HAVING due >= ?3 AND 2 * due > count(*)
		 ORDER BY environment_id`,
		fresh.Milliseconds(), ms(now), minDue)
	if err != nil {
		return nil, fmt.Errorf("reaper mass due: %w", err)
	}
	defer rows.Close()
	var out []MassDue
	for rows.Next() {
		var m MassDue
		if err := rows.Scan(&m.EnvironmentID, &m.EnvironmentSlug, &m.Active, &m.Due); err != nil {
			return nil, fmt.Errorf("reaper mass due: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// deadlineSQL is decideAtSQL without the reaper's hold: when the
// deployment's own deadline fell.
const deadlineSQL = `min(coalesce(d.session_expires_at, 9223372036854775807),
	        CASE WHEN d.ci_active = 1
	             THEN max(coalesce(d.idle_deadline_at, 9223372036854775807), coalesce(d.last_heartbeat_at, 0) + ?1)
	             ELSE coalesce(d.idle_deadline_at, 9223372036854775807) END)`

// ReaperOverdue counts the active deployments the platform write token
// reaps whose own deadline (holds aside) is at or before before: what the
// reaper should have destroyed by then (docs/operations.md, "Reaper").
// fresh is the CI freshness, as for ReaperDue.
func ReaperOverdue(ctx context.Context, q Querier, before time.Time, fresh time.Duration) (int, error) {
	var n int
	err := q.QueryRowContext(ctx,
		`SELECT count(*) FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.status = 'active' AND `+platformScopeSQL+` AND `+deadlineSQL+` <= ?2`,
		fresh.Milliseconds(), ms(before)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("reaper overdue: %w", err)
	}
	return n, nil
}
