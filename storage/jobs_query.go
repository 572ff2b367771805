package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Job statuses (docs/operations.md, "Jobs").
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
	JobCancelled = "cancelled"
)

// ErrScopeBusy is returned (wrapped in a *ScopeBusyError) when a scope
// already has a queued or running job.
var ErrScopeBusy = errors.New("another job for this scope is queued or running")

// ScopeBusyError names the live job that holds a scope.
type ScopeBusyError struct {
	// JobID is the queued or running job.
	JobID string
}

// Error implements error.
func (e *ScopeBusyError) Error() string { return ErrScopeBusy.Error() + ": " + e.JobID }

// Is makes errors.Is(err, ErrScopeBusy) hold.
func (e *ScopeBusyError) Is(target error) bool { return target == ErrScopeBusy }

// Job is one row of jobs: a converge action on one scope, with its lease.
type Job struct {
	// ID is the job's ULID.
	ID string
	// ScopeKind is "box"; ScopeID the box's id.
	ScopeKind, ScopeID string
	// Action is preview, up, refresh or destroy.
	Action string
	// IncludeData, on a destroy only, extends it to the box's data stack
	// (its volume): the admin API checked the typed phrase before
	// enqueueing, and a requeued or recovered job keeps it
	// (docs/operations.md, "Converge").
	IncludeData bool
	// Status is one of the Job* constants.
	Status string
	// LockedBy is the instance id of the process running it ("" unless
	// running); LockedAt is when it was claimed (the lease start; progress
	// does not move it).
	LockedBy string
	LockedAt time.Time
	// Attempts counts claims.
	Attempts int
	// Progress is the latest progress report (JSON, nil when none);
	// ProgressSeq counts reports.
	Progress    json.RawMessage
	ProgressSeq int64
	// Result is the outcome of a successful run (JSON, nil otherwise).
	Result json.RawMessage
	// Error is why the job failed, or why its last attempt ended.
	Error string
	// CreatedAt, QueuedAt (enqueued or last requeued), StartedAt (last
	// claimed), FinishedAt and UpdatedAt are the row's stamps.
	CreatedAt, QueuedAt, StartedAt, FinishedAt, UpdatedAt time.Time
}

// Live reports whether the job is queued or running.
func (j Job) Live() bool { return j.Status == JobQueued || j.Status == JobRunning }

const jobCols = `id, scope_kind, scope_id, action, status, coalesce(locked_by, ''), locked_at, attempts,
	progress, progress_seq, result, error, created_at, queued_at, started_at, finished_at, updated_at, include_data`

func scanJob(row interface{ Scan(...any) error }) (Job, error) {
	var j Job
	var lockedAt, created, queued, started, finished, updated sql.NullInt64
	var progress, result sql.NullString
	if err := row.Scan(&j.ID, &j.ScopeKind, &j.ScopeID, &j.Action, &j.Status, &j.LockedBy, &lockedAt, &j.Attempts,
		&progress, &j.ProgressSeq, &result, &j.Error, &created, &queued, &started, &finished, &updated, &j.IncludeData); err != nil {
		return Job{}, err
	}
	if progress.Valid {
		j.Progress = json.RawMessage(progress.String)
	}
	if result.Valid {
		j.Result = json.RawMessage(result.String)
	}
	j.LockedAt, j.CreatedAt, j.QueuedAt = fromMS(lockedAt), fromMS(created), fromMS(queued)
	j.StartedAt, j.FinishedAt, j.UpdatedAt = fromMS(started), fromMS(finished), fromMS(updated)
	return j, nil
}

func scanJobs(rows *sql.Rows, err error, what string) ([]Job, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	out := []Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// EnqueueJob inserts a queued job for the scope; includeData is stored as
// the job's IncludeData (the caller has checked it belongs to a confirmed
// destroy). Call it inside a writer unit: the busy check and the insert are
// then one transaction. Errors: a *ScopeBusyError (errors.Is ErrScopeBusy)
// naming the scope's live job.
func EnqueueJob(ctx context.Context, q Querier, id, scopeKind, scopeID, action string, includeData bool, now time.Time) (Job, error) {
	if live, err := LiveJob(ctx, q, scopeKind, scopeID); err == nil {
		return Job{}, &ScopeBusyError{JobID: live.ID}
	} else if !errors.Is(err, ErrNotFound) {
		return Job{}, err
	}
	j, err := scanJob(q.QueryRowContext(ctx,
		`INSERT INTO jobs (id, scope_kind, scope_id, action, include_data, status, created_at, queued_at, updated_at)
		 VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?) RETURNING `+jobCols,
		id, scopeKind, scopeID, action, includeData, ms(now), ms(now), ms(now)))
	if isUniqueViolation(err) {
		return Job{}, ErrConflict
	}
	if err != nil {
		return Job{}, fmt.Errorf("enqueue job: %w", err)
	}
	return j, nil
}

// LiveJob returns the scope's queued or running job. Errors: ErrNotFound.
func LiveJob(ctx context.Context, q Querier, scopeKind, scopeID string) (Job, error) {
	j, err := scanJob(q.QueryRowContext(ctx,
		`SELECT `+jobCols+` FROM jobs WHERE scope_kind = ? AND scope_id = ? AND status IN ('queued', 'running')`,
		scopeKind, scopeID))
	if err != nil {
		return Job{}, notFound(err)
	}
	return j, nil
}

// JobByID returns the job with id. Errors: ErrNotFound.
func JobByID(ctx context.Context, q Querier, id string) (Job, error) {
	j, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = ?`, id))
	if err != nil {
		return Job{}, notFound(err)
	}
	return j, nil
}

// JobFilter selects jobs; empty fields select all.
type JobFilter struct {
	// Status keeps one status.
	Status string
	// ScopeID keeps one scope's jobs.
	ScopeID string
	// Limit is the most rows returned (required, > 0).
	Limit int
}

// ListJobs returns the jobs f selects, newest first.
func ListJobs(ctx context.Context, q Querier, f JobFilter) ([]Job, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+jobCols+` FROM jobs WHERE (?1 = '' OR status = ?1) AND (?2 = '' OR scope_id = ?2)
		 ORDER BY created_at DESC, id DESC LIMIT ?3`, f.Status, f.ScopeID, f.Limit)
	return scanJobs(rows, err, "list jobs")
}

// RunningJobs returns every running job, oldest claim first.
func RunningJobs(ctx context.Context, q Querier) ([]Job, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE status = 'running' ORDER BY locked_at, id`)
	return scanJobs(rows, err, "running jobs")
}

// ClaimNextJob takes the oldest queued job: running, locked by worker at
// now, attempts plus one. Errors: ErrNotFound when none is queued.
func ClaimNextJob(ctx context.Context, q Querier, worker string, now time.Time) (Job, error) {
	j, err := scanJob(q.QueryRowContext(ctx,
		`UPDATE jobs SET status = 'running', locked_by = ?1, locked_at = ?2, started_at = ?2, updated_at = ?2,
		   attempts = attempts + 1
		 WHERE id = (SELECT id FROM jobs WHERE status = 'queued' ORDER BY queued_at, id LIMIT 1)
		 RETURNING `+jobCols, worker, ms(now)))
	if err != nil {
		return Job{}, notFound(err)
	}
	if err := appendJobStep(ctx, q, j.ID, JobStepClaimed, worker, "", now); err != nil {
		return Job{}, err
	}
	return j, nil
}

// SetJobProgress stores the running job's latest progress report and
// journals it (JobSteps; so do ClaimNextJob, FinishJob and ReleaseJob). It does
// not renew the lease (locked_at stays). Errors: ErrNotFound when the job
// is no longer running under worker's lock.
func SetJobProgress(ctx context.Context, q Querier, id, worker string, progress json.RawMessage, now time.Time) error {
	res, err := q.ExecContext(ctx,
		`UPDATE jobs SET progress = ?, progress_seq = progress_seq + 1, updated_at = ?
		 WHERE id = ? AND status = 'running' AND locked_by = ?`, string(progress), ms(now), id, worker)
	if err := oneRow(res, err, "job progress"); err != nil {
		return err
	}
	return appendJobStep(ctx, q, id, JobStepProgress, worker, string(progress), now)
}

// FinishJob ends worker's running job as succeeded (with result) or failed
// (with errMsg). Errors: ErrNotFound when the job is no longer running
// under worker's lock (nothing is written).
func FinishJob(ctx context.Context, q Querier, id, worker, status string, result json.RawMessage, errMsg string, now time.Time) error {
	return FinishJobDetail(ctx, q, id, worker, status, result, errMsg, errMsg, now)
}

// FinishJobDetail is FinishJob whose finish step records detail (a failed
// run's whole output) instead of errMsg (the diagnostic the job keeps).
// Errors: FinishJob's.
func FinishJobDetail(ctx context.Context, q Querier, id, worker, status string, result json.RawMessage, errMsg, detail string, now time.Time) error {
	if status != JobSucceeded && status != JobFailed {
		return fmt.Errorf("finish job: status %q", status)
	}
	var res any
	if result != nil {
		res = string(result)
	}
	r, err := q.ExecContext(ctx,
		`UPDATE jobs SET status = ?, result = ?, error = ?, locked_by = NULL, finished_at = ?, updated_at = ?
		 WHERE id = ? AND status = 'running' AND locked_by = ?`,
		status, res, errMsg, ms(now), ms(now), id, worker)
	if err := oneRow(r, err, "finish job"); err != nil {
		return err
	}
	return appendJobStep(ctx, q, id, JobStepFinished, worker, detail, now)
}

// WorkerLost is the error of a job failed by the attempt rule.
const WorkerLost = "worker lost"

// ReleaseJob applies the attempt rule to a running job locked by lockedBy
// whose run ended without an outcome (lease deadline, or a dead process):
// back to queued with reason as its error when attempts < maxAttempts,
// else failed with WorkerLost (docs/operations.md, "Jobs"). It returns the
// new status. Errors: ErrNotFound when the job is not running under that
// lock.
func ReleaseJob(ctx context.Context, q Querier, id, lockedBy string, maxAttempts int, reason string, now time.Time) (string, error) {
	var status string
	err := q.QueryRowContext(ctx,
		`UPDATE jobs SET
		   status = CASE WHEN attempts < ?1 THEN 'queued' ELSE 'failed' END,
		   error = CASE WHEN attempts < ?1 THEN ?2 ELSE ?3 END,
		   queued_at = CASE WHEN attempts < ?1 THEN ?4 ELSE queued_at END,
		   finished_at = CASE WHEN attempts < ?1 THEN NULL ELSE ?4 END,
		   locked_by = NULL, locked_at = NULL, updated_at = ?4
		 WHERE id = ?5 AND status = 'running' AND locked_by = ?6 RETURNING status`,
		maxAttempts, reason, WorkerLost, ms(now), id, lockedBy).Scan(&status)
	if err != nil {
		return "", notFound(err)
	}
	if err := appendJobStep(ctx, q, id, JobStepReleased, lockedBy, reason, now); err != nil {
		return "", err
	}
	return status, nil
}

// QueueState is what the offline watch needs to know about queued work.
type QueueState struct {
	// Queued counts queued jobs; Running counts running ones.
	Queued, Running int
	// OldestQueuedAt is the oldest queued job's queued_at (zero: none);
	// OldestScopeID is its scope.
	OldestQueuedAt time.Time
	OldestScopeID  string
	// LastWorkerSeen is the latest last_seen_at of any worker (zero: none).
	LastWorkerSeen time.Time
}

// ReadQueueState returns the queue's counts, its oldest queued job and the
// latest worker sighting.
func ReadQueueState(ctx context.Context, q Querier) (QueueState, error) {
	var s QueueState
	var oldest, seen sql.NullInt64
	var scope sql.NullString
	err := q.QueryRowContext(ctx,
		`SELECT (SELECT count(*) FROM jobs WHERE status = 'queued'),
		        (SELECT count(*) FROM jobs WHERE status = 'running'),
		        (SELECT queued_at FROM jobs WHERE status = 'queued' ORDER BY queued_at, id LIMIT 1),
		        (SELECT scope_id FROM jobs WHERE status = 'queued' ORDER BY queued_at, id LIMIT 1),
		        (SELECT max(last_seen_at) FROM workers)`).Scan(&s.Queued, &s.Running, &oldest, &scope, &seen)
	if err != nil {
		return QueueState{}, fmt.Errorf("queue state: %w", err)
	}
	s.OldestQueuedAt, s.OldestScopeID, s.LastWorkerSeen = fromMS(oldest), scope.String, fromMS(seen)
	return s, nil
}

// Worker is one row of workers: a job runner's reported state.
type Worker struct {
	// WorkerID is the process instance id; Version the build's version.
	WorkerID, Version string
	// LastSeenAt is its latest sighting.
	LastSeenAt time.Time
	// CurrentJobID is the job it reports running ("" when idle): reported
	// status, not ownership.
	CurrentJobID string
}

// TouchWorker records a sighting of the worker (insert or update).
func TouchWorker(ctx context.Context, q Querier, w Worker) error {
	var cur any
	if w.CurrentJobID != "" {
		cur = w.CurrentJobID
	}
	_, err := q.ExecContext(ctx,
		`INSERT INTO workers (worker_id, version, last_seen_at, current_job_id) VALUES (?, ?, ?, ?)
		 ON CONFLICT (worker_id) DO UPDATE SET version = excluded.version, last_seen_at = excluded.last_seen_at,
		   current_job_id = excluded.current_job_id`,
		w.WorkerID, w.Version, ms(w.LastSeenAt), cur)
	if err != nil {
		return fmt.Errorf("touch worker: %w", err)
	}
	return nil
}

// ListWorkers returns the workers, latest sighting first.
func ListWorkers(ctx context.Context, q Querier) ([]Worker, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT worker_id, version, last_seen_at, coalesce(current_job_id, '') FROM workers ORDER BY last_seen_at DESC, worker_id`)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	defer rows.Close()
	out := []Worker{}
	for rows.Next() {
		var w Worker
		var seen int64
		if err := rows.Scan(&w.WorkerID, &w.Version, &seen, &w.CurrentJobID); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		w.LastSeenAt = time.UnixMilli(seen).UTC()
		out = append(out, w)
	}
	return out, rows.Err()
}
