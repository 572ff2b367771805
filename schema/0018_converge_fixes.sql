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

-- Which ingest key converge issued for which box's droplet (docs/operations.md,
-- "SSH key delivery"): recorded when the key is issued, before it travels, and
-- marked delivered once written. A successful delivery revokes every other
-- active key recorded for the same box's droplet: the droplet's files hold
-- only the newest, so a key delivered by a run whose result a crash lost
-- does not stay active.
CREATE TABLE ingest_key_deliveries (
    key_id       TEXT    PRIMARY KEY REFERENCES ingest_keys (key_id),
    box_id       TEXT    NOT NULL REFERENCES cloud_resource (id),
    droplet_id   INTEGER NOT NULL,
    issued_at    INTEGER NOT NULL,
    delivered_at INTEGER                                     -- NULL: issued, not (yet) written
) STRICT;

CREATE INDEX ingest_key_deliveries_droplet ON ingest_key_deliveries (box_id, droplet_id);

-- +goose Down
DROP TABLE ingest_key_deliveries;
ALTER TABLE retention_runs DROP COLUMN stack_states_pruned;
ALTER TABLE jobs DROP COLUMN include_data;
