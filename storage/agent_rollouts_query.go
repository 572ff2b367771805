package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Agent rollouts and a box's agent upgrade state (docs/operations.md,
// "Agent install", under Upgrade; schema 0029).

// SetBoxAgentUpgrade sets the box's agent upgrade state (AgentUpgrading,
// AgentUpgradeFailed, or "" to clear it) with the release's version, at
// now. Errors: ErrNotFound; database faults.
func SetBoxAgentUpgrade(ctx context.Context, q Querier, boxID, state, version string, now time.Time) error {
	var st, ver, at any
	if state != "" {
		st, ver, at = state, version, ms(now)
	}
	res, err := q.ExecContext(ctx,
		`UPDATE cloud_resource SET agent_upgrade_state = ?, agent_upgrade_version = ?, agent_upgrade_at = ? WHERE id = ?`,
		st, ver, at, boxID)
	if err != nil {
		return fmt.Errorf("set box agent upgrade: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("set box agent upgrade: %w", err)
	} else if n == 0 {
		return ErrNotFound
	}
	return nil
}

// AgentReport is what a deployment's last stored heartbeat says of its
// agent.
type AgentReport struct {
	// Version is the heartbeat's agentVersion ("chalupa-agent/v1.2.3").
	Version string
	// At is the heartbeat's arrival (zero: none yet).
	At time.Time
}

// DeploymentAgentReport returns the agent version and arrival of the last
// heartbeat stored for the deployment. Errors: ErrNotFound when the
// deployment does not exist; database faults.
func DeploymentAgentReport(ctx context.Context, q Querier, environmentID int64, deploymentID string) (AgentReport, error) {
	var r AgentReport
	var at sql.NullInt64
	err := q.QueryRowContext(ctx,
		`SELECT agent_version, last_heartbeat_at FROM deployments WHERE environment_id = ? AND id = ?`,
		environmentID, deploymentID).Scan(&r.Version, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("deployment agent report: %w", err)
	}
	r.At = fromMS(at)
	return r, nil
}

// ClearReaperHold ends the deployment's reaper hold when it is still the
// hold of reason (a later hold of another reason stays). Errors: database
// faults.
func ClearReaperHold(ctx context.Context, q Querier, environmentID int64, deploymentID, reason string) error {
	if _, err := q.ExecContext(ctx,
		`UPDATE deployments SET reaper_hold_until = NULL
		 WHERE environment_id = ? AND id = ? AND reaper_hold_reason = ? AND reaper_hold_until IS NOT NULL`,
		environmentID, deploymentID, reason); err != nil {
		return fmt.Errorf("clear reaper hold: %w", err)
	}
	return nil
}

// Agent rollout statuses.
const (
	RolloutRunning   = "running"
	RolloutSucceeded = "succeeded"
	RolloutFailed    = "failed"
)

// AgentRollout is an agent_rollouts row.
type AgentRollout struct {
	// ID is the rollout's ULID.
	ID string
	// Environment is the slug it covers ("" for every environment).
	Environment string
	// Version is the release it installs; Batch the boxes per batch after
	// the first box.
	Version string
	Batch   int
	// Status is RolloutRunning, RolloutSucceeded or RolloutFailed.
	Status string
	// Summary is its JSON account, as the rollout writes it.
	Summary []byte
	// Error says why a failed rollout stopped ("" otherwise).
	Error string
	// InstanceID is the serving process running it.
	InstanceID string
	// CreatedAt, FinishedAt (zero while running) and UpdatedAt stamp it.
	CreatedAt, FinishedAt, UpdatedAt time.Time
}

const rolloutCols = `id, environment, version, batch, status, summary, error, instance_id, created_at, finished_at, updated_at`

func scanRollout(row interface{ Scan(...any) error }) (AgentRollout, error) {
	var r AgentRollout
	var summary string
	var created, finished, updated sql.NullInt64
	if err := row.Scan(&r.ID, &r.Environment, &r.Version, &r.Batch, &r.Status, &summary, &r.Error, &r.InstanceID,
		&created, &finished, &updated); err != nil {
		return r, err
	}
	r.Summary = []byte(summary)
	r.CreatedAt, r.FinishedAt, r.UpdatedAt = fromMS(created), fromMS(finished), fromMS(updated)
	return r, nil
}

// InsertAgentRollout inserts r as running. Errors: ErrConflict when a
// rollout is already running (one at a time); database faults.
func InsertAgentRollout(ctx context.Context, q Querier, r AgentRollout) error {
	_, err := q.ExecContext(ctx,
		`INSERT INTO agent_rollouts (id, environment, version, batch, status, summary, error, instance_id, created_at, updated_at)
		 VALUES (?, ?, ?, ?, 'running', ?, '', ?, ?, ?)`,
		r.ID, r.Environment, r.Version, r.Batch, string(r.Summary), r.InstanceID, ms(r.CreatedAt), ms(r.CreatedAt))
	if isUniqueViolation(err) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("insert agent rollout: %w", err)
	}
	return nil
}

// UpdateAgentRollout stores a running rollout's summary and, when status
// is not RolloutRunning, finishes it with status and errText at now.
// Errors: database faults.
func UpdateAgentRollout(ctx context.Context, q Querier, id, status string, summary []byte, errText string, now time.Time) error {
	var finished any
	if status != RolloutRunning {
		finished = ms(now)
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE agent_rollouts SET status = ?, summary = ?, error = ?, finished_at = ?, updated_at = ? WHERE id = ? AND status = 'running'`,
		status, string(summary), errText, finished, ms(now), id); err != nil {
		return fmt.Errorf("update agent rollout: %w", err)
	}
	return nil
}

// AgentRolloutByID returns the rollout. Errors: ErrNotFound.
func AgentRolloutByID(ctx context.Context, q Querier, id string) (AgentRollout, error) {
	r, err := scanRollout(q.QueryRowContext(ctx, `SELECT `+rolloutCols+` FROM agent_rollouts WHERE id = ?`, id))
	if err != nil {
		return AgentRollout{}, notFound(err)
	}
	return r, nil
}

// ListAgentRollouts returns at most limit rollouts, the newest first.
func ListAgentRollouts(ctx context.Context, q Querier, limit int) ([]AgentRollout, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+rolloutCols+` FROM agent_rollouts ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list agent rollouts: %w", err)
	}
	defer rows.Close()
	out := []AgentRollout{}
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, fmt.Errorf("list agent rollouts: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// FailInterruptedRollouts marks failed, with errText, every running
// rollout of another instance than instanceID (its process is gone) and
// returns their ids. Errors: database faults.
func FailInterruptedRollouts(ctx context.Context, q Querier, instanceID, errText string, now time.Time) ([]string, error) {
	rows, err := q.QueryContext(ctx,
		`UPDATE agent_rollouts SET status = 'failed', error = ?, finished_at = ?, updated_at = ?
		 WHERE status = 'running' AND instance_id != ? RETURNING id`, errText, ms(now), ms(now), instanceID)
	if err != nil {
		return nil, fmt.Errorf("fail interrupted rollouts: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("fail interrupted rollouts: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// BoxesUpgrading returns the boxes left in AgentUpgrading (by a process
// that stopped mid-upgrade, when read at start).
func BoxesUpgrading(ctx context.Context, q Querier) ([]Box, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+boxCols+` WHERE r.agent_upgrade_state = 'upgrading' ORDER BY e.slug, r.name`)
	if err != nil {
		return nil, fmt.Errorf("boxes upgrading: %w", err)
	}
	defer rows.Close()
	out := []Box{}
	for rows.Next() {
		b, err := scanBox(rows)
		if err != nil {
			return nil, fmt.Errorf("boxes upgrading: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}
