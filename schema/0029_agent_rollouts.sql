-- chalupa:migration expand
-- +goose Up
-- Agent rollouts that cannot take the fleet (docs/operations.md, "Agent
-- install", under Upgrade). A box's agent upgrade state: 'upgrading' from
-- the upgrade's start until its agent heartbeats with the new version (or
-- the restore settles it), 'upgrade-failed' when the upgrade failed and the
-- previous agent did not report again; NULL otherwise. The version is the
-- one being installed, the time when the state was set.
ALTER TABLE cloud_resource ADD COLUMN agent_upgrade_state TEXT
    CHECK (agent_upgrade_state IN ('upgrading', 'upgrade-failed'));
ALTER TABLE cloud_resource ADD COLUMN agent_upgrade_version TEXT;
ALTER TABLE cloud_resource ADD COLUMN agent_upgrade_at INTEGER;

-- A rollout of the agent release to boxes, run in the daemon (one box,
-- then batches, stopping at the first failure). summary is its JSON
-- account (each box upgraded, skipped, failed, or not tried, with why);
-- instance_id is the serving process that runs it: a running rollout of
-- another instance was cut by a restart and is marked failed at start.
CREATE TABLE agent_rollouts (
    id          TEXT    PRIMARY KEY,                        -- ULID
    environment TEXT    NOT NULL,                           -- slug, '' for every environment
    version     TEXT    NOT NULL,
    batch       INTEGER NOT NULL CHECK (batch >= 1),
    status      TEXT    NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    summary     TEXT    NOT NULL,                           -- JSON
    error       TEXT    NOT NULL DEFAULT '',
    instance_id TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER,
    updated_at  INTEGER NOT NULL
) STRICT;

-- One rollout runs at a time.
CREATE UNIQUE INDEX agent_rollouts_running ON agent_rollouts (status) WHERE status = 'running';
CREATE INDEX agent_rollouts_created ON agent_rollouts (created_at);

-- +goose Down
DROP TABLE agent_rollouts;
ALTER TABLE cloud_resource DROP COLUMN agent_upgrade_at;
ALTER TABLE cloud_resource DROP COLUMN agent_upgrade_version;
ALTER TABLE cloud_resource DROP COLUMN agent_upgrade_state;
