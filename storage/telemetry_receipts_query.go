package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// TelemetryReceipt is the immutable retry identity of one accepted window:
// its identity and the SHA-256 of its canonical encoding
// (docs/operations.md, "Telemetry"). Receipts outlive the detail row.
type TelemetryReceipt struct {
	EnvironmentID int64
	DeploymentID  string
	SessionID     string
	WindowStart   time.Time
	BodyHash      [32]byte
	ReceivedAt    time.Time
}

// TelemetryReceiptHash returns the body hash of the receipt for the window
// identity. Errors: ErrNotFound when no window of that identity was ever
// accepted (or its environment's telemetry was erased).
func TelemetryReceiptHash(ctx context.Context, q Querier, environmentID int64, deploymentID, sessionID string, windowStart time.Time) ([32]byte, error) {
	var h []byte
	err := q.QueryRowContext(ctx,
		`SELECT body_hash FROM telemetry_receipts
		 WHERE environment_id = ? AND deployment_id = ? AND session_id = ? AND window_start = ?`,
		environmentID, deploymentID, sessionID, ms(windowStart)).Scan(&h)
	var out [32]byte
	if err != nil {
		return out, notFound(err)
	}
	if len(h) != len(out) {
		return out, fmt.Errorf("telemetry receipt: stored hash is %d bytes", len(h))
	}
	copy(out[:], h)
	return out, nil
}

// InsertTelemetryReceipt stores a receipt and counts it on its deployment
// (deployments.telemetry_receipts, which the per-deployment cap reads).
// Errors: ErrConflict when the identity already has a receipt.
func InsertTelemetryReceipt(ctx context.Context, q Querier, r TelemetryReceipt) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO telemetry_receipts (environment_id, deployment_id, session_id, window_start, body_hash, received_at)
		 VALUES (?, ?, ?, ?, ?, ?)`,
		r.EnvironmentID, r.DeploymentID, r.SessionID, ms(r.WindowStart), r.BodyHash[:], ms(r.ReceivedAt)); err != nil {
		if isUniqueViolation(err) {
			return ErrConflict
		}
		return fmt.Errorf("insert telemetry receipt: %w", err)
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE deployments SET telemetry_receipts = telemetry_receipts + 1 WHERE environment_id = ? AND id = ?`,
		r.EnvironmentID, r.DeploymentID); err != nil {
		return fmt.Errorf("count telemetry receipt: %w", err)
	}
	return addEnvironmentStorage(ctx, q, r.EnvironmentID, receiptCharge(r.DeploymentID, r.SessionID))
}

// DeploymentTelemetryState is what window admission reads of a deployment.
type DeploymentTelemetryState struct {
	Status string
	// EndedAt is zero while the deployment is active.
	EndedAt time.Time
	// Receipts is how many telemetry receipts the deployment holds.
	Receipts int64
}

// DeploymentTelemetry returns the deployment's status, end time and receipt
// count. Errors: ErrNotFound when the environment has no such deployment.
func DeploymentTelemetry(ctx context.Context, q Querier, environmentID int64, deploymentID string) (DeploymentTelemetryState, error) {
	var s DeploymentTelemetryState
	var ended sql.NullInt64
	if err := q.QueryRowContext(ctx,
		`SELECT status, ended_at, telemetry_receipts FROM deployments WHERE environment_id = ? AND id = ?`,
		environmentID, deploymentID).Scan(&s.Status, &ended, &s.Receipts); err != nil {
		return s, notFound(err)
	}
	s.EndedAt = fromMS(ended)
	return s, nil
}
