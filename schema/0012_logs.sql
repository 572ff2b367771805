-- +goose Up
-- The private log broker (docs/operations.md, "Logs"): chalupa plans, counts,
-- verifies and grants; the log bytes live only in the object store at
-- CHALUPA_LOGS_URL. A chunk's complete plan (key, size, sha256) is persisted
-- before its upload grant is answered, so a grant can be renewed exactly and a
-- committed chunk replayed after either side restarts.

-- An environment's service allowlist: unit names separated by commas; NULL
-- is the default list (the agent's and cloud-init's units).
ALTER TABLE environments ADD COLUMN log_services TEXT;

-- Per-deployment log quota counters: chunks and bytes planned over the
-- deployment's life (retention does not lower them; erase resets them).
ALTER TABLE deployments ADD COLUMN log_chunks INTEGER NOT NULL DEFAULT 0 CHECK (log_chunks >= 0);
ALTER TABLE deployments ADD COLUMN log_bytes INTEGER NOT NULL DEFAULT 0 CHECK (log_bytes >= 0);

CREATE TABLE log_sessions (
    id             INTEGER PRIMARY KEY,
    environment_id INTEGER NOT NULL,
    deployment_id  TEXT    NOT NULL,
    -- The agent's session id (a ULID it keeps in its spool).
    session_id     TEXT    NOT NULL,
    service        TEXT    NOT NULL,
    opened_at      INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    -- The next sequence number a plan may reserve.
    next_seq       INTEGER NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    finished_at    INTEGER,
    -- The exact final payload (canonical JSON) finish stored.
    final_payload  BLOB,
    FOREIGN KEY (environment_id, deployment_id) REFERENCES deployments (environment_id, id),
    UNIQUE (environment_id, deployment_id, session_id)
) STRICT;

CREATE TABLE log_chunks (
    session_row      INTEGER NOT NULL REFERENCES log_sessions (id),
    seq              INTEGER NOT NULL CHECK (seq >= 0),
    object_key       TEXT    NOT NULL UNIQUE,
    size_bytes       INTEGER NOT NULL CHECK (size_bytes >= 1),
    sha256           BLOB    NOT NULL CHECK (length(sha256) = 32),
    state            TEXT    NOT NULL CHECK (state IN ('planned', 'committed')),
    planned_at       INTEGER NOT NULL,
    grant_expires_at INTEGER NOT NULL,
    committed_at     INTEGER,
    PRIMARY KEY (session_row, seq)
) STRICT, WITHOUT ROWID;

-- Retention's scan: oldest plans first.
CREATE INDEX log_chunks_planned ON log_chunks (planned_at);

-- Log erasures and their receipts (adminEraseLogs).
CREATE TABLE log_erasures (
    id               TEXT    PRIMARY KEY,
    environment_id   INTEGER NOT NULL REFERENCES environments (id),
    started_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    sessions_removed INTEGER NOT NULL DEFAULT 0,
    chunks_removed   INTEGER NOT NULL DEFAULT 0,
    objects_deleted  INTEGER NOT NULL DEFAULT 0
) STRICT;

-- +goose Down
DROP TABLE log_erasures;
DROP INDEX log_chunks_planned;
DROP TABLE log_chunks;
DROP TABLE log_sessions;
ALTER TABLE deployments DROP COLUMN log_bytes;
ALTER TABLE deployments DROP COLUMN log_chunks;
ALTER TABLE environments DROP COLUMN log_services;
