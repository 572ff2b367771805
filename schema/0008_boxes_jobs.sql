-- +goose Up
-- Converge intent and its job queue (docs/operations.md, "Boxes" and "Jobs").

-- The oracle: one row per declared machine (a box) of an environment. It is
-- the source of intent and is never wiped as recovery; the Pulumi state
-- cache is. Provider ids are recorded after each up/refresh (and by crash
-- recovery); the last successful launch result is kept even after the
-- droplet is gone.
CREATE TABLE cloud_resource (
    id                  TEXT    PRIMARY KEY,                 -- ULID
    kind                TEXT    NOT NULL CHECK (kind IN ('box')),
    name                TEXT    NOT NULL UNIQUE,             -- stacks are <name>-compute, <name>-data
    environment_id      INTEGER NOT NULL REFERENCES environments (id),
    managed             INTEGER NOT NULL DEFAULT 0 CHECK (managed IN (0, 1)),
    droplet_id          INTEGER,                             -- recorded provider ids (NULL: none known)
    firewall_id         TEXT,
    volume_id           TEXT,
    resources_at        INTEGER,                             -- when the ids were last recorded
    launch_droplet_id   INTEGER,                             -- last successful launch (NULL: never)
    launch_ipv4         TEXT,
    launch_ipv6         TEXT,
    launch_host_key     TEXT,
    launched_at         INTEGER,
    launch_job_id       TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) STRICT;

CREATE INDEX cloud_resource_environment ON cloud_resource (environment_id, name);

-- A box's declared configuration. version increases on each update, so a
-- job records which intent it converged.
CREATE TABLE cloud_resource_config (
    resource_id          TEXT    PRIMARY KEY REFERENCES cloud_resource (id),
    version              INTEGER NOT NULL,
    region               TEXT    NOT NULL,
    size                 TEXT    NOT NULL,
    image                TEXT    NOT NULL,
    ssh_key_fingerprints TEXT    NOT NULL,                   -- JSON array of strings, at least one
    customer_source      TEXT    NOT NULL,                   -- IPv4 /32
    control_plane_source TEXT    NOT NULL,                   -- IPv4 /32
    volume_size_gib      INTEGER NOT NULL CHECK (volume_size_gib >= 0),
    tags                 TEXT    NOT NULL,                   -- JSON array of strings
    updated_at           INTEGER NOT NULL
) STRICT;

-- The converge job queue: one lane, one job per scope at a time, a lease
-- (locked_by = the serving process's instance id, locked_at) that progress
-- does not renew.
CREATE TABLE jobs (
    id           TEXT    PRIMARY KEY,                        -- ULID
    scope_kind   TEXT    NOT NULL CHECK (scope_kind IN ('box')),
    scope_id     TEXT    NOT NULL,
    action       TEXT    NOT NULL CHECK (action IN ('preview', 'up', 'refresh', 'destroy')),
    status       TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    locked_by    TEXT,
    locked_at    INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0,
    progress     TEXT,                                       -- JSON, the latest progress report
    progress_seq INTEGER NOT NULL DEFAULT 0,
    result       TEXT,                                       -- JSON, on success
    error        TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    queued_at    INTEGER NOT NULL,                           -- enqueued or last requeued
    started_at   INTEGER,                                    -- last claimed
    finished_at  INTEGER,
    updated_at   INTEGER NOT NULL
) STRICT;

-- At most one live (queued or running) job per scope.
CREATE UNIQUE INDEX jobs_live_scope ON jobs (scope_kind, scope_id) WHERE status IN ('queued', 'running');
CREATE INDEX jobs_status ON jobs (status, queued_at);
CREATE INDEX jobs_created ON jobs (created_at);

-- The job runners seen (this daemon's runner, one row per process
-- instance): current_job_id is reported status, not ownership (that is
-- jobs.locked_by).
CREATE TABLE workers (
    worker_id      TEXT    PRIMARY KEY,
    version        TEXT    NOT NULL,
    last_seen_at   INTEGER NOT NULL,
    current_job_id TEXT
) STRICT;

-- +goose Down
DROP TABLE workers;
DROP TABLE jobs;
DROP TABLE cloud_resource_config;
DROP TABLE cloud_resource;
