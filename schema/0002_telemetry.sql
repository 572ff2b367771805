-- +goose Up
-- Telemetry: the Monitor's minute source windows, their retry receipts,
-- sessions with terminal summaries, anomalies, hourly rollups, and the
-- retention loop's run evidence (docs/operations.md, "Telemetry" and
-- "Retention"). Times are unix milliseconds (schema/embed.go).
--
-- Every metric of the fixed set (ingest/telemetry, Metrics) has five
-- columns: <metric>_n (samples, NULL when the agent did not send the
-- metric), _sum, _min, _max and _last. Hourly rows add <metric>_last_at, the
-- windowStart the _last value came from, so two folds of one hour merge
-- without guessing which value is later.

-- Receipts held per deployment: the 20,160 cap is checked against this
-- counter, not by counting rows on every window. Erase resets it.
ALTER TABLE deployments ADD COLUMN telemetry_receipts INTEGER NOT NULL DEFAULT 0;

-- One Monitor session of one deployment. version increases with every
-- accepted window (the finalizer writes its summary only if it still holds
-- the version it read). detail_from is the oldest windowStart still held in
-- telemetry_windows (NULL when none), so retention finds foldable sessions
-- by index instead of scanning detail.
CREATE TABLE telemetry_sessions (
    environment_id  INTEGER NOT NULL,
    deployment_id   TEXT    NOT NULL,
    id              TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    first_window_at INTEGER NOT NULL,
    last_window_at  INTEGER NOT NULL,
    windows         INTEGER NOT NULL DEFAULT 0,
    detail_from     INTEGER,
    ended_at        INTEGER,
    end_reason      TEXT    NOT NULL DEFAULT '' CHECK (end_reason IN ('', 'final', 'deployment-ended')),
    version         INTEGER NOT NULL DEFAULT 0,
    summary         TEXT,
    summarized_at   INTEGER,
    PRIMARY KEY (environment_id, deployment_id, id),
    FOREIGN KEY (environment_id, deployment_id) REFERENCES deployments (environment_id, id)
) STRICT, WITHOUT ROWID;

CREATE INDEX telemetry_sessions_detail ON telemetry_sessions (detail_from) WHERE detail_from IS NOT NULL;
CREATE INDEX telemetry_sessions_unsummarized ON telemetry_sessions (ended_at) WHERE ended_at IS NOT NULL AND summary IS NULL;

-- Minute source windows, kept in detail for 7 days. Keyed by identity so a
-- fold reads one session's hour as one contiguous range.
CREATE TABLE telemetry_windows (
    environment_id INTEGER NOT NULL,
    deployment_id  TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    window_start   INTEGER NOT NULL,
    received_at    INTEGER NOT NULL,
    final          INTEGER NOT NULL CHECK (final IN (0, 1)),
    cpu_pct_n INTEGER, cpu_pct_sum REAL, cpu_pct_min REAL, cpu_pct_max REAL, cpu_pct_last REAL,
    mem_used_bytes_n INTEGER, mem_used_bytes_sum REAL, mem_used_bytes_min REAL, mem_used_bytes_max REAL, mem_used_bytes_last REAL,
    mem_total_bytes_n INTEGER, mem_total_bytes_sum REAL, mem_total_bytes_min REAL, mem_total_bytes_max REAL, mem_total_bytes_last REAL,
    disk_used_bytes_n INTEGER, disk_used_bytes_sum REAL, disk_used_bytes_min REAL, disk_used_bytes_max REAL, disk_used_bytes_last REAL,
    disk_total_bytes_n INTEGER, disk_total_bytes_sum REAL, disk_total_bytes_min REAL, disk_total_bytes_max REAL, disk_total_bytes_last REAL,
    load1_n INTEGER, load1_sum REAL, load1_min REAL, load1_max REAL, load1_last REAL,
    net_rx_bytes_n INTEGER, net_rx_bytes_sum REAL, net_rx_bytes_min REAL, net_rx_bytes_max REAL, net_rx_bytes_last REAL,
    net_tx_bytes_n INTEGER, net_tx_bytes_sum REAL, net_tx_bytes_min REAL, net_tx_bytes_max REAL, net_tx_bytes_last REAL,
    gpu_util_pct_n INTEGER, gpu_util_pct_sum REAL, gpu_util_pct_min REAL, gpu_util_pct_max REAL, gpu_util_pct_last REAL,
    gpu_mem_used_bytes_n INTEGER, gpu_mem_used_bytes_sum REAL, gpu_mem_used_bytes_min REAL, gpu_mem_used_bytes_max REAL, gpu_mem_used_bytes_last REAL,
    gpu_mem_total_bytes_n INTEGER, gpu_mem_total_bytes_sum REAL, gpu_mem_total_bytes_min REAL, gpu_mem_total_bytes_max REAL, gpu_mem_total_bytes_last REAL,
    gpu_temp_c_n INTEGER, gpu_temp_c_sum REAL, gpu_temp_c_min REAL, gpu_temp_c_max REAL, gpu_temp_c_last REAL,
    gpu_power_w_n INTEGER, gpu_power_w_sum REAL, gpu_power_w_min REAL, gpu_power_w_max REAL, gpu_power_w_last REAL,
    PRIMARY KEY (environment_id, deployment_id, session_id, window_start)
) STRICT, WITHOUT ROWID;

-- Hourly rollups, kept indefinitely. windows counts the source windows
-- folded in; first/last_window_at bound them. gpu_idle_windows counts the
-- folded windows whose gpuUtilPct max was under 5 (a per-window fact the
-- hour's aggregate cannot recover; the terminal summary's GPU-idle minutes
-- read it).
CREATE TABLE telemetry_hourly (
    environment_id   INTEGER NOT NULL,
    deployment_id    TEXT    NOT NULL,
    session_id       TEXT    NOT NULL,
    hour_start       INTEGER NOT NULL,
    windows          INTEGER NOT NULL,
    first_window_at  INTEGER NOT NULL,
    last_window_at   INTEGER NOT NULL,
    gpu_idle_windows INTEGER NOT NULL DEFAULT 0,
    cpu_pct_n INTEGER, cpu_pct_sum REAL, cpu_pct_min REAL, cpu_pct_max REAL, cpu_pct_last REAL, cpu_pct_last_at INTEGER,
    mem_used_bytes_n INTEGER, mem_used_bytes_sum REAL, mem_used_bytes_min REAL, mem_used_bytes_max REAL, mem_used_bytes_last REAL, mem_used_bytes_last_at INTEGER,
    mem_total_bytes_n INTEGER, mem_total_bytes_sum REAL, mem_total_bytes_min REAL, mem_total_bytes_max REAL, mem_total_bytes_last REAL, mem_total_bytes_last_at INTEGER,
    disk_used_bytes_n INTEGER, disk_used_bytes_sum REAL, disk_used_bytes_min REAL, disk_used_bytes_max REAL, disk_used_bytes_last REAL, disk_used_bytes_last_at INTEGER,
    disk_total_bytes_n INTEGER, disk_total_bytes_sum REAL, disk_total_bytes_min REAL, disk_total_bytes_max REAL, disk_total_bytes_last REAL, disk_total_bytes_last_at INTEGER,
    load1_n INTEGER, load1_sum REAL, load1_min REAL, load1_max REAL, load1_last REAL, load1_last_at INTEGER,
    net_rx_bytes_n INTEGER, net_rx_bytes_sum REAL, net_rx_bytes_min REAL, net_rx_bytes_max REAL, net_rx_bytes_last REAL, net_rx_bytes_last_at INTEGER,
    net_tx_bytes_n INTEGER, net_tx_bytes_sum REAL, net_tx_bytes_min REAL, net_tx_bytes_max REAL, net_tx_bytes_last REAL, net_tx_bytes_last_at INTEGER,
    gpu_util_pct_n INTEGER, gpu_util_pct_sum REAL, gpu_util_pct_min REAL, gpu_util_pct_max REAL, gpu_util_pct_last REAL, gpu_util_pct_last_at INTEGER,
    gpu_mem_used_bytes_n INTEGER, gpu_mem_used_bytes_sum REAL, gpu_mem_used_bytes_min REAL, gpu_mem_used_bytes_max REAL, gpu_mem_used_bytes_last REAL, gpu_mem_used_bytes_last_at INTEGER,
    gpu_mem_total_bytes_n INTEGER, gpu_mem_total_bytes_sum REAL, gpu_mem_total_bytes_min REAL, gpu_mem_total_bytes_max REAL, gpu_mem_total_bytes_last REAL, gpu_mem_total_bytes_last_at INTEGER,
    gpu_temp_c_n INTEGER, gpu_temp_c_sum REAL, gpu_temp_c_min REAL, gpu_temp_c_max REAL, gpu_temp_c_last REAL, gpu_temp_c_last_at INTEGER,
    gpu_power_w_n INTEGER, gpu_power_w_sum REAL, gpu_power_w_min REAL, gpu_power_w_max REAL, gpu_power_w_last REAL, gpu_power_w_last_at INTEGER,
    PRIMARY KEY (environment_id, deployment_id, session_id, hour_start)
) STRICT, WITHOUT ROWID;

-- Retry identities: immutable, and they outlive the detail row, so an old
-- replay is deduplicated (same body hash) or refused (different) forever.
-- body_hash is SHA-256 of the window's canonical encoding.
CREATE TABLE telemetry_receipts (
    environment_id INTEGER NOT NULL,
    deployment_id  TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    window_start   INTEGER NOT NULL,
    body_hash      BLOB    NOT NULL CHECK (length(body_hash) = 32),
    received_at    INTEGER NOT NULL,
    PRIMARY KEY (environment_id, deployment_id, session_id, window_start)
) STRICT, WITHOUT ROWID;

-- Anomalies: one row per (session, rule), so at most one row per rule per
-- session. windows counts the accepted windows at which the rule held.
CREATE TABLE telemetry_anomalies (
    environment_id INTEGER NOT NULL,
    deployment_id  TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('gpu-idle', 'memory-pressure', 'disk-nearly-full')),
    first_seen_at  INTEGER NOT NULL,
    last_seen_at   INTEGER NOT NULL,
    windows        INTEGER NOT NULL,
    PRIMARY KEY (environment_id, deployment_id, session_id, kind)
) STRICT, WITHOUT ROWID;

-- Evidence of each retention pass (scheduled or run by the operator).
CREATE TABLE retention_runs (
    id                  INTEGER PRIMARY KEY,
    trigger             TEXT    NOT NULL CHECK (trigger IN ('schedule', 'admin')),
    started_at          INTEGER NOT NULL,
    duration_ms         INTEGER NOT NULL,
    minute_rollups      INTEGER NOT NULL,
    hourly_rollups      INTEGER NOT NULL,
    batches             INTEGER NOT NULL,
    backlog_pending     INTEGER NOT NULL CHECK (backlog_pending IN (0, 1)),
    drain_stop_reason   TEXT    NOT NULL CHECK (drain_stop_reason IN ('drained', 'deadline', 'batch-limit')),
    heartbeats_pruned   INTEGER NOT NULL,
    sessions_finalized  INTEGER NOT NULL,
    error               TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX retention_runs_started ON retention_runs (started_at);

-- Erasures of one environment's telemetry (docs/operations.md, "Erasing
-- telemetry"): the durable progress of an erase that runs in many writer
-- units. Each unit deletes a batch and adds its count here in the same
-- transaction, so the counts always equal the rows removed; an erase
-- interrupted before finished_at is resumed (and its counts continued) by
-- the next erase of the environment. id is also the id of the
-- telemetry-erased lifecycle event recorded when it finishes.
CREATE TABLE telemetry_erasures (
    id             TEXT    PRIMARY KEY,
    environment_id INTEGER NOT NULL REFERENCES environments (id),
    started_at     INTEGER NOT NULL,
    finished_at    INTEGER,
    sessions       INTEGER NOT NULL DEFAULT 0,
    windows        INTEGER NOT NULL DEFAULT 0,
    hourly         INTEGER NOT NULL DEFAULT 0,
    receipts       INTEGER NOT NULL DEFAULT 0,
    anomalies      INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE UNIQUE INDEX telemetry_erasures_open ON telemetry_erasures (environment_id) WHERE finished_at IS NULL;

-- +goose Down
DROP TABLE telemetry_erasures;
DROP TABLE retention_runs;
DROP TABLE telemetry_anomalies;
DROP TABLE telemetry_receipts;
DROP TABLE telemetry_hourly;
DROP TABLE telemetry_windows;
DROP TABLE telemetry_sessions;
ALTER TABLE deployments DROP COLUMN telemetry_receipts;
