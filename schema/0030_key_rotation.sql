-- chalupa:migration expand
-- +goose Up
-- Key rotation that reaches running boxes (docs/operations.md, "Ingest
-- keys" and "SSH key delivery"): a key a rotation delivers to a box's
-- droplet awaits its first heartbeat (confirm_pending = 1); the heartbeat
-- signed with it, in its own writer unit, sets confirmed_at, clears the
-- flag and revokes every key recorded earlier for the same box's droplet.
-- The flag is the rotation's durable state: a rotation whose admin call
-- returned, or whose daemon restarted, before that heartbeat completes
-- when it arrives. Keys recorded before this migration are not pending.
ALTER TABLE ingest_key_deliveries ADD COLUMN confirm_pending INTEGER NOT NULL DEFAULT 0 CHECK (confirm_pending IN (0, 1));
ALTER TABLE ingest_key_deliveries ADD COLUMN confirmed_at INTEGER;

-- +goose Down
ALTER TABLE ingest_key_deliveries DROP COLUMN confirmed_at;
ALTER TABLE ingest_key_deliveries DROP COLUMN confirm_pending;
