package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Telemetry session end reasons (telemetry_sessions.end_reason).
const (
	SessionEndFinal           = "final"
	SessionEndDeploymentEnded = "deployment-ended"
)

// TelemetrySession is one Monitor session of one deployment
// (telemetry_sessions; docs/operations.md, "Telemetry").
type TelemetrySession struct {
	EnvironmentID int64
	DeploymentID  string
	ID            string
	CreatedAt     time.Time
	// FirstWindowAt and LastWindowAt bound the windowStarts accepted.
	FirstWindowAt, LastWindowAt time.Time
	// Windows counts accepted windows.
	Windows int64
	// DetailFrom is the oldest windowStart still held in detail; zero
	// when every window was folded (or none is stored).
	DetailFrom time.Time
	// EndedAt is zero while the session is open.
	EndedAt   time.Time
	EndReason string
	// Version increases with every accepted window.
	Version int64
	// Summary is the terminal summary's JSON, empty until finalized.
	Summary      string
	SummarizedAt time.Time
}

const sessionColumns = `environment_id, deployment_id, id, created_at, first_window_at, last_window_at, windows,
	detail_from, ended_at, end_reason, version, summary, summarized_at`

func scanSession(sc interface{ Scan(...any) error }) (TelemetrySession, error) {
	var s TelemetrySession
	var created, first, last int64
	var detail, ended, summarized sql.NullInt64
	var summary sql.NullString
	if err := sc.Scan(&s.EnvironmentID, &s.DeploymentID, &s.ID, &created, &first, &last, &s.Windows,
		&detail, &ended, &s.EndReason, &s.Version, &summary, &summarized); err != nil {
		return s, err
	}
	s.CreatedAt = time.UnixMilli(created).UTC()
	s.FirstWindowAt = time.UnixMilli(first).UTC()
	s.LastWindowAt = time.UnixMilli(last).UTC()
	s.DetailFrom = fromMS(detail)
	s.EndedAt = fromMS(ended)
	s.Summary = summary.String
	s.SummarizedAt = fromMS(summarized)
	return s, nil
}

// TelemetrySessionByID returns one session. Errors: ErrNotFound.
func TelemetrySessionByID(ctx context.Context, q Querier, environmentID int64, deploymentID, id string) (TelemetrySession, error) {
	s, err := scanSession(q.QueryRowContext(ctx,
		`SELECT `+sessionColumns+` FROM telemetry_sessions WHERE environment_id = ? AND deployment_id = ? AND id = ?`,
		environmentID, deploymentID, id))
	if err != nil {
		return s, notFound(err)
	}
	return s, nil
}

// TelemetrySessionsOf returns the sessions of one deployment, oldest first.
func TelemetrySessionsOf(ctx context.Context, q Querier, environmentID int64, deploymentID string) ([]TelemetrySession, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+sessionColumns+` FROM telemetry_sessions WHERE environment_id = ? AND deployment_id = ?
		 ORDER BY first_window_at, id`, environmentID, deploymentID)
	if err != nil {
		return nil, fmt.Errorf("read telemetry sessions: %w", err)
	}
	defer rows.Close()
	var out []TelemetrySession
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("read telemetry sessions: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read telemetry sessions: %w", err)
	}
	return out, nil
}

// OpenTelemetrySessions counts the deployment's sessions that have not
// ended (the per-deployment open-session quota reads it).
func OpenTelemetrySessions(ctx context.Context, q Querier, environmentID int64, deploymentID string) (int64, error) {
	var n int64
	if err := q.QueryRowContext(ctx,
		`SELECT count(*) FROM telemetry_sessions WHERE environment_id = ? AND deployment_id = ? AND ended_at IS NULL`,
		environmentID, deploymentID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count open telemetry sessions: %w", err)
	}
	return n, nil
}

// SessionCounts are a deployment's telemetry sessions as the open-session
// quota counts them (docs/operations.md, "Quotas").
type SessionCounts struct {
	// Open counts the sessions that have not ended.
	Open int64
	// Opened counts the sessions created at or after the given time,
	// ended or not.
	Opened int64
	// OldestOpened is the earliest creation among those (zero when none).
	OldestOpened time.Time
}

// CountTelemetrySessions counts the deployment's open sessions and those
// created at or after since, in one pass over the deployment's sessions
// (its primary-key range).
func CountTelemetrySessions(ctx context.Context, q Querier, environmentID int64, deploymentID string, since time.Time) (SessionCounts, error) {
	var c SessionCounts
	var oldest sql.NullInt64
	if err := q.QueryRowContext(ctx,
		`SELECT count(*) FILTER (WHERE ended_at IS NULL), count(*) FILTER (WHERE created_at >= ?3), min(created_at) FILTER (WHERE created_at >= ?3)
		 FROM telemetry_sessions WHERE environment_id = ?1 AND deployment_id = ?2`,
		environmentID, deploymentID, ms(since)).Scan(&c.Open, &c.Opened, &oldest); err != nil {
		return SessionCounts{}, fmt.Errorf("count telemetry sessions: %w", err)
	}
	c.OldestOpened = fromMS(oldest)
	return c, nil
}

// RecordSessionWindow applies one accepted window to its session: it
// creates the session on its first window; otherwise it counts the window,
// widens the window bounds and detail_from, increments version, and clears
// any terminal summary (a delayed window makes the summary stale; the
// finalizer recomputes it from the complete history). A final window ends
// an open session (ended_at = the window's end, reason "final"). It returns
// the session's new version.
func RecordSessionWindow(ctx context.Context, q Querier, environmentID int64, deploymentID, sessionID string, windowStart, windowEnd, now time.Time, final bool) (version int64, err error) {
	var endedAt, endReason any = nil, ""
	if final {
		endedAt, endReason = ms(windowEnd), SessionEndFinal
	}
	err = q.QueryRowContext(ctx,
		`INSERT INTO telemetry_sessions (environment_id, deployment_id, id, created_at, first_window_at, last_window_at,
		     windows, detail_from, ended_at, end_reason, version)
		 VALUES (?1, ?2, ?3, ?4, ?5, ?5, 1, ?5, ?6, ?7, 1)
		 ON CONFLICT (environment_id, deployment_id, id) DO UPDATE SET
		     first_window_at = min(first_window_at, excluded.first_window_at),
		     last_window_at = max(last_window_at, excluded.last_window_at),
		     windows = windows + 1,
		     detail_from = min(coalesce(detail_from, excluded.detail_from), excluded.detail_from),
		     ended_at = coalesce(ended_at, excluded.ended_at),
		     end_reason = CASE WHEN ended_at IS NULL THEN excluded.end_reason ELSE end_reason END,
		     version = version + 1,
		     summary = NULL,
		     summarized_at = NULL
		 RETURNING version`,
		environmentID, deploymentID, sessionID, ms(now), ms(windowStart), endedAt, endReason).Scan(&version)
	if err != nil {
		return 0, fmt.Errorf("record telemetry session: %w", err)
	}
	// Version 1 is a session this window created (an update increments
	// it): its row is charged once, summary included.
	if version == 1 {
		if err := addEnvironmentStorage(ctx, q, environmentID, sessionCharge(deploymentID, sessionID)); err != nil {
			return 0, err
		}
	}
	return version, nil
}

// EndDeployment ends an active deployment at the given time, and in the
// same statement group ends its open telemetry sessions (reason
// "deployment-ended"). Every path that ends a deployment (the reaper,
// lifecycle events, inventory reconciliation, converge) goes through it, so
// no session outlives its deployment (docs/operations.md, "Telemetry").
// ended is false, with nothing written, when the deployment was not active.
// Errors: ErrNotFound when the environment has no such deployment.
func EndDeployment(ctx context.Context, q Querier, environmentID int64, deploymentID string, at time.Time) (ended bool, err error) {
	res, err := q.ExecContext(ctx,
		`UPDATE deployments SET status = 'ended', ended_at = ? WHERE environment_id = ? AND id = ? AND status = 'active'`,
		ms(at), environmentID, deploymentID)
	if err != nil {
		return false, fmt.Errorf("end deployment: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("end deployment: %w", err)
	}
	if n == 0 {
		if _, err := DeploymentStatus(ctx, q, environmentID, deploymentID); err != nil {
			return false, err
		}
		return false, nil
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE telemetry_sessions SET ended_at = ?, end_reason = ?, version = version + 1
		 WHERE environment_id = ? AND deployment_id = ? AND ended_at IS NULL`,
		ms(at), SessionEndDeploymentEnded, environmentID, deploymentID); err != nil {
		return false, fmt.Errorf("end telemetry sessions: %w", err)
	}
	return true, nil
}

// EndTelemetrySession ends one open session at the given time with the
// given reason (SessionEndFinal or SessionEndDeploymentEnded); an ended
// session is left as it is.
func EndTelemetrySession(ctx context.Context, q Querier, environmentID int64, deploymentID, id string, at time.Time, reason string) error {
	if _, err := q.ExecContext(ctx,
		`UPDATE telemetry_sessions SET ended_at = ?, end_reason = ?, version = version + 1
		 WHERE environment_id = ? AND deployment_id = ? AND id = ? AND ended_at IS NULL`,
		ms(at), reason, environmentID, deploymentID, id); err != nil {
		return fmt.Errorf("end telemetry session: %w", err)
	}
	return nil
}
