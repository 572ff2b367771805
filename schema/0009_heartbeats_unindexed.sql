-- +goose Up
-- heartbeats loses its (environment_id, deployment_id, received_at) index
-- (docs/operations.md, "Storage and the writer"). Its one reader was the
-- retention walk, looking for each deployment's latest heartbeat; that is
-- deployments.last_heartbeat_at, which every accepted heartbeat already
-- writes in the same transaction. Each heartbeat inserted into that index
-- landed on a random page of it (one per deployment), so every COMMIT
-- wrote, and Litestream copied, a page per deployment in the batch: about
-- 1.2 of the 1.4 pages Litestream encoded per heartbeat. Without it a
-- heartbeat appends to the table's last page. The foreign key to
-- deployments stays: its child lookup only runs when a deployment's key
-- changes or its row is deleted, and chalupa does neither.
DROP INDEX heartbeats_deployment;

-- +goose Down
CREATE INDEX heartbeats_deployment ON heartbeats (environment_id, deployment_id, received_at);
