-- +goose Up
-- Converge follow-ups (docs/operations.md, "Jobs" and "Retention").

-- A destroy job that also destroys the box's data stack. The admin API
-- checks includeData and its typed phrase before enqueueing; the job keeps
-- the decision, so a requeued or recovered job runs what was confirmed,
-- never more.
ALTER TABLE jobs ADD COLUMN include_data INTEGER NOT NULL DEFAULT 0 CHECK (include_data IN (0, 1));

-- The hourly retention pass prunes stack_states (checkpoints): its report
-- counts the rows deleted.
ALTER TABLE retention_runs ADD COLUMN stack_states_pruned INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE retention_runs DROP COLUMN stack_states_pruned;
ALTER TABLE jobs DROP COLUMN include_data;
