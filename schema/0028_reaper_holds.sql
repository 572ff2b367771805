-- chalupa:migration expand
-- +goose Up
-- Holds that end (docs/operations.md, "Reaper"): every reaper hold is
-- stored with its reason (grace, clock-suspect, storage, contact, guard,
-- dry-run, backoff, rate-limited), the evidence it rests on (words, never
-- a secret) and its own maximum in milliseconds. A stored end further
-- ahead than now + maximum was written under a wrong clock: the reaper
-- re-anchors it once to now + maximum, with an event, so no hold outlives
-- the clock being right by more than its maximum. A hold written before
-- this migration (or by a release without it) has no maximum; it is
-- bounded by the longest hold such a release writes, one hour (the tag
-- guard's), in the queries. Columns are read only while
-- reaper_hold_until is set; a heartbeat that clears the hold leaves them.
ALTER TABLE deployments ADD COLUMN reaper_hold_reason TEXT;
ALTER TABLE deployments ADD COLUMN reaper_hold_evidence TEXT;
ALTER TABLE deployments ADD COLUMN reaper_hold_max_ms INTEGER CHECK (reaper_hold_max_ms > 0);

-- +goose Down
ALTER TABLE deployments DROP COLUMN reaper_hold_max_ms;
ALTER TABLE deployments DROP COLUMN reaper_hold_evidence;
ALTER TABLE deployments DROP COLUMN reaper_hold_reason;
