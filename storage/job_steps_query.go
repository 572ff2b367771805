package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Job step kinds (docs/operations.md, "Jobs").
const (
	// JobStepClaimed: a runner claimed the job (an attempt began).
	JobStepClaimed = "claimed"
	// JobStepProgress: the run reported progress; the detail is the report.
	JobStepProgress = "progress"
	// JobStepReleased: a run that ended without an outcome was requeued or
	// failed by the attempt rule; the detail is the reason.
	JobStepReleased = "released"
	// JobStepFinished: the run ended as succeeded or failed; the detail is
	// the error of a failed run.
	JobStepFinished = "finished"
)

// MaxJobSteps bounds the steps kept per job: the oldest are deleted as
// new ones arrive. A box's up reports a few dozen steps; three attempts of
// the largest fit, and with each report at most 16 KiB a job's journal
// stays under about 3 MiB (docs/operations.md, "Jobs").
const MaxJobSteps = 200

// JobStep is one entry of a job's step journal.
type JobStep struct {
	// Seq counts the job's steps from 1.
	Seq int64
	At  time.Time
	// Kind is a JobStep* constant.
	Kind string
	// Status and Attempt are the job's after the step; Worker the
	// instance id that held it.
	Status  string
	Attempt int
	Worker  string
	// Detail is the progress report (JSON) of a progress step, the reason
	// of a release, the error of a failed finish; "" otherwise.
	Detail string
}

// appendJobStep journals one step of job id from the job's row as it is
// now (call it after the update, in the same transaction) and deletes the
// job's steps beyond MaxJobSteps.
func appendJobStep(ctx context.Context, q Querier, id, kind, worker, detail string, now time.Time) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO job_steps (job_id, seq, at, kind, status, attempt, worker, detail)
		 SELECT id, coalesce((SELECT max(seq) FROM job_steps WHERE job_id = ?1), 0) + 1, ?2, ?3, status, attempts, ?4, ?5
		 FROM jobs WHERE id = ?1`, id, ms(now), kind, worker, detail); err != nil {
		return fmt.Errorf("journal job step: %w", err)
	}
	if _, err := q.ExecContext(ctx,
		`DELETE FROM job_steps WHERE job_id = ?1 AND seq <= (SELECT max(seq) FROM job_steps WHERE job_id = ?1) - ?2`,
		id, MaxJobSteps); err != nil {
		return fmt.Errorf("prune job steps: %w", err)
	}
	return nil
}

// JobSteps returns job id's journal, oldest first (at most MaxJobSteps;
// none for an unknown job).
func JobSteps(ctx context.Context, q Querier, id string) ([]JobStep, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT seq, at, kind, status, attempt, worker, detail FROM job_steps WHERE job_id = ? ORDER BY seq`, id)
	if err != nil {
		return nil, fmt.Errorf("job steps: %w", err)
	}
	defer rows.Close()
	out := []JobStep{}
	for rows.Next() {
		var s JobStep
		var at sql.NullInt64
		if err := rows.Scan(&s.Seq, &at, &s.Kind, &s.Status, &s.Attempt, &s.Worker, &s.Detail); err != nil {
			return nil, fmt.Errorf("job steps: %w", err)
		}
		s.At = fromMS(at)
		out = append(out, s)
	}
	return out, rows.Err()
}
