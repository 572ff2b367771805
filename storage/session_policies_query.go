package storage

import (
	"context"
	"fmt"
	"time"
)

// Session policies (docs/operations.md, "Session policies"): an
// environment's bound on how long any of its deployments may live.

// Session policy kinds and bounds, as migration 0015 checks them.
const (
	// SessionKindDemo marks an environment of demo sessions.
	SessionKindDemo = "demo"
	// SessionKindTest marks an environment of test sessions.
	SessionKindTest = "test"
	// MinSessionSeconds is the shortest maximum a policy may set (seconds):
	// the reaper's other deadline, the idle limit, counts whole minutes,
	// and a droplet needs about that long to boot and report at all.
	MinSessionSeconds = 60
	// MaxSessionSeconds is the longest maximum a policy may set (30 days,
	// in seconds): a session allowed to run longer is not bounded in any
	// sense that matters for cost.
	MaxSessionSeconds = 30 * 24 * 60 * 60
)

// SessionPolicy is one row of environment_session_policies.
type SessionPolicy struct {
	EnvironmentID int64
	// Kind is SessionKindDemo or SessionKindTest.
	Kind string
	// MaxSeconds is the maximum session length in seconds.
	MaxSeconds int64
	UpdatedAt  time.Time
}

// Max is the maximum session length as a duration.
func (p SessionPolicy) Max() time.Duration { return time.Duration(p.MaxSeconds) * time.Second }

// sessionCapSQL is the SQL expression of the latest session expiry
// (unix ms) a deployment of environment envExpr launched at launchExpr
// (unix ms) may have under its environment's policy, NULL without one.
func sessionCapSQL(envExpr, launchExpr string) string {
	return `(SELECT ` + launchExpr + ` + p.max_session_seconds * 1000 FROM environment_session_policies p WHERE p.environment_id = ` + envExpr + `)`
}

// clampedExpirySQL is the session expiry a deployment stores given the
// expiry asked for (askExpr, NULL: none) and the policy's cap (capExpr,
// NULL: no policy): without a cap the ask; with one, the earlier of the
// ask and the cap, and the cap when nothing was asked.
func clampedExpirySQL(askExpr, capExpr string) string {
	return `CASE WHEN ` + capExpr + ` IS NULL THEN ` + askExpr +
		` ELSE min(coalesce(` + askExpr + `, ` + capExpr + `), ` + capExpr + `) END`
}

// SetSessionPolicy creates or replaces the environment's policy and applies
// it to the environment's active deployments at once: each gets the
// earlier of its session expiry and its launch plus the maximum (one with
// no expiry gets the latter), and a deployment whose expiry this changes
// loses any reaper hold so the reaper looks at it again. It returns how
// many active deployments it changed and the earliest expiry among them
// (zero when none), for the reaper's wake-up. Run it inside a writer unit.
func SetSessionPolicy(ctx context.Context, q Querier, p SessionPolicy) (changed int, earliest time.Time, err error) {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO environment_session_policies (environment_id, kind, max_session_seconds, updated_at)
		 VALUES (?, ?, ?, ?)
		 ON CONFLICT (environment_id) DO UPDATE SET kind = excluded.kind,
		     max_session_seconds = excluded.max_session_seconds, updated_at = excluded.updated_at`,
		p.EnvironmentID, p.Kind, p.MaxSeconds, ms(p.UpdatedAt)); err != nil {
		return 0, time.Time{}, fmt.Errorf("set session policy: %w", err)
	}
	capMS := `launched_at + ?1 * 1000`
	rows, err := q.QueryContext(ctx,
		`UPDATE deployments SET session_expires_at = `+clampedExpirySQL("session_expires_at", capMS)+`,
		     reaper_hold_until = CASE WHEN reaper_hold_reason = '`+HoldUpgrading+`' THEN reaper_hold_until ELSE NULL END
		 WHERE environment_id = ?2 AND status = 'active'
		   AND (session_expires_at IS NULL OR session_expires_at > `+capMS+`)
		 RETURNING session_expires_at`, p.MaxSeconds, p.EnvironmentID)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("apply session policy: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			return 0, time.Time{}, fmt.Errorf("apply session policy: %w", err)
		}
		changed++
		if t := time.UnixMilli(at).UTC(); earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	if err := rows.Err(); err != nil {
		return 0, time.Time{}, fmt.Errorf("apply session policy: %w", err)
	}
	return changed, earliest, nil
}

// ClearSessionPolicy removes the environment's policy; existed is false
// when it had none. Expiries the policy already gave deployments stay:
// they were the bound those sessions were launched under.
func ClearSessionPolicy(ctx context.Context, q Querier, environmentID int64) (existed bool, err error) {
	res, err := q.ExecContext(ctx, `DELETE FROM environment_session_policies WHERE environment_id = ?`, environmentID)
	if err != nil {
		return false, fmt.Errorf("clear session policy: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("clear session policy: %w", err)
	}
	return n == 1, nil
}

// ListSessionPolicies returns every environment's policy by environment id.
func ListSessionPolicies(ctx context.Context, q Querier) (map[int64]SessionPolicy, error) {
	rows, err := q.QueryContext(ctx, `SELECT environment_id, kind, max_session_seconds, updated_at FROM environment_session_policies`)
	if err != nil {
		return nil, fmt.Errorf("list session policies: %w", err)
	}
	defer rows.Close()
	out := map[int64]SessionPolicy{}
	for rows.Next() {
		var p SessionPolicy
		var u int64
		if err := rows.Scan(&p.EnvironmentID, &p.Kind, &p.MaxSeconds, &u); err != nil {
			return nil, fmt.Errorf("list session policies: %w", err)
		}
		p.UpdatedAt = time.UnixMilli(u).UTC()
		out[p.EnvironmentID] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list session policies: %w", err)
	}
	return out, nil
}
