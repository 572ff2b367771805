package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// Deployment statuses.
const (
	DeploymentActive = "active"
	DeploymentEnded  = "ended"
)

// Deployment is one row of deployments.
type Deployment struct {
	ID               string
	EnvironmentID    int64
	DropletID        int64 // 0 when unknown
	Region, Size     string
	Status           string
	LaunchedAt       time.Time
	EndedAt          time.Time
	SessionExpiresAt time.Time
	IdleDeadlineAt   time.Time
	LastHeartbeatAt  time.Time
	CIActive         bool
	AgentVersion     string
}

// DeploymentStatus returns the status of deployment id in the environment
// (deployment ids are scoped to their environment). Errors: ErrNotFound.
func DeploymentStatus(ctx context.Context, q Querier, environmentID int64, id string) (string, error) {
	var st string
	if err := q.QueryRowContext(ctx, `SELECT status FROM deployments WHERE environment_id = ? AND id = ?`, environmentID, id).Scan(&st); err != nil {
		return "", notFound(err)
	}
	return st, nil
}

// Heartbeat is one accepted heartbeat, as stored.
type Heartbeat struct {
	DeploymentID  string
	EnvironmentID int64
	KeyID         string
	ReceivedAt    time.Time
	SentAt        time.Time
	AgentVersion  string
	DropletID     int64 // 0 when not sent
	Region, Size  string
	IdleChecks    int64
	LimitMinutes  int64
	// LastActivityAt is the activity time the agent sent, on its own
	// clock; it is kept on the heartbeat row as sent.
	LastActivityAt time.Time
	// ActivityAt is that activity on the server's clock: ReceivedAt minus
	// the activity's age as the agent measured it (docs/operations.md,
	// "Heartbeats and deadlines"). The deployment keeps the latest, and
	// its idle deadline is never later than ReceivedAt + the limit. Zero
	// means LastActivityAt, taken as it is and without that cap (fixtures
	// and callers that state the activity on the server's clock).
	ActivityAt time.Time
	// Late marks a heartbeat that took longer on its way than its
	// deployment's others (the transit rule): it is stored, with Late on
	// its row, but changes nothing on its deployment.
	Late             bool
	CIActive         bool
	IdleDeadlineAt   time.Time
	SessionExpiresAt time.Time // zero when not sent
}

// activity is the heartbeat's activity on the server's clock, and the
// time the idle deadline may not pass less the limit (the zero time: no
// cap): ActivityAt and ReceivedAt, or LastActivityAt alone.
func (hb Heartbeat) activity() (at, capAt time.Time) {
	if hb.ActivityAt.IsZero() {
		return hb.LastActivityAt, time.Time{}
	}
	return hb.ActivityAt, hb.ReceivedAt
}

// RecordHeartbeat applies one heartbeat: it creates the deployment on its
// first heartbeat (active, launched now, and the environment back to active
// if it had sunk), otherwise updates the deployment's last heartbeat, CI
// flag, latest activity, idle deadline and (when sent) session expiry, then
// stores the heartbeat row. The caller has checked that the deployment is
// not ended (DeploymentStatus); created reports a new deployment. Errors:
// ErrDropletMismatch.
func RecordHeartbeat(ctx context.Context, q Querier, hb Heartbeat, exists bool) (created bool, err error) {
	if !exists {
		if _, err := insertDeployment(ctx, q, hb); err != nil {
			return false, err
		}
		created = true
	} else if _, _, ok, err := updateDeployment(ctx, q, hb); err != nil {
		return false, err
	} else if !ok {
		return false, ErrDropletMismatch
	}
	return created, insertHeartbeat(ctx, q, hb)
}

// ApplyHeartbeat is ApplyHeartbeatWithin without the active-deployment
// bound, for callers that need only whether the deployment was created.
func ApplyHeartbeat(ctx context.Context, q Querier, hb Heartbeat) (created bool, err error) {
	res, err := ApplyHeartbeatWithin(ctx, q, hb, 0)
	return res.Created, err
}

// HeartbeatApplied is what ApplyHeartbeatWithin did.
type HeartbeatApplied struct {
	// Created is true when the heartbeat created its deployment.
	Created bool
	// IdleDeadlineAt is the deployment's idle deadline as stored after the
	// heartbeat: its latest activity (never moved back by this one) plus
	// this heartbeat's limit (docs/operations.md, "Heartbeats and
	// deadlines").
	IdleDeadlineAt time.Time
	// SessionExpiresAt is the deployment's session expiry as stored after
	// the heartbeat (zero: none): the one it asked for, or an earlier one,
	// clamped to launch + maximum by the environment's session policy, or
	// given by that policy when none was ever asked for
	// (docs/operations.md, "Session policies").
	SessionExpiresAt time.Time
}

// ApplyHeartbeatWithin applies a heartbeat for a caller that has not read
// the deployment's status: the update of an active deployment is tried
// first, so the usual heartbeat costs one statement, and only when no active
// deployment matched is the status read, to tell a first heartbeat (the
// deployment is created) from one for an ended deployment
// (ErrDeploymentEnded) or one naming another droplet than the deployment's
// (ErrDropletMismatch). A first heartbeat that finds maxActive (> 0) active
// deployments in its environment already is refused with
// ErrDeploymentQuota; 0 is unlimited. Run inside a writer unit, the count is
// exact (docs/operations.md, "Quotas"). Every refusal writes nothing.
func ApplyHeartbeatWithin(ctx context.Context, q Querier, hb Heartbeat, maxActive int) (HeartbeatApplied, error) {
	update := updateDeployment
	if hb.Late {
		update = lateHeartbeatDeployment
	}
	deadline, expiry, ok, err := update(ctx, q, hb)
	if err != nil {
		return HeartbeatApplied{}, err
	}
	res := HeartbeatApplied{IdleDeadlineAt: deadline, SessionExpiresAt: expiry}
	if !ok {
		st, err := DeploymentStatus(ctx, q, hb.EnvironmentID, hb.DeploymentID)
		switch {
		case errors.Is(err, ErrNotFound):
			if maxActive > 0 {
				active, err := CountActiveDeployments(ctx, q, hb.EnvironmentID)
				if err != nil {
					return HeartbeatApplied{}, err
				}
				if active >= maxActive {
					return HeartbeatApplied{}, ErrDeploymentQuota
				}
			}
			expiry, err := insertDeployment(ctx, q, hb)
			if err != nil {
				return HeartbeatApplied{}, err
			}
			res = HeartbeatApplied{Created: true, IdleDeadlineAt: firstDeadline(hb), SessionExpiresAt: expiry}
		case err != nil:
			return HeartbeatApplied{}, err
		case st == DeploymentEnded:
			return HeartbeatApplied{}, ErrDeploymentEnded
		default:
			// Active, yet the update matched nothing: only the droplet
			// guard can have refused it.
			return HeartbeatApplied{}, ErrDropletMismatch
		}
	}
	return res, insertHeartbeat(ctx, q, hb)
}

// idleDeadline is activity + limit minutes, at the schema's millisecond
// resolution.
func idleDeadline(activity time.Time, limitMinutes int64) time.Time {
	return time.UnixMilli(ms(activity) + limitMinutes*60_000).UTC()
}

// firstDeadline is the idle deadline a deployment's first heartbeat sets:
// its activity plus its limit, capped as updateDeployment caps it.
func firstDeadline(hb Heartbeat) time.Time {
	at, capAt := hb.activity()
	d := idleDeadline(at, hb.LimitMinutes)
	if c := idleDeadline(capAt, hb.LimitMinutes); !capAt.IsZero() && c.Before(d) {
		return c
	}
	return d
}

// CountActiveDeployments returns how many deployments of the environment
// are active (index deployments_environment).
func CountActiveDeployments(ctx context.Context, q Querier, environmentID int64) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx,
		`SELECT count(*) FROM deployments WHERE environment_id = ? AND status = 'active'`, environmentID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count active deployments: %w", err)
	}
	return n, nil
}

// insertDeployment creates the deployment of a first heartbeat (active,
// launched now) and sets its environment back to active if it had sunk. It
// returns the session expiry it stored (zero: none): the heartbeat's, within
// the environment's session policy (docs/operations.md, "Session policies").
func insertDeployment(ctx context.Context, q Querier, hb Heartbeat) (time.Time, error) {
	var expiry sql.NullInt64
	at, _ := hb.activity()
	if err := q.QueryRowContext(ctx,
		`INSERT INTO deployments (id, environment_id, droplet_id, region, size, status, launched_at,
		     session_expires_at, last_activity_at, limit_minutes, idle_deadline_at, last_heartbeat_at, ci_active, agent_version)
		 VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, `+clampedExpirySQL("?7", sessionCapSQL("?2", "?6"))+`, ?8, ?9, ?10, ?11, ?12, ?13)
		 RETURNING session_expires_at`,
		hb.DeploymentID, hb.EnvironmentID, nullInt(hb.DropletID), hb.Region, hb.Size, ms(hb.ReceivedAt),
		msPtr(hb.SessionExpiresAt), ms(at), hb.LimitMinutes, ms(firstDeadline(hb)),
		ms(hb.ReceivedAt), boolInt(hb.CIActive), hb.AgentVersion).Scan(&expiry); err != nil {
		return time.Time{}, fmt.Errorf("insert deployment: %w", err)
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE environments SET status = 'active', updated_at = ? WHERE id = ? AND status = 'sunk'`,
		ms(hb.ReceivedAt), hb.EnvironmentID); err != nil {
		return time.Time{}, fmt.Errorf("reactivate environment: %w", err)
	}
	return fromMS(expiry), nil
}

// updateDeployment applies a heartbeat to its deployment if it is active
// and the heartbeat names no other droplet than the one the deployment
// already has, and returns the stored idle deadline; ok is false when no row
// matched. The latest activity only moves forward — a delayed heartbeat
// carrying an older activity cannot pull the deadline back — and the
// deadline is that latest activity plus this heartbeat's limit, so a change
// of limit applies to it, but never later than the heartbeat's arrival
// plus that limit, so an activity stored ahead of the server's clock (one
// that stepped back, or an agent's own clock before activity was placed on
// the server's) holds nothing past one limit (docs/operations.md,
// "Heartbeats and deadlines").
// The session expiry is the heartbeat's (or, without one, the stored one)
// within the environment's session policy: never later than launch +
// maximum, and that when there is none (docs/operations.md, "Session
// policies"); the stored expiry is returned (zero: none).
// A heartbeat that changes what the reaper decides on (droplet id, idle
// deadline, session expiry, CI flag) clears the reaper's hold, so a
// deployment the reaper deferred is looked at again at once
// (docs/operations.md, "Reaper"); a heartbeat that changes none of them
// leaves the hold. An agent upgrade's hold (HoldUpgrading) always stays:
// the heartbeat of the agent being replaced is no evidence for the new
// one, and the upgrade ends its hold itself.
func updateDeployment(ctx context.Context, q Querier, hb Heartbeat) (deadline, expiry time.Time, ok bool, err error) {
	var d int64
	var e sql.NullInt64
	at, capAt := hb.activity()
	capMS := int64(math.MaxInt64)
	if !capAt.IsZero() {
		capMS = ms(capAt) + hb.LimitMinutes*60_000
	}
	err = q.QueryRowContext(ctx,
		`UPDATE deployments SET
		     droplet_id = coalesce(droplet_id, ?1),
		     region = CASE WHEN ?2 = '' THEN region ELSE ?2 END,
		     size = CASE WHEN ?3 = '' THEN size ELSE ?3 END,
		     session_expires_at = `+heartbeatExpirySQL+`,
		     last_activity_at = max(coalesce(last_activity_at, ?5), ?5),
		     limit_minutes = ?6,
		     idle_deadline_at = `+heartbeatDeadlineSQL+`,
		     last_heartbeat_at = ?7, ci_active = ?8, agent_version = ?9,
		     reaper_hold_until = CASE WHEN reaper_hold_reason = '`+HoldUpgrading+`' THEN reaper_hold_until
		         WHEN (droplet_id IS NULL AND ?1 IS NOT NULL)
		             OR (`+heartbeatExpirySQL+`) IS NOT session_expires_at
		             OR `+heartbeatDeadlineSQL+` IS NOT idle_deadline_at
		             OR ci_active != ?8
		         THEN NULL ELSE reaper_hold_until END
		 WHERE environment_id = ?10 AND id = ?11 AND status = 'active'
		   AND (?1 IS NULL OR droplet_id IS NULL OR droplet_id = ?1)
		 RETURNING idle_deadline_at, session_expires_at`,
		nullInt(hb.DropletID), hb.Region, hb.Size, msPtr(hb.SessionExpiresAt), ms(at), hb.LimitMinutes,
		ms(hb.ReceivedAt), boolInt(hb.CIActive), hb.AgentVersion, hb.EnvironmentID, hb.DeploymentID, capMS).Scan(&d, &e)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, time.Time{}, false, fmt.Errorf("update deployment: %w", err)
	}
	return time.UnixMilli(d).UTC(), fromMS(e), true, nil
}

// heartbeatDeadlineSQL is updateDeployment's idle deadline: the latest
// activity (the stored one or the heartbeat's, ?5) plus the heartbeat's
// limit (?6), and no later than ?12 (its arrival plus that limit).
const heartbeatDeadlineSQL = `min(max(coalesce(last_activity_at, ?5), ?5) + ?6 * 60000, ?12)`

// lateHeartbeatDeployment is updateDeployment for a late heartbeat (the
// transit rule): it changes nothing, and reads the deployment the update
// would have matched — active, and naming no other droplet — for its idle
// deadline and session expiry; ok is false when none matched.
func lateHeartbeatDeployment(ctx context.Context, q Querier, hb Heartbeat) (deadline, expiry time.Time, ok bool, err error) {
	var d, e sql.NullInt64
	err = q.QueryRowContext(ctx,
		`SELECT idle_deadline_at, session_expires_at FROM deployments
		 WHERE environment_id = ?1 AND id = ?2 AND status = 'active'
		   AND (?3 IS NULL OR droplet_id IS NULL OR droplet_id = ?3)`,
		hb.EnvironmentID, hb.DeploymentID, nullInt(hb.DropletID)).Scan(&d, &e)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, time.Time{}, false, fmt.Errorf("read deployment: %w", err)
	}
	return fromMS(d), fromMS(e), true, nil
}

// heartbeatExpirySQL is updateDeployment's session expiry: the heartbeat's
// (?4) or the stored one, within the policy of the environment (?10) for
// the row's launch.
var heartbeatExpirySQL = clampedExpirySQL("coalesce(?4, session_expires_at)", sessionCapSQL("?10", "launched_at"))

// lateFlag is heartbeats.late: 1 for a late heartbeat, NULL otherwise (a
// NULL costs the row one header byte).
func lateFlag(late bool) any {
	if late {
		return 1
	}
	return nil
}

// insertHeartbeat stores the heartbeat row.
func insertHeartbeat(ctx context.Context, q Querier, hb Heartbeat) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO heartbeats (environment_id, deployment_id, key_id, received_at, sent_at, agent_version, idle_checks,
		     limit_minutes, last_activity_at, ci_active, idle_deadline_at, session_expires_at, late)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		hb.EnvironmentID, hb.DeploymentID, hb.KeyID, ms(hb.ReceivedAt), ms(hb.SentAt), hb.AgentVersion, hb.IdleChecks,
		hb.LimitMinutes, ms(hb.LastActivityAt), boolInt(hb.CIActive), ms(hb.IdleDeadlineAt), msPtr(hb.SessionExpiresAt), lateFlag(hb.Late)); err != nil {
		return fmt.Errorf("insert heartbeat: %w", err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func nullInt(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// FleetEnvironment is one environment with its deployments and key counts,
// for GET /api/admin/fleet.
type FleetEnvironment struct {
	Environment
	KeyCounts   map[string]int
	Deployments []Deployment
}

// Fleet returns every environment with its deployments (active first, then
// the most recently launched) and its ingest key count by status. Ended
// deployments are limited to the endedLimit most recent per environment.
func Fleet(ctx context.Context, q Querier, endedLimit int) ([]FleetEnvironment, error) {
	envs, err := ListEnvironments(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]FleetEnvironment, len(envs))
	idx := map[int64]int{}
	for i, e := range envs {
		out[i] = FleetEnvironment{Environment: e, KeyCounts: map[string]int{KeyActive: 0, KeyRotating: 0, KeyRevoked: 0}, Deployments: []Deployment{}}
		idx[e.ID] = i
	}
	rows, err := q.QueryContext(ctx, `SELECT environment_id, status, count(*) FROM ingest_keys GROUP BY environment_id, status`)
	if err != nil {
		return nil, fmt.Errorf("count ingest keys: %w", err)
	}
	for rows.Next() {
		var id int64
		var st string
		var n int
		if err := rows.Scan(&id, &st, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count ingest keys: %w", err)
		}
		if i, ok := idx[id]; ok {
			out[i].KeyCounts[st] = n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count ingest keys: %w", err)
	}
	rows, err = q.QueryContext(ctx,
		`SELECT id, environment_id, droplet_id, region, size, status, launched_at, ended_at,
		        session_expires_at, idle_deadline_at, last_heartbeat_at, ci_active, agent_version
		 FROM (SELECT d.*, row_number() OVER (PARTITION BY environment_id, status ORDER BY launched_at DESC) AS rn
		       FROM deployments d)
		 WHERE status = 'active' OR rn <= ?
		 ORDER BY environment_id, status = 'ended', launched_at DESC`, endedLimit)
	if err != nil {
		return nil, fmt.Errorf("list deployments: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d Deployment
		var drop, launched, ended, sess, idle, last sql.NullInt64
		var ci int
		if err := rows.Scan(&d.ID, &d.EnvironmentID, &drop, &d.Region, &d.Size, &d.Status, &launched, &ended,
			&sess, &idle, &last, &ci, &d.AgentVersion); err != nil {
			return nil, fmt.Errorf("list deployments: %w", err)
		}
		d.DropletID = drop.Int64
		d.LaunchedAt, d.EndedAt, d.SessionExpiresAt = fromMS(launched), fromMS(ended), fromMS(sess)
		d.IdleDeadlineAt, d.LastHeartbeatAt, d.CIActive = fromMS(idle), fromMS(last), ci == 1
		if i, ok := idx[d.EnvironmentID]; ok {
			out[i].Deployments = append(out[i].Deployments, d)
		}
	}
	return out, rows.Err()
}

// DeploymentExists reports whether environment envID has deployment id
// (in any status). Errors: the database's.
func DeploymentExists(ctx context.Context, q Querier, envID int64, id string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM deployments WHERE environment_id = ? AND id = ?`, envID, id).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read deployment: %w", err)
	}
	return n > 0, nil
}
