package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Log chunk states (log_chunks.state; docs/operations.md, "Logs").
const (
	LogChunkPlanned   = "planned"
	LogChunkCommitted = "committed"
)

// LogDeployment is what log admission reads of a deployment.
type LogDeployment struct {
	Status string
	// Chunks and Bytes are the chunks and bytes planned over the
	// deployment's life (the quota counters).
	Chunks, Bytes int64
	// Services is the environment's allowlist as stored (comma-separated
	// unit names); Valid false means the default list.
	Services sql.NullString
}

// LogDeploymentState returns the deployment's status, log counters and its
// environment's allowlist. Errors: ErrNotFound.
func LogDeploymentState(ctx context.Context, q Querier, environmentID int64, deploymentID string) (LogDeployment, error) {
	var d LogDeployment
	err := q.QueryRowContext(ctx, `SELECT d.status, d.log_chunks, d.log_bytes, e.log_services
		FROM deployments d JOIN environments e ON e.id = d.environment_id
		WHERE d.environment_id = ? AND d.id = ?`, environmentID, deploymentID).Scan(&d.Status, &d.Chunks, &d.Bytes, &d.Services)
	if err != nil {
		return d, notFound(err)
	}
	return d, nil
}

// SetEnvironmentLogServices stores an environment's allowlist (services
// joined by commas); "" restores the default list. Errors: ErrNotFound.
func SetEnvironmentLogServices(ctx context.Context, q Querier, environmentID int64, services string) error {
	var v any
	if services != "" {
		v = services
	}
	res, err := q.ExecContext(ctx, `UPDATE environments SET log_services = ? WHERE id = ?`, v, environmentID)
	if err != nil {
		return fmt.Errorf("set log services: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// LogSession is one log session (log_sessions).
type LogSession struct {
	// Row is the session's row id, the chunks' reference.
	Row           int64
	EnvironmentID int64
	DeploymentID  string
	SessionID     string
	Service       string
	OpenedAt      time.Time
	ExpiresAt     time.Time
	NextSeq       int64
	// FinishedAt is zero while the session is unfinished.
	FinishedAt time.Time
	// FinalPayload is the exact payload finish stored (nil until then).
	FinalPayload []byte
}

const logSessionColumns = `id, environment_id, deployment_id, session_id, service, opened_at, expires_at, next_seq, finished_at, final_payload`

func scanLogSession(sc interface{ Scan(...any) error }) (LogSession, error) {
	var s LogSession
	var opened, expires int64
	var finished sql.NullInt64
	if err := sc.Scan(&s.Row, &s.EnvironmentID, &s.DeploymentID, &s.SessionID, &s.Service, &opened, &expires, &s.NextSeq, &finished, &s.FinalPayload); err != nil {
		return s, err
	}
	s.OpenedAt = time.UnixMilli(opened).UTC()
	s.ExpiresAt = time.UnixMilli(expires).UTC()
	s.FinishedAt = fromMS(finished)
	return s, nil
}

// LogSessionByID returns one session by the agent's session id. Errors:
// ErrNotFound.
func LogSessionByID(ctx context.Context, q Querier, environmentID int64, deploymentID, sessionID string) (LogSession, error) {
	s, err := scanLogSession(q.QueryRowContext(ctx, `SELECT `+logSessionColumns+` FROM log_sessions
		WHERE environment_id = ? AND deployment_id = ? AND session_id = ?`, environmentID, deploymentID, sessionID))
	return s, notFound(err)
}

// OpenLogSessions counts the deployment's sessions neither finished nor
// expired at now, and returns the earliest expiry among them (zero when
// none is open): when a place frees by time alone.
func OpenLogSessions(ctx context.Context, q Querier, environmentID int64, deploymentID string, now time.Time) (int64, time.Time, error) {
	var n int64
	var first sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT count(*), min(expires_at) FROM log_sessions WHERE environment_id = ? AND deployment_id = ?
		AND finished_at IS NULL AND expires_at > ?`, environmentID, deploymentID, ms(now)).Scan(&n, &first); err != nil {
		return 0, time.Time{}, fmt.Errorf("count open log sessions: %w", err)
	}
	return n, fromMS(first), nil
}

// InsertLogSession stores a new session and returns its row id.
func InsertLogSession(ctx context.Context, q Querier, s LogSession) (int64, error) {
	res, err := q.ExecContext(ctx, `INSERT INTO log_sessions (environment_id, deployment_id, session_id, service, opened_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?)`, s.EnvironmentID, s.DeploymentID, s.SessionID, s.Service, ms(s.OpenedAt), ms(s.ExpiresAt))
	if err != nil {
		return 0, fmt.Errorf("insert log session: %w", err)
	}
	return res.LastInsertId()
}

// FinishLogSession marks a session finished with its exact final payload.
func FinishLogSession(ctx context.Context, q Querier, row int64, now time.Time, payload []byte) error {
	if _, err := q.ExecContext(ctx, `UPDATE log_sessions SET finished_at = ?, final_payload = ? WHERE id = ? AND finished_at IS NULL`,
		ms(now), payload, row); err != nil {
		return fmt.Errorf("finish log session: %w", err)
	}
	return nil
}

// LogSessionsOf returns a deployment's sessions, oldest first; service and
// sessionID ("" for any) narrow them.
func LogSessionsOf(ctx context.Context, q Querier, environmentID int64, deploymentID, service, sessionID string) ([]LogSession, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+logSessionColumns+` FROM log_sessions
		WHERE environment_id = ? AND deployment_id = ? AND (? = '' OR service = ?) AND (? = '' OR session_id = ?)
		ORDER BY opened_at, id`, environmentID, deploymentID, service, service, sessionID, sessionID)
	if err != nil {
		return nil, fmt.Errorf("read log sessions: %w", err)
	}
	defer rows.Close()
	var out []LogSession
	for rows.Next() {
		s, err := scanLogSession(rows)
		if err != nil {
			return nil, fmt.Errorf("read log sessions: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// LogChunk is one planned or committed chunk (log_chunks).
type LogChunk struct {
	SessionRow     int64
	Seq            int64
	ObjectKey      string
	Size           int64
	SHA256         []byte
	State          string
	PlannedAt      time.Time
	GrantExpiresAt time.Time
	// CommittedAt is zero while planned.
	CommittedAt time.Time
}

const logChunkColumns = `session_row, seq, object_key, size_bytes, sha256, state, planned_at, grant_expires_at, committed_at`

func scanLogChunk(sc interface{ Scan(...any) error }) (LogChunk, error) {
	var c LogChunk
	var planned, grant int64
	var committed sql.NullInt64
	if err := sc.Scan(&c.SessionRow, &c.Seq, &c.ObjectKey, &c.Size, &c.SHA256, &c.State, &planned, &grant, &committed); err != nil {
		return c, err
	}
	c.PlannedAt = time.UnixMilli(planned).UTC()
	c.GrantExpiresAt = time.UnixMilli(grant).UTC()
	c.CommittedAt = fromMS(committed)
	return c, nil
}

// LogChunkBySeq returns one chunk. Errors: ErrNotFound.
func LogChunkBySeq(ctx context.Context, q Querier, sessionRow, seq int64) (LogChunk, error) {
	c, err := scanLogChunk(q.QueryRowContext(ctx, `SELECT `+logChunkColumns+` FROM log_chunks WHERE session_row = ? AND seq = ?`, sessionRow, seq))
	return c, notFound(err)
}

// LogChunksOf returns a session's chunks in sequence order.
func LogChunksOf(ctx context.Context, q Querier, sessionRow int64) ([]LogChunk, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+logChunkColumns+` FROM log_chunks WHERE session_row = ? ORDER BY seq`, sessionRow)
	if err != nil {
		return nil, fmt.Errorf("read log chunks: %w", err)
	}
	defer rows.Close()
	var out []LogChunk
	for rows.Next() {
		c, err := scanLogChunk(rows)
		if err != nil {
			return nil, fmt.Errorf("read log chunks: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// PlanLogChunk persists a chunk's complete plan (state planned), advances
// its session's next sequence number past it and adds it to the
// deployment's quota counters, in the caller's unit.
func PlanLogChunk(ctx context.Context, q Querier, environmentID int64, deploymentID string, c LogChunk) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO log_chunks (session_row, seq, object_key, size_bytes, sha256, state, planned_at, grant_expires_at)
		VALUES (?, ?, ?, ?, ?, 'planned', ?, ?)`, c.SessionRow, c.Seq, c.ObjectKey, c.Size, c.SHA256, ms(c.PlannedAt), ms(c.GrantExpiresAt)); err != nil {
		return fmt.Errorf("plan log chunk: %w", err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE log_sessions SET next_seq = ? WHERE id = ?`, c.Seq+1, c.SessionRow); err != nil {
		return fmt.Errorf("plan log chunk: %w", err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE deployments SET log_chunks = log_chunks + 1, log_bytes = log_bytes + ?
		WHERE environment_id = ? AND id = ?`, c.Size, environmentID, deploymentID); err != nil {
		return fmt.Errorf("plan log chunk: %w", err)
	}
	return nil
}

// RenewLogChunkGrant records a renewed grant's expiry for a planned chunk.
func RenewLogChunkGrant(ctx context.Context, q Querier, sessionRow, seq int64, expires time.Time) error {
	if _, err := q.ExecContext(ctx, `UPDATE log_chunks SET grant_expires_at = ? WHERE session_row = ? AND seq = ? AND state = 'planned'`,
		ms(expires), sessionRow, seq); err != nil {
		return fmt.Errorf("renew log grant: %w", err)
	}
	return nil
}

// CommitLogChunk marks a planned chunk committed; it reports whether it
// changed anything (false: already committed, or gone).
func CommitLogChunk(ctx context.Context, q Querier, sessionRow, seq int64, now time.Time) (bool, error) {
	res, err := q.ExecContext(ctx, `UPDATE log_chunks SET state = 'committed', committed_at = ? WHERE session_row = ? AND seq = ? AND state = 'planned'`,
		ms(now), sessionRow, seq)
	if err != nil {
		return false, fmt.Errorf("commit log chunk: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// LogChunkRef names one chunk and its object.
type LogChunkRef struct {
	SessionRow int64
	Seq        int64
	ObjectKey  string
}

// LogChunksPlannedBefore returns up to limit chunks (any state) planned
// before t, oldest first: retention's work.
func LogChunksPlannedBefore(ctx context.Context, q Querier, t time.Time, limit int) ([]LogChunkRef, error) {
	return logChunkRefs(ctx, q, `SELECT session_row, seq, object_key FROM log_chunks WHERE planned_at < ? ORDER BY planned_at LIMIT ?`, ms(t), limit)
}

// LogChunksOfEnvironment returns up to limit chunks of an environment: an
// erase's work.
func LogChunksOfEnvironment(ctx context.Context, q Querier, environmentID int64, limit int) ([]LogChunkRef, error) {
	return logChunkRefs(ctx, q, `SELECT c.session_row, c.seq, c.object_key FROM log_chunks c JOIN log_sessions s ON s.id = c.session_row
		WHERE s.environment_id = ? ORDER BY c.session_row, c.seq LIMIT ?`, environmentID, limit)
}

func logChunkRefs(ctx context.Context, q Querier, query string, args ...any) ([]LogChunkRef, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read log chunks: %w", err)
	}
	defer rows.Close()
	var out []LogChunkRef
	for rows.Next() {
		var r LogChunkRef
		if err := rows.Scan(&r.SessionRow, &r.Seq, &r.ObjectKey); err != nil {
			return nil, fmt.Errorf("read log chunks: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteLogChunk removes one chunk's row; it reports whether one was
// removed. The object is the caller's to delete first.
func DeleteLogChunk(ctx context.Context, q Querier, r LogChunkRef) (bool, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM log_chunks WHERE session_row = ? AND seq = ? AND object_key = ?`, r.SessionRow, r.Seq, r.ObjectKey)
	if err != nil {
		return false, fmt.Errorf("delete log chunk: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// DeleteEmptyLogSessions removes up to limit sessions without chunks that
// expired or finished before t (environmentID 0: any environment), and
// returns how many it removed.
func DeleteEmptyLogSessions(ctx context.Context, q Querier, environmentID int64, t time.Time, limit int) (int64, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM log_sessions WHERE id IN (
		SELECT s.id FROM log_sessions s WHERE (? = 0 OR s.environment_id = ?)
		AND (s.expires_at < ? OR s.finished_at < ?)
		AND NOT EXISTS (SELECT 1 FROM log_chunks c WHERE c.session_row = s.id) LIMIT ?)`,
		environmentID, environmentID, ms(t), ms(t), limit)
	if err != nil {
		return 0, fmt.Errorf("delete log sessions: %w", err)
	}
	return res.RowsAffected()
}

// ResetLogCounters zeroes the quota counters of an environment's
// deployments (an erase).
func ResetLogCounters(ctx context.Context, q Querier, environmentID int64) error {
	if _, err := q.ExecContext(ctx, `UPDATE deployments SET log_chunks = 0, log_bytes = 0 WHERE environment_id = ? AND (log_chunks > 0 OR log_bytes > 0)`, environmentID); err != nil {
		return fmt.Errorf("reset log counters: %w", err)
	}
	return nil
}

// LogRowCounts counts an environment's log sessions and chunks.
func LogRowCounts(ctx context.Context, q Querier, environmentID int64) (sessions, chunks int64, err error) {
	if err = q.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM log_sessions WHERE environment_id = ?),
		(SELECT count(*) FROM log_chunks c JOIN log_sessions s ON s.id = c.session_row WHERE s.environment_id = ?)`,
		environmentID, environmentID).Scan(&sessions, &chunks); err != nil {
		return 0, 0, fmt.Errorf("count logs: %w", err)
	}
	return sessions, chunks, nil
}

// StartLogErasure begins an erasure of the environment's logs, or resumes
// the unfinished one (resumed true: its id and start are returned).
func StartLogErasure(ctx context.Context, q Querier, environmentID int64, id string, now time.Time) (string, time.Time, bool, error) {
	var prev string
	var started int64
	err := q.QueryRowContext(ctx, `SELECT id, started_at FROM log_erasures WHERE environment_id = ? AND finished_at IS NULL`, environmentID).Scan(&prev, &started)
	if err == nil {
		return prev, time.UnixMilli(started).UTC(), true, nil
	}
	if err = notFound(err); err != ErrNotFound {
		return "", time.Time{}, false, fmt.Errorf("start log erasure: %w", err)
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO log_erasures (id, environment_id, started_at) VALUES (?, ?, ?)`, id, environmentID, ms(now)); err != nil {
		return "", time.Time{}, false, fmt.Errorf("start log erasure: %w", err)
	}
	return id, now, false, nil
}

// CountLogErasure adds removed sessions and chunks to an erasure's record.
func CountLogErasure(ctx context.Context, q Querier, id string, sessions, chunks int64) error {
	if _, err := q.ExecContext(ctx, `UPDATE log_erasures SET sessions_removed = sessions_removed + ?, chunks_removed = chunks_removed + ?,
		objects_deleted = objects_deleted + ? WHERE id = ?`, sessions, chunks, chunks, id); err != nil {
		return fmt.Errorf("count log erasure: %w", err)
	}
	return nil
}

// LogErasure is a finished erasure's record.
type LogErasure struct {
	FinishedAt       time.Time
	Sessions, Chunks int64
}

// FinishLogErasure marks an erasure finished and returns its counts.
func FinishLogErasure(ctx context.Context, q Querier, id string, now time.Time) (LogErasure, error) {
	var e LogErasure
	if _, err := q.ExecContext(ctx, `UPDATE log_erasures SET finished_at = ? WHERE id = ?`, ms(now), id); err != nil {
		return e, fmt.Errorf("finish log erasure: %w", err)
	}
	var fin int64
	if err := q.QueryRowContext(ctx, `SELECT finished_at, sessions_removed, chunks_removed FROM log_erasures WHERE id = ?`, id).Scan(&fin, &e.Sessions, &e.Chunks); err != nil {
		return e, fmt.Errorf("finish log erasure: %w", err)
	}
	e.FinishedAt = time.UnixMilli(fin).UTC()
	return e, nil
}
