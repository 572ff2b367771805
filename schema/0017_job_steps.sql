-- +goose Up
-- The job step journal (docs/operations.md, "Jobs"): what happened to a
-- job, in order, so `chalupa admin job doctor` can show a stuck job's
-- history and not only its latest report. One row per step: kind is
-- claimed, progress, released (the attempt rule requeued or failed it) or
-- finished; status and attempt are the job's after the step; worker the
-- instance id that held it; detail the progress report (JSON) of a
-- progress step, the reason of a release, the error of a failed finish.
-- seq counts a job's steps from 1; at most storage.MaxJobSteps rows are
-- kept per job (the oldest are deleted as new ones arrive).
CREATE TABLE job_steps (
    job_id  TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    kind    TEXT    NOT NULL CHECK (kind IN ('claimed', 'progress', 'released', 'finished')),
    status  TEXT    NOT NULL,
    attempt INTEGER NOT NULL,
    worker  TEXT    NOT NULL,
    detail  TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, seq)
) STRICT, WITHOUT ROWID;

-- +goose Down
DROP TABLE job_steps;
