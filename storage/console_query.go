package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// SetConsolePassword stores the operator's password hash (an encoded
// argon2id string, never the password) and ends every console session, so
// a changed password signs everyone out (docs/operations.md, "Console").
// It reports how many sessions it ended.
func SetConsolePassword(ctx context.Context, q Querier, hash string, at time.Time) (sessionsEnded int64, err error) {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO console_password (id, password_hash, set_at) VALUES (1, ?, ?)
		 ON CONFLICT (id) DO UPDATE SET password_hash = excluded.password_hash, set_at = excluded.set_at`,
		hash, ms(at)); err != nil {
		return 0, fmt.Errorf("set console password: %w", err)
	}
	res, err := q.ExecContext(ctx, `DELETE FROM console_sessions`)
	if err != nil {
		return 0, fmt.Errorf("end console sessions: %w", err)
	}
	return res.RowsAffected()
}

// ConsolePasswordHash returns the stored password hash. Errors:
// ErrNotFound while no password was ever set (the console then refuses
// every login: there is no default password).
func ConsolePasswordHash(ctx context.Context, q Querier) (string, error) {
	var h string
	err := q.QueryRowContext(ctx, `SELECT password_hash FROM console_password WHERE id = 1`).Scan(&h)
	return h, notFound(err)
}

// ConsoleSession is one signed-in console session, found by the SHA-256
// of its cookie value.
type ConsoleSession struct {
	// IDHash is the SHA-256 of the cookie's opaque id.
	IDHash []byte
	// CSRFToken is the value every state-changing form must carry.
	CSRFToken string
	// CreatedAt bounds the session's absolute lifetime.
	CreatedAt time.Time
	// LastSeenAt bounds its idle lifetime.
	LastSeenAt time.Time
}

// InsertConsoleSession records a new session.
func InsertConsoleSession(ctx context.Context, q Querier, s ConsoleSession) error {
	_, err := q.ExecContext(ctx,
		`INSERT INTO console_sessions (id_hash, csrf_token, created_at, last_seen_at) VALUES (?, ?, ?, ?)`,
		s.IDHash, s.CSRFToken, ms(s.CreatedAt), ms(s.LastSeenAt))
	if err != nil {
		return fmt.Errorf("insert console session: %w", err)
	}
	return nil
}

// ConsoleSessionByHash returns the session whose id hashes to idHash.
// Errors: ErrNotFound.
func ConsoleSessionByHash(ctx context.Context, q Querier, idHash []byte) (ConsoleSession, error) {
	s := ConsoleSession{IDHash: idHash}
	var created, seen int64
	err := q.QueryRowContext(ctx,
		`SELECT csrf_token, created_at, last_seen_at FROM console_sessions WHERE id_hash = ?`, idHash).
		Scan(&s.CSRFToken, &created, &seen)
	if err != nil {
		return ConsoleSession{}, notFound(err)
	}
	s.CreatedAt, s.LastSeenAt = time.UnixMilli(created).UTC(), time.UnixMilli(seen).UTC()
	return s, nil
}

// TouchConsoleSession moves a session's last-seen time to at.
func TouchConsoleSession(ctx context.Context, q Querier, idHash []byte, at time.Time) error {
	if _, err := q.ExecContext(ctx, `UPDATE console_sessions SET last_seen_at = ? WHERE id_hash = ?`, ms(at), idHash); err != nil {
		return fmt.Errorf("touch console session: %w", err)
	}
	return nil
}

// DeleteConsoleSession ends one session (logout, or found expired).
func DeleteConsoleSession(ctx context.Context, q Querier, idHash []byte) error {
	if _, err := q.ExecContext(ctx, `DELETE FROM console_sessions WHERE id_hash = ?`, idHash); err != nil {
		return fmt.Errorf("delete console session: %w", err)
	}
	return nil
}

// PruneConsoleSessions deletes at most limit sessions created before
// createdBefore or last seen before seenBefore, and reports how many.
func PruneConsoleSessions(ctx context.Context, q Querier, createdBefore, seenBefore time.Time, limit int) (int64, error) {
	res, err := q.ExecContext(ctx,
		`DELETE FROM console_sessions WHERE id_hash IN (
		   SELECT id_hash FROM console_sessions WHERE created_at < ? OR last_seen_at < ? LIMIT ?)`,
		ms(createdBefore), ms(seenBefore), limit)
	if err != nil {
		return 0, fmt.Errorf("prune console sessions: %w", err)
	}
	return res.RowsAffected()
}

// InsertLoginFailure records one failed console login from source (a
// connection address) at at.
func InsertLoginFailure(ctx context.Context, q Querier, source string, at time.Time) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO console_login_failures (source, at) VALUES (?, ?)`, source, ms(at)); err != nil {
		return fmt.Errorf("insert login failure: %w", err)
	}
	return nil
}

// LoginFailureTimes returns the times of the failed logins at or after
// since, oldest first: from source, or from everyone when source is "".
// At most limit are returned (the oldest ones).
func LoginFailureTimes(ctx context.Context, q Querier, source string, since time.Time, limit int) ([]time.Time, error) {
	query := `SELECT at FROM console_login_failures WHERE at >= ? ORDER BY at LIMIT ?`
	args := []any{ms(since), limit}
	if source != "" {
		query = `SELECT at FROM console_login_failures WHERE source = ? AND at >= ? ORDER BY at LIMIT ?`
		args = []any{source, ms(since), limit}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("login failures: %w", err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			return nil, fmt.Errorf("login failures: %w", err)
		}
		out = append(out, time.UnixMilli(at).UTC())
	}
	return out, rows.Err()
}

// PruneLoginFailures deletes at most limit failures older than before.
func PruneLoginFailures(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	res, err := q.ExecContext(ctx,
		`DELETE FROM console_login_failures WHERE id IN (SELECT id FROM console_login_failures WHERE at < ? LIMIT ?)`,
		ms(before), limit)
	if err != nil {
		return 0, fmt.Errorf("prune login failures: %w", err)
	}
	return res.RowsAffected()
}

// IngestKeySummary is an ingest key as the console lists it: id and status
// only, never material.
type IngestKeySummary struct {
	KeyID     string
	Status    string
	CreatedAt time.Time
}

// IngestKeysOf lists an environment's keys, newest first, at most limit.
func IngestKeysOf(ctx context.Context, q Querier, environmentID int64, limit int) ([]IngestKeySummary, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT key_id, status, created_at FROM ingest_keys WHERE environment_id = ? ORDER BY created_at DESC, key_id LIMIT ?`,
		environmentID, limit)
	if err != nil {
		return nil, fmt.Errorf("list ingest keys: %w", err)
	}
	defer rows.Close()
	var out []IngestKeySummary
	for rows.Next() {
		var k IngestKeySummary
		var at int64
		if err := rows.Scan(&k.KeyID, &k.Status, &at); err != nil {
			return nil, fmt.Errorf("list ingest keys: %w", err)
		}
		k.CreatedAt = time.UnixMilli(at).UTC()
		out = append(out, k)
	}
	return out, rows.Err()
}

// DeploymentsOf returns one environment's deployments as Fleet lists
// them: every active one, then at most endedLimit ended ones, newest
// launched first.
func DeploymentsOf(ctx context.Context, q Querier, environmentID int64, endedLimit int) ([]Deployment, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT * FROM (
		   SELECT id, environment_id, droplet_id, region, size, status, launched_at, ended_at,
		          session_expires_at, idle_deadline_at, last_heartbeat_at, ci_active, agent_version
		   FROM deployments WHERE environment_id = ? AND status = 'active'
		   UNION ALL
		   SELECT * FROM (SELECT id, environment_id, droplet_id, region, size, status, launched_at, ended_at,
		          session_expires_at, idle_deadline_at, last_heartbeat_at, ci_active, agent_version
		   FROM deployments WHERE environment_id = ? AND status = 'ended' ORDER BY launched_at DESC LIMIT ?))
		 ORDER BY status = 'ended', launched_at DESC`, environmentID, environmentID, endedLimit)
	if err != nil {
		return nil, fmt.Errorf("list deployments: %w", err)
	}
	defer rows.Close()
	var out []Deployment
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
		out = append(out, d)
	}
	return out, rows.Err()
}
