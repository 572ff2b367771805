-- +goose Up
-- The reaper's hold (docs/operations.md, "Reaper"): a due deployment the
-- reaper could not act on — the tag guard refused its droplet, a destroy
-- failed, or dry run recorded what it would do — is looked at again only
-- after this time, or sooner when a heartbeat changes its state (which
-- clears it). Without it a due-but-deferred deployment would make the
-- event-driven reaper spin. NULL: no hold.
ALTER TABLE deployments ADD COLUMN reaper_hold_until INTEGER;

-- +goose Down
ALTER TABLE deployments DROP COLUMN reaper_hold_until;
