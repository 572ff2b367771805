-- chalupa:migration expand
-- +goose Up
-- Per-environment storage budget (docs/operations.md, "Quotas"): the
-- charged bytes of an environment's runs with their artifacts, its
-- telemetry (source windows, receipts, sessions, hourly rollups,
-- anomalies) and the lifecycle events its producers reported. Every writer
-- unit that inserts or deletes such rows moves this counter in the same
-- transaction, so the budget is checked without summing rows; a row's
-- charge is a fixed size per table plus the bytes of its text columns
-- (storage/storage_budget_query.go). Rows stored before this migration
-- are counted once, here.
ALTER TABLE environments ADD COLUMN storage_bytes INTEGER NOT NULL DEFAULT 0;

UPDATE environments SET storage_bytes =
    (SELECT coalesce(sum(560 + length(CAST(deployment_id AS BLOB)) + length(CAST(session_id AS BLOB))), 0) FROM telemetry_windows WHERE environment_id = environments.id)
    + (SELECT coalesce(sum(80 + length(CAST(deployment_id AS BLOB)) + length(CAST(session_id AS BLOB))), 0) FROM telemetry_receipts WHERE environment_id = environments.id)
    + (SELECT coalesce(sum(4800 + length(CAST(deployment_id AS BLOB)) + length(CAST(id AS BLOB))), 0) FROM telemetry_sessions WHERE environment_id = environments.id)
    + (SELECT coalesce(sum(680 + length(CAST(deployment_id AS BLOB)) + length(CAST(session_id AS BLOB))), 0) FROM telemetry_hourly WHERE environment_id = environments.id)
    + (SELECT coalesce(sum(48 + length(CAST(deployment_id AS BLOB)) + length(CAST(session_id AS BLOB)) + length(CAST(kind AS BLOB))), 0) FROM telemetry_anomalies WHERE environment_id = environments.id)
    + (SELECT coalesce(sum(160 + length(CAST(run_id AS BLOB)) + length(CAST(deployment_id AS BLOB)) + length(CAST(suite AS BLOB)) + length(CAST(status AS BLOB)) + length(CAST(commit_sha AS BLOB))), 0) FROM runs WHERE environment_id = environments.id)
    + (SELECT coalesce(sum((CASE WHEN (64 + length(CAST(run_id AS BLOB)) + length(CAST(run_id AS BLOB)) + length(CAST(name AS BLOB)) + length(CAST(name AS BLOB)) + length(CAST(media_type AS BLOB)) + length(CAST(sha256 AS BLOB)) + length(CAST(locator_kind AS BLOB)) + length(CAST(coalesce(locator_url, '') AS BLOB)) + length(CAST(coalesce(locator_id, '') AS BLOB))) <= 1024 THEN (64 + length(CAST(run_id AS BLOB)) + length(CAST(run_id AS BLOB)) + length(CAST(name AS BLOB)) + length(CAST(name AS BLOB)) + length(CAST(media_type AS BLOB)) + length(CAST(sha256 AS BLOB)) + length(CAST(locator_kind AS BLOB)) + length(CAST(coalesce(locator_url, '') AS BLOB)) + length(CAST(coalesce(locator_id, '') AS BLOB))) ELSE 4096 / max(1, 4000 / (64 + length(CAST(run_id AS BLOB)) + length(CAST(run_id AS BLOB)) + length(CAST(name AS BLOB)) + length(CAST(name AS BLOB)) + length(CAST(media_type AS BLOB)) + length(CAST(sha256 AS BLOB)) + length(CAST(locator_kind AS BLOB)) + length(CAST(coalesce(locator_url, '') AS BLOB)) + length(CAST(coalesce(locator_id, '') AS BLOB)))) END)), 0) FROM run_artifacts WHERE environment_id = environments.id)
    + (SELECT coalesce(sum(112 + length(CAST(id AS BLOB)) + length(CAST(coalesce(deployment_id, '') AS BLOB)) + length(CAST(kind AS BLOB)) + length(CAST(reason AS BLOB)) + length(CAST(message AS BLOB))), 0) FROM lifecycle_events WHERE environment_id = environments.id AND body_sha256 IS NOT NULL);

-- +goose Down
ALTER TABLE environments DROP COLUMN storage_bytes;
