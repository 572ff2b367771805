-- +goose Up
-- Loop switches (docs/operations.md, "Loop switches"): a background loop the
-- operator paused (serve --pause-loops, adminPauseLoop) stays paused across
-- restarts until it is resumed. One row per loop ever switched; paused is 0
-- or 1; changed_at is when it was last switched (unix ms).
CREATE TABLE loop_switches (
    name       TEXT    PRIMARY KEY CHECK (name IN ('reaper', 'retention', 'costs', 'jobs')),
    paused     INTEGER NOT NULL CHECK (paused IN (0, 1)),
    changed_at INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE loop_switches;
