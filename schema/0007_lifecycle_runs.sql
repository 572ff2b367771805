-- +goose Up
-- Producer lifecycle events and CI suite runs (docs/operations.md,
-- "Lifecycle events and runs").

-- A producer's lifecycle event is stored in lifecycle_events under
-- "agent:<environment id>:<its id>" with the SHA-256 of its canonical body,
-- so the same id with the same body is a retry (deduplicated) and with a
-- different body a conflict. NULL for the events chalupa records itself.
ALTER TABLE lifecycle_events ADD COLUMN body_sha256 BLOB;

-- One CI suite run as reported by a producer. run_id is the producer's,
-- unique within the environment; fingerprint is the SHA-256 of the
-- normalized run fields and artifact array, so a retried report is
-- deduplicated and a different one under the same run id refused.
CREATE TABLE runs (
    environment_id INTEGER NOT NULL,
    run_id         TEXT    NOT NULL,
    deployment_id  TEXT    NOT NULL,
    suite          TEXT    NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('passed', 'failed', 'cancelled', 'errored')),
    commit_sha     TEXT    NOT NULL DEFAULT '',
    started_at     INTEGER NOT NULL,
    finished_at    INTEGER NOT NULL,
    fingerprint    BLOB    NOT NULL,
    received_at    INTEGER NOT NULL,
    PRIMARY KEY (environment_id, run_id),
    FOREIGN KEY (environment_id, deployment_id) REFERENCES deployments (environment_id, id)
) STRICT;

CREATE INDEX runs_environment_started ON runs (environment_id, started_at);
CREATE INDEX runs_deployment ON runs (environment_id, deployment_id);

-- The run's artifacts as ArtifactRefV1: exactly one of locator_url
-- (kind https) and locator_id (kind local) is set.
CREATE TABLE run_artifacts (
    environment_id INTEGER NOT NULL,
    run_id         TEXT    NOT NULL,
    ordinal        INTEGER NOT NULL,
    name           TEXT    NOT NULL,
    media_type     TEXT    NOT NULL,
    size_bytes     INTEGER NOT NULL CHECK (size_bytes >= 0),
    sha256         TEXT    NOT NULL,
    locator_kind   TEXT    NOT NULL CHECK (locator_kind IN ('https', 'local')),
    locator_url    TEXT,
    locator_id     TEXT,
    PRIMARY KEY (environment_id, run_id, ordinal),
    UNIQUE (environment_id, run_id, name),
    CHECK ((locator_kind = 'https') = (locator_url IS NOT NULL) AND (locator_kind = 'local') = (locator_id IS NOT NULL)),
    FOREIGN KEY (environment_id, run_id) REFERENCES runs (environment_id, run_id)
) STRICT;

-- Runs and producer lifecycle events counted per deployment, for the
-- per-deployment caps.
ALTER TABLE deployments ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deployments ADD COLUMN producer_events INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE deployments DROP COLUMN producer_events;
ALTER TABLE deployments DROP COLUMN runs;
DROP TABLE run_artifacts;
DROP TABLE runs;
ALTER TABLE lifecycle_events DROP COLUMN body_sha256;
