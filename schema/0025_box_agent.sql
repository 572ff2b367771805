-- chalupa:migration expand
-- +goose Up
-- A box carries the agent by default (docs/operations.md, "Boxes"):
-- converge renders its user data from the agent install template, and the
-- agent's idle and session limits come from the box. The defaults are the
-- agent's own (idle 30 minutes, no session expiry), so an existing box
-- gets what a hand-started agent gets; a previous release that writes a
-- config row without these columns leaves them at their defaults.
ALTER TABLE cloud_resource_config ADD COLUMN agent INTEGER NOT NULL DEFAULT 1 CHECK (agent IN (0, 1));
ALTER TABLE cloud_resource_config ADD COLUMN agent_idle_minutes INTEGER NOT NULL DEFAULT 30
    CHECK (agent_idle_minutes BETWEEN 1 AND 10080);
ALTER TABLE cloud_resource_config ADD COLUMN agent_session_minutes INTEGER NOT NULL DEFAULT 0
    CHECK (agent_session_minutes BETWEEN 0 AND 43200);

-- +goose Down
ALTER TABLE cloud_resource_config DROP COLUMN agent_session_minutes;
ALTER TABLE cloud_resource_config DROP COLUMN agent_idle_minutes;
ALTER TABLE cloud_resource_config DROP COLUMN agent;
