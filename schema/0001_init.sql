-- +goose Up
-- The data model for the platform and signed ingest (DESIGN.md, "Data model").
-- Later issues add their own tables in new files.

-- Who owns environments: the operator's platform organization, or a customer.
CREATE TABLE organizations (
    id         INTEGER PRIMARY KEY,
    slug       TEXT    NOT NULL UNIQUE,
    name       TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('platform', 'customer')),
    created_at INTEGER NOT NULL
) STRICT;

-- The platform organization always exists: environments created by the
-- operator belong to it (seed 002, "External idle reaper": the reaper acts on
-- platform-organization deployments).
INSERT INTO organizations (id, slug, name, kind, created_at)
VALUES (1, 'platform', 'Platform', 'platform', 0);

CREATE TABLE environments (
    id         INTEGER PRIMARY KEY,
    org_id     INTEGER NOT NULL REFERENCES organizations (id),
    slug       TEXT    NOT NULL UNIQUE,
    name       TEXT    NOT NULL,
    status     TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'sunk')),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- One deployment is one droplet's life under an environment. id is the
-- agent's deployment id, unique within its environment only: one
-- environment's key can neither claim nor probe another's deployment ids.
-- The first heartbeat creates the row.
CREATE TABLE deployments (
    environment_id     INTEGER NOT NULL REFERENCES environments (id),
    id                 TEXT    NOT NULL,
    droplet_id         INTEGER,
    region             TEXT    NOT NULL DEFAULT '',
    size               TEXT    NOT NULL DEFAULT '',
    status             TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ended')),
    launched_at        INTEGER NOT NULL,
    ended_at           INTEGER,
    -- Absolute deadlines persisted from heartbeats so the reaper can act after
    -- the agent dies (seed 002, "External idle reaper").
    session_expires_at INTEGER,
    idle_deadline_at   INTEGER,
    last_heartbeat_at  INTEGER,
    ci_active          INTEGER NOT NULL DEFAULT 0 CHECK (ci_active IN (0, 1)),
    agent_version      TEXT    NOT NULL DEFAULT '',
    -- USD per hour captured at launch (seed 002, "Scheduler and cost estimates").
    hourly_rate_usd    REAL,
    managed            INTEGER NOT NULL DEFAULT 0 CHECK (managed IN (0, 1)),
    PRIMARY KEY (environment_id, id)
) STRICT;

CREATE INDEX deployments_environment ON deployments (environment_id, status);
CREATE INDEX deployments_active_deadlines ON deployments (status, idle_deadline_at, session_expires_at);

-- Every accepted heartbeat, as received.
CREATE TABLE heartbeats (
    id                 INTEGER PRIMARY KEY,
    environment_id     INTEGER NOT NULL,
    deployment_id      TEXT    NOT NULL,
    key_id             TEXT    NOT NULL,
    received_at        INTEGER NOT NULL,
    sent_at            INTEGER NOT NULL,
    agent_version      TEXT    NOT NULL,
    idle_checks        INTEGER NOT NULL,
    limit_minutes      INTEGER NOT NULL,
    last_activity_at   INTEGER NOT NULL,
    ci_active          INTEGER NOT NULL CHECK (ci_active IN (0, 1)),
    idle_deadline_at   INTEGER NOT NULL,
    session_expires_at INTEGER,
    FOREIGN KEY (environment_id, deployment_id) REFERENCES deployments (environment_id, id)
) STRICT;

CREATE INDEX heartbeats_deployment ON heartbeats (environment_id, deployment_id, received_at);

-- Lifecycle evidence. id is a stable event id so a retried completion or a
-- concurrent reaper tick records an event at most once.
CREATE TABLE lifecycle_events (
    id             TEXT    PRIMARY KEY,
    org_id         INTEGER NOT NULL REFERENCES organizations (id),
    environment_id INTEGER REFERENCES environments (id),
    deployment_id  TEXT,
    kind           TEXT    NOT NULL,
    reason         TEXT    NOT NULL DEFAULT '' CHECK (reason IN ('', 'idle', 'session-expired', 'provider', 'manual')),
    message        TEXT    NOT NULL DEFAULT '',
    occurred_at    INTEGER NOT NULL,
    FOREIGN KEY (environment_id, deployment_id) REFERENCES deployments (environment_id, id)
) STRICT;

CREATE INDEX lifecycle_events_environment ON lifecycle_events (environment_id, occurred_at);

-- Per-environment ingest keys (seed 002, "Ingest key lifecycle"). The key
-- material is stored only as an AES-256-GCM envelope under the master key,
-- with key_id bound as additional data.
CREATE TABLE ingest_keys (
    key_id             TEXT    PRIMARY KEY,
    environment_id     INTEGER NOT NULL REFERENCES environments (id),
    status             TEXT    NOT NULL CHECK (status IN ('active', 'rotating', 'revoked')),
    master_key_version INTEGER NOT NULL,
    envelope           BLOB    NOT NULL,
    created_at         INTEGER NOT NULL,
    rotated_at         INTEGER,
    revoked_at         INTEGER
) STRICT;

CREATE INDEX ingest_keys_environment ON ingest_keys (environment_id, status);

-- Replay protection, partitioned per key (one tenant can never exhaust
-- another's window). signed_at is the request's signed timestamp in unix
-- milliseconds; rows older than the skew window can never match again and
-- are pruned.
CREATE TABLE nonces (
    key_id    TEXT    NOT NULL,
    nonce     TEXT    NOT NULL,
    signed_at INTEGER NOT NULL,
    PRIMARY KEY (key_id, nonce)
) STRICT, WITHOUT ROWID;

CREATE INDEX nonces_signed_at ON nonces (signed_at);

-- One encrypted check value per database, so serve can tell a wrong master
-- key at start instead of failing every request.
CREATE TABLE master_key_check (
    id                 INTEGER PRIMARY KEY CHECK (id = 1),
    master_key_version INTEGER NOT NULL,
    envelope           BLOB    NOT NULL,
    created_at         INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE master_key_check;
DROP TABLE nonces;
DROP TABLE ingest_keys;
DROP TABLE lifecycle_events;
DROP TABLE heartbeats;
DROP TABLE deployments;
DROP TABLE environments;
DROP TABLE organizations;
