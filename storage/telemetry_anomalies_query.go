package storage

import (
	"context"
	"fmt"
	"time"
)

// TelemetryAnomaly is one anomaly rule's record for one session
// (telemetry_anomalies; docs/operations.md, "Telemetry"): when it was first
// and last seen and at how many accepted windows it held.
type TelemetryAnomaly struct {
	EnvironmentID int64
	DeploymentID  string
	SessionID     string
	// Kind is the rule: "gpu-idle", "memory-pressure" or "disk-nearly-full".
	Kind string
	// FirstSeenAt is the start of the first qualifying run; LastSeenAt the
	// end of the latest window at which the rule held.
	FirstSeenAt, LastSeenAt time.Time
	// Windows counts the accepted windows at which the rule held.
	Windows int64
}

// RecordTelemetryAnomaly counts one window at which a rule held: it creates
// the session's row for the rule or widens its bounds and counts the
// window. One row per (session, rule) keeps anomalies bounded per session.
func RecordTelemetryAnomaly(ctx context.Context, q Querier, a TelemetryAnomaly) error {
	var windows int64
	if err := q.QueryRowContext(ctx,
		`INSERT INTO telemetry_anomalies (environment_id, deployment_id, session_id, kind, first_seen_at, last_seen_at, windows)
		 VALUES (?, ?, ?, ?, ?, ?, 1)
		 ON CONFLICT (environment_id, deployment_id, session_id, kind) DO UPDATE SET
		     first_seen_at = min(first_seen_at, excluded.first_seen_at),
		     last_seen_at = max(last_seen_at, excluded.last_seen_at),
		     windows = windows + 1
		 RETURNING windows`,
		a.EnvironmentID, a.DeploymentID, a.SessionID, a.Kind, ms(a.FirstSeenAt), ms(a.LastSeenAt)).Scan(&windows); err != nil {
		return fmt.Errorf("record telemetry anomaly: %w", err)
	}
	// One window is a row this call created (an update counts up).
	if windows == 1 {
		return addEnvironmentStorage(ctx, q, a.EnvironmentID, anomalyCharge(a.DeploymentID, a.SessionID, a.Kind))
	}
	return nil
}

// TelemetryAnomaliesOf returns the anomalies of one deployment's sessions,
// ordered by session then rule.
func TelemetryAnomaliesOf(ctx context.Context, q Querier, environmentID int64, deploymentID string) ([]TelemetryAnomaly, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT session_id, kind, first_seen_at, last_seen_at, windows FROM telemetry_anomalies
		 WHERE environment_id = ? AND deployment_id = ? ORDER BY session_id, kind`, environmentID, deploymentID)
	if err != nil {
		return nil, fmt.Errorf("read telemetry anomalies: %w", err)
	}
	defer rows.Close()
	var out []TelemetryAnomaly
	for rows.Next() {
		a := TelemetryAnomaly{EnvironmentID: environmentID, DeploymentID: deploymentID}
		var first, last int64
		if err := rows.Scan(&a.SessionID, &a.Kind, &first, &last, &a.Windows); err != nil {
			return nil, fmt.Errorf("read telemetry anomalies: %w", err)
		}
		a.FirstSeenAt, a.LastSeenAt = time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read telemetry anomalies: %w", err)
	}
	return out, nil
}
