-- +goose Up
-- The operations report's stored evidence (docs/operations.md, "Operations
-- report"). Rows are written at most once an hour and only for hours that
-- had traffic: by the first request of a new hour (through the writer) and
-- at shutdown; an idle daemon writes none. A second write for the same hour
-- (a restart within it) adds to the row.
--
-- request_hours: one row per UTC hour (hour_start, unix ms) and route group.
-- latency_buckets is a JSON array of request counts per latency bucket, the
-- bounds fixed in code (storage.RequestLatencyBounds) plus one overflow.
CREATE TABLE request_hours (
    hour_start      INTEGER NOT NULL,
    route_group     TEXT    NOT NULL,
    requests        INTEGER NOT NULL,
    server_errors   INTEGER NOT NULL,
    latency_buckets TEXT    NOT NULL,
    PRIMARY KEY (hour_start, route_group)
) STRICT;

-- process_hours: the process beside each hour's request rows. wall_ms and
-- cpu_ms are the wall time and process CPU time since the previous row of
-- this process (or its start), so their ratio is the daemon's active share;
-- db_bytes and wal_bytes are the database and WAL file sizes when written.
CREATE TABLE process_hours (
    hour_start  INTEGER PRIMARY KEY,
    wall_ms     INTEGER NOT NULL,
    cpu_ms      INTEGER NOT NULL,
    db_bytes    INTEGER NOT NULL,
    wal_bytes   INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE process_hours;
DROP TABLE request_hours;
