-- +goose Up
-- A destroy job that also destroys the box's data stack (docs/operations.md,
-- "Converge"). The admin API checks includeData and its typed phrase before
-- enqueueing; the job keeps the decision, so a requeued or recovered job
-- runs what was confirmed, never more.
ALTER TABLE jobs ADD COLUMN include_data INTEGER NOT NULL DEFAULT 0 CHECK (include_data IN (0, 1));

-- +goose Down
ALTER TABLE jobs DROP COLUMN include_data;
