-- +goose Up
-- Inventory and cost reconciliation (docs/operations.md, "Cost
-- reconciliation").

-- Where a deployment came from: an agent's first heartbeat, or inventory
-- reconciliation adopting a chalupa-tagged droplet no agent reported.
ALTER TABLE deployments ADD COLUMN source TEXT NOT NULL DEFAULT 'agent' CHECK (source IN ('agent', 'inventory'));
-- Launch-time rate capture: price_monthly beside the existing
-- hourly_rate_usd, both written once at first observation and never
-- rewritten, so a short cycle keeps the rate it ran at after a price change.
ALTER TABLE deployments ADD COLUMN monthly_rate_usd REAL;
-- When the rate was captured, and the droplet's creation time as the
-- provider reports it (billing starts there, before the first heartbeat).
ALTER TABLE deployments ADD COLUMN rate_captured_at INTEGER;
ALTER TABLE deployments ADD COLUMN droplet_created_at INTEGER;

CREATE INDEX deployments_droplet ON deployments (droplet_id) WHERE droplet_id IS NOT NULL;

-- Block-storage volumes tagged for an environment, as inventory saw them.
-- Storage is billed until the volume is gone, whether or not any compute
-- runs: gone_at is set when a successful listing no longer holds it. The
-- rate (USD per GiB-month) is captured at first observation, like droplet
-- rates.
CREATE TABLE cost_volumes (
    id                     TEXT    PRIMARY KEY,
    environment_id         INTEGER NOT NULL REFERENCES environments (id),
    name                   TEXT    NOT NULL,
    size_gib               INTEGER NOT NULL CHECK (size_gib >= 0),
    usd_per_gib_month      REAL    NOT NULL CHECK (usd_per_gib_month >= 0),
    created_at             INTEGER NOT NULL,
    first_seen_at          INTEGER NOT NULL,
    last_seen_at           INTEGER NOT NULL,
    gone_at                INTEGER
) STRICT;

CREATE INDEX cost_volumes_environment ON cost_volumes (environment_id);

-- One row per successful reconciliation run: operational evidence of
-- what it saw and did. A run the provider refused writes nothing.
CREATE TABLE cost_snapshots (
    id               INTEGER PRIMARY KEY,
    trigger          TEXT    NOT NULL CHECK (trigger IN ('schedule', 'admin')),
    started_at       INTEGER NOT NULL,
    duration_ms      INTEGER NOT NULL,
    month            TEXT    NOT NULL,
    droplets_seen    INTEGER NOT NULL,
    volumes_seen     INTEGER NOT NULL,
    adopted          INTEGER NOT NULL,
    ended            INTEGER NOT NULL,
    rates_captured   INTEGER NOT NULL,
    unpriced         INTEGER NOT NULL,
    total_usd        REAL    NOT NULL
) STRICT;

CREATE INDEX cost_snapshots_started ON cost_snapshots (started_at);

-- Month-to-date estimate per environment at the time of a snapshot.
CREATE TABLE cost_snapshot_environments (
    snapshot_id    INTEGER NOT NULL REFERENCES cost_snapshots (id),
    environment_id INTEGER NOT NULL REFERENCES environments (id),
    compute_usd    REAL    NOT NULL,
    storage_usd    REAL    NOT NULL,
    PRIMARY KEY (snapshot_id, environment_id)
) STRICT, WITHOUT ROWID;

-- +goose Down
DROP TABLE cost_snapshot_environments;
DROP TABLE cost_snapshots;
DROP TABLE cost_volumes;
DROP INDEX deployments_droplet;
ALTER TABLE deployments DROP COLUMN droplet_created_at;
ALTER TABLE deployments DROP COLUMN rate_captured_at;
ALTER TABLE deployments DROP COLUMN monthly_rate_usd;
ALTER TABLE deployments DROP COLUMN source;
