-- +goose Up
-- The idle deadline moves only for real activity (docs/operations.md,
-- "Heartbeats and deadlines"): a deployment keeps its latest
-- lastActivityAt and current limit, and its deadline is computed from them,
-- so a delayed heartbeat carrying an older activity time cannot pull the
-- deadline back.
ALTER TABLE deployments ADD COLUMN last_activity_at INTEGER;
ALTER TABLE deployments ADD COLUMN limit_minutes INTEGER;

-- Existing deployments take them from their heartbeats: the latest activity
-- ever reported, and the limit of the most recent heartbeat.
UPDATE deployments SET
    last_activity_at = (SELECT max(h.last_activity_at) FROM heartbeats h
                        WHERE h.environment_id = deployments.environment_id AND h.deployment_id = deployments.id),
    limit_minutes = (SELECT h.limit_minutes FROM heartbeats h
                     WHERE h.environment_id = deployments.environment_id AND h.deployment_id = deployments.id
                     ORDER BY h.id DESC LIMIT 1);
UPDATE deployments SET idle_deadline_at = last_activity_at + limit_minutes * 60000
WHERE last_activity_at IS NOT NULL AND limit_minutes IS NOT NULL;

-- +goose Down
ALTER TABLE deployments DROP COLUMN limit_minutes;
ALTER TABLE deployments DROP COLUMN last_activity_at;
