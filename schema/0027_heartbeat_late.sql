-- chalupa:migration expand
-- +goose Up
-- A heartbeat that took longer on its way than its deployment's others is
-- stored but moves nothing (docs/operations.md, "Heartbeats and
-- deadlines", the transit rule); late = 1 marks it, so its row says why
-- the deployment did not follow it. NULL on every other heartbeat: a NULL
-- costs the row one header byte. A previous release names its columns on
-- insert and leaves it NULL.
ALTER TABLE heartbeats ADD COLUMN late INTEGER CHECK (late IS NULL OR late = 1);

-- +goose Down
ALTER TABLE heartbeats DROP COLUMN late;
