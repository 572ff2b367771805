package storage

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RecordProducerEvent stores a producer's lifecycle event (one reported on
// POST /api/ingest/lifecycle) with the SHA-256 of its canonical body
// unless an event with ev.ID exists: with the same hash that is a retry
// (deduplicated true, nothing written), otherwise ErrConflict. A new event
// needs ev.DeploymentID to exist in the environment (ErrNotFound) and to
// hold fewer than maxEvents producer events (> 0; ErrEventQuota at the
// cap; 0 is unlimited). Every refusal writes nothing (docs/operations.md,
// "Lifecycle events and runs").
func RecordProducerEvent(ctx context.Context, q Querier, ev LifecycleEvent, hash [32]byte, maxEvents int) (deduplicated bool, err error) {
	var stored []byte
	err = q.QueryRowContext(ctx, `SELECT body_sha256 FROM lifecycle_events WHERE id = ?`, ev.ID).Scan(&stored)
	switch {
	case err == nil:
		if bytes.Equal(stored, hash[:]) {
			return true, nil
		}
		return false, ErrConflict
	case !errors.Is(err, sql.ErrNoRows):
		return false, fmt.Errorf("read lifecycle event: %w", err)
	}
	var n int
	if err := q.QueryRowContext(ctx, `SELECT producer_events FROM deployments WHERE environment_id = ? AND id = ?`,
		ev.EnvironmentID, ev.DeploymentID).Scan(&n); err != nil {
		return false, notFound(err)
	}
	if maxEvents > 0 && n >= maxEvents {
		return false, ErrEventQuota
	}
	if _, err := q.ExecContext(ctx,
		`INSERT INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, reason, message, occurred_at, body_sha256)
		 SELECT ?, org_id, id, ?, ?, ?, ?, ?, ? FROM environments WHERE id = ?`,
		ev.ID, ev.DeploymentID, ev.Kind, ev.Reason, ev.Message, ms(ev.OccurredAt), hash[:], ev.EnvironmentID); err != nil {
		return false, fmt.Errorf("insert lifecycle event: %w", err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE deployments SET producer_events = producer_events + 1 WHERE environment_id = ? AND id = ?`,
		ev.EnvironmentID, ev.DeploymentID); err != nil {
		return false, fmt.Errorf("count lifecycle event: %w", err)
	}
	return false, addEnvironmentStorage(ctx, q, ev.EnvironmentID, ProducerEventCharge(ev))
}

// Launch is what a `launched` lifecycle event says about its deployment.
type Launch struct {
	EnvironmentID int64
	DeploymentID  string
	DropletID     int64 // 0 when unknown
	Region, Size  string
	Managed       bool
	// At is when the event was received: the deployment's launch time when
	// the event creates it.
	At time.Time
	// LimitMinutes is the idle limit of a deployment the event creates: its
	// idle deadline is At plus this, so a droplet whose agent never
	// reports is still reaped.
	LimitMinutes int64
}

// ApplyLaunch applies a `launched` event: it creates the deployment if no
// heartbeat did (active, launched at l.At, the environment back to active
// if it had sunk), or fills in what the active deployment does not know
// yet (droplet id, region, size) and sets the managed flag. Errors:
// ErrDeploymentEnded (the deployment has ended), ErrDropletMismatch (it
// already has another droplet: a deployment's droplet never changes),
// ErrDeploymentQuota (a new deployment beyond maxActive > 0 active ones).
// Every refusal writes nothing. A deployment it creates in an environment
// with a session policy expires at launch + the maximum
// (docs/operations.md, "Session policies").
func ApplyLaunch(ctx context.Context, q Querier, l Launch, maxActive int) (created bool, err error) {
	res, err := q.ExecContext(ctx,
		`UPDATE deployments SET
		     droplet_id = coalesce(droplet_id, ?1),
		     region = CASE WHEN ?2 = '' THEN region ELSE ?2 END,
		     size = CASE WHEN ?3 = '' THEN size ELSE ?3 END,
		     managed = max(managed, ?4)
		 WHERE environment_id = ?5 AND id = ?6 AND status = 'active'
		   AND (?1 IS NULL OR droplet_id IS NULL OR droplet_id = ?1)`,
		nullInt(l.DropletID), l.Region, l.Size, boolInt(l.Managed), l.EnvironmentID, l.DeploymentID)
	if err != nil {
		return false, fmt.Errorf("apply launch: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("apply launch: %w", err)
	} else if n == 1 {
		return false, nil
	}
	st, err := DeploymentStatus(ctx, q, l.EnvironmentID, l.DeploymentID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return false, err
	case st == DeploymentEnded:
		return false, ErrDeploymentEnded
	default:
		return false, ErrDropletMismatch
	}
	if maxActive > 0 {
		active, err := CountActiveDeployments(ctx, q, l.EnvironmentID)
		if err != nil {
			return false, err
		}
		if active >= maxActive {
			return false, ErrDeploymentQuota
		}
	}
	if _, err := q.ExecContext(ctx,
		`INSERT INTO deployments (id, environment_id, droplet_id, region, size, status, launched_at,
		     last_activity_at, limit_minutes, idle_deadline_at, managed, session_expires_at)
		 VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, ?8, ?9, ?10, `+sessionCapSQL("?2", "?6")+`)`,
		l.DeploymentID, l.EnvironmentID, nullInt(l.DropletID), l.Region, l.Size, ms(l.At),
		ms(l.At), l.LimitMinutes, ms(idleDeadline(l.At, l.LimitMinutes)), boolInt(l.Managed)); err != nil {
		return false, fmt.Errorf("insert deployment: %w", err)
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE environments SET status = 'active', updated_at = ? WHERE id = ? AND status = 'sunk'`,
		ms(l.At), l.EnvironmentID); err != nil {
		return false, fmt.Errorf("reactivate environment: %w", err)
	}
	return true, nil
}

// DeploymentDroplet returns the deployment's status and droplet id (0 when
// unknown). Errors: ErrNotFound.
func DeploymentDroplet(ctx context.Context, q Querier, environmentID int64, id string) (status string, dropletID int64, err error) {
	var drop sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT status, droplet_id FROM deployments WHERE environment_id = ? AND id = ?`,
		environmentID, id).Scan(&status, &drop); err != nil {
		return "", 0, notFound(err)
	}
	return status, drop.Int64, nil
}

// LifecycleEventHash returns the body hash stored with the lifecycle event
// id (all zero for an event chalupa recorded itself). Errors: ErrNotFound.
func LifecycleEventHash(ctx context.Context, q Querier, id string) ([32]byte, error) {
	var h []byte
	var out [32]byte
	if err := q.QueryRowContext(ctx, `SELECT body_sha256 FROM lifecycle_events WHERE id = ?`, id).Scan(&h); err != nil {
		return out, notFound(err)
	}
	copy(out[:], h)
	return out, nil
}
