package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// The reaper's reads and writes of deployments (docs/operations.md,
// "Reaper"). Every query computes a deployment's decision time with
// decideAtSQL, so the schedule, the due list and the re-check inside the
// claim's transaction cannot disagree.

// idleDueSQL is an active deployment's idle-due time in unix ms, with ?1
// the CI freshness in ms: the idle deadline, or, while the last heartbeat
// reported CI, no earlier than the moment that report goes stale (last
// heartbeat + freshness). A missing deadline never comes (math.MaxInt64).
const idleDueSQL = `CASE WHEN d.ci_active = 1
	             THEN max(coalesce(d.idle_deadline_at, 9223372036854775807), coalesce(d.last_heartbeat_at, 0) + ?1)
	             ELSE coalesce(d.idle_deadline_at, 9223372036854775807) END`

// HoldUpgrading is the reason of the hold an agent upgrade puts on its
// box's deployment (docs/operations.md, "Agent install", under Upgrade):
// unlike the reaper's own holds it holds the idle deadline only, never the
// session expiry, and a heartbeat does not end it (the upgrade does).
const HoldUpgrading = "upgrading"

// decideAtSQL is an active deployment's next decision time in unix ms,
// with ?1 the CI freshness in ms: the session expiry or the idle-due time,
// whichever comes first, then never before the reaper's hold — except
// the upgrading hold, which puts off the idle-due time alone. A missing
// deadline never comes (math.MaxInt64).
const decideAtSQL = `CASE WHEN d.reaper_hold_reason = '` + HoldUpgrading + `' AND d.reaper_hold_until IS NOT NULL
	THEN min(coalesce(d.session_expires_at, 9223372036854775807), max(` + idleDueSQL + `, d.reaper_hold_until))
	ELSE max(min(coalesce(d.session_expires_at, 9223372036854775807), ` + idleDueSQL + `), coalesce(d.reaper_hold_until, 0)) END`

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
	// HoldUntil is the reaper's hold (zero: none); HoldReason is why
	// (one of the reaper's hold reasons; "" for a hold stored without
	// one, by a release before migration 0028).
	HoldUntil  time.Time
	HoldReason string
	// DecideAt is the next decision time (zero: never).
	DecideAt time.Time
}

// Due reports whether the candidate is active and its decision time has
// come at now.
func (c ReaperCandidate) Due(now time.Time) bool {
	return c.Status == DeploymentActive && !c.DecideAt.IsZero() && !c.DecideAt.After(now)
}

const reaperCandidateCols = `d.environment_id, e.slug, e.org_id, d.id, d.droplet_id, d.managed, d.status, d.launched_at,
	d.session_expires_at, d.idle_deadline_at, d.last_heartbeat_at, d.ci_active, d.reaper_hold_until, coalesce(d.reaper_hold_reason, ''), ` + decideAtSQL

func scanReaperCandidate(row interface{ Scan(...any) error }) (ReaperCandidate, error) {
	var c ReaperCandidate
	var drop, launched, sess, idle, last, hold sql.NullInt64
	var managed, ci int
	var decide int64
	if err := row.Scan(&c.EnvironmentID, &c.EnvironmentSlug, &c.OrgID, &c.DeploymentID, &drop, &managed, &c.Status, &launched,
		&sess, &idle, &last, &ci, &hold, &c.HoldReason, &decide); err != nil {
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

// ReaperHold is one reaper hold as stored (docs/operations.md, "Reaper",
// holds that end): until when, why, on what evidence, and the hold's own
// maximum, which bounds it in real time.
type ReaperHold struct {
	// Until is when the hold ends (the reaper's clock).
	Until time.Time
	// Reason is the hold's name (the reaper's HoldReason* constants).
	Reason string
	// Evidence says what the hold rests on, in words (never a secret).
	Evidence string
	// Max is the longest the hold may last from the moment it is
	// written: a stored end further ahead than now + Max was written
	// under a wrong clock and is re-anchored (ReanchorReaperHolds). It
	// must be positive.
	Max time.Duration
}

// LegacyReaperHoldMax bounds a hold stored without its maximum (before
// migration 0028, or by a release without it): the longest hold such a
// release writes, the tag guard's hour.
const LegacyReaperHoldMax = time.Hour

// holdMaxSQL is a row's hold maximum in ms.
const holdMaxSQL = `coalesce(d.reaper_hold_max_ms, 3600000)`

// SetReaperHold sets an active deployment's reaper hold: it is not looked
// at again before h.Until, unless a heartbeat changes its state first.
// Errors: a hold without a positive maximum; database faults.
func SetReaperHold(ctx context.Context, q Querier, environmentID int64, deploymentID string, h ReaperHold) error {
	if h.Max <= 0 {
		return fmt.Errorf("set reaper hold: hold %q has no maximum", h.Reason)
	}
	// The maximum is rounded up to the millisecond, so a hold of exactly
	// its maximum, stored in milliseconds, never looks beyond it.
	maxMS := int64((h.Max + time.Millisecond - 1) / time.Millisecond)
	if _, err := q.ExecContext(ctx,
		`UPDATE deployments SET reaper_hold_until = ?, reaper_hold_reason = ?, reaper_hold_evidence = ?, reaper_hold_max_ms = ?
		 WHERE environment_id = ? AND id = ? AND status = 'active'`,
		ms(h.Until), h.Reason, h.Evidence, maxMS, environmentID, deploymentID); err != nil {
		return fmt.Errorf("set reaper hold: %w", err)
	}
	return nil
}

// HeldDeployment is an active deployment under a reaper hold.
type HeldDeployment struct {
	// EnvironmentID, EnvironmentSlug and DeploymentID name it; DropletID
	// is 0 while unknown.
	EnvironmentID   int64
	EnvironmentSlug string
	DeploymentID    string
	DropletID       int64
	// Hold is the stored hold (Max is LegacyReaperHoldMax for a hold
	// stored without one).
	Hold ReaperHold
}

const heldCols = `d.environment_id, e.slug, d.id, coalesce(d.droplet_id, 0), d.reaper_hold_until,
	coalesce(d.reaper_hold_reason, ''), coalesce(d.reaper_hold_evidence, ''), ` + holdMaxSQL

func scanHeld(row interface{ Scan(...any) error }) (HeldDeployment, error) {
	var h HeldDeployment
	var until, maxMS int64
	if err := row.Scan(&h.EnvironmentID, &h.EnvironmentSlug, &h.DeploymentID, &h.DropletID, &until, &h.Hold.Reason, &h.Hold.Evidence, &maxMS); err != nil {
		return HeldDeployment{}, err
	}
	h.Hold.Until, h.Hold.Max = time.UnixMilli(until).UTC(), time.Duration(maxMS)*time.Millisecond
	return h, nil
}

// ReaperHeld returns at most limit active deployments (every organization)
// whose reaper hold ends after now, the earliest end first, and how many
// there are in all.
func ReaperHeld(ctx context.Context, q Querier, now time.Time, limit int) ([]HeldDeployment, int, error) {
	var total int
	if err := q.QueryRowContext(ctx,
		`SELECT count(*) FROM deployments WHERE status = 'active' AND reaper_hold_until > ?`, ms(now)).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("reaper held: %w", err)
	}
	rows, err := q.QueryContext(ctx,
		`SELECT `+heldCols+` FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.status = 'active' AND d.reaper_hold_until > ?1
		 ORDER BY d.reaper_hold_until, d.environment_id, d.id LIMIT ?2`, ms(now), limit)
	if err != nil {
		return nil, 0, fmt.Errorf("reaper held: %w", err)
	}
	defer rows.Close()
	out := []HeldDeployment{}
	for rows.Next() {
		h, err := scanHeld(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("reaper held: %w", err)
		}
		out = append(out, h)
	}
	return out, total, rows.Err()
}

// ReaperHoldsBeyondMax counts the active deployments whose stored hold
// ends further ahead of now than its own maximum: the holds
// ReanchorReaperHolds would move. A read, for the reaper's every look.
func ReaperHoldsBeyondMax(ctx context.Context, q Querier, now time.Time) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx,
		`SELECT count(*) FROM deployments d WHERE d.status = 'active' AND d.reaper_hold_until > ?1 + `+holdMaxSQL,
		ms(now)).Scan(&n); err != nil {
		return 0, fmt.Errorf("reaper holds beyond their maximum: %w", err)
	}
	return n, nil
}

// Reanchored is a hold ReanchorReaperHolds moved: the deployment with its
// hold as now stored, and the end it had.
type Reanchored struct {
	HeldDeployment
	// Was is the stored end before: further ahead than now + maximum.
	Was time.Time
}

// ReanchorReaperHolds re-anchors at most limit holds of active deployments
// whose stored end lies further ahead of now than the hold's own maximum
// (written under a wrong clock) to now + maximum, and returns them
// (docs/operations.md, "Reaper", holds that end). A hold stored without a
// maximum gets LegacyReaperHoldMax. Run it inside a writer unit: the read
// and the writes are one decision. Errors: database faults.
func ReanchorReaperHolds(ctx context.Context, q Querier, now time.Time, limit int) ([]Reanchored, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+heldCols+` FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.status = 'active' AND d.reaper_hold_until > ?1 + `+holdMaxSQL+`
		 ORDER BY d.reaper_hold_until DESC, d.environment_id, d.id LIMIT ?2`, ms(now), limit)
	if err != nil {
		return nil, fmt.Errorf("reanchor reaper holds: %w", err)
	}
	var out []Reanchored
	for rows.Next() {
		h, err := scanHeld(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("reanchor reaper holds: %w", err)
		}
		out = append(out, Reanchored{HeldDeployment: h, Was: h.Hold.Until})
	}
	// The rows are read to the end before the writes: one statement at a
	// time on the writer's connection.
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("reanchor reaper holds: %w", err)
	}
	for i := range out {
		r := &out[i]
		r.Hold.Until = now.Add(r.Hold.Max)
		if _, err := q.ExecContext(ctx,
			`UPDATE deployments SET reaper_hold_until = ?, reaper_hold_max_ms = ? WHERE environment_id = ? AND id = ?`,
			ms(r.Hold.Until), r.Hold.Max.Milliseconds(), r.EnvironmentID, r.DeploymentID); err != nil {
			return nil, fmt.Errorf("reanchor reaper holds: %w", err)
		}
	}
	return out, nil
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
const deadlineSQL = `min(coalesce(d.session_expires_at, 9223372036854775807), ` + idleDueSQL + `)`

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
