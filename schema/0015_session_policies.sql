-- +goose Up
-- Bounded demo/test sessions (docs/operations.md, "Session policies"): an
-- environment may carry a policy, a kind (demo or test) and a maximum
-- session length. Every deployment of the environment then expires at the
-- latest at its launch plus the maximum: a heartbeat asking for later is
-- clamped to it, a deployment with no expiry is given it, and the reaper
-- enforces session_expires_at as it always has. One row per environment;
-- no row, no policy.
CREATE TABLE environment_session_policies (
    environment_id      INTEGER PRIMARY KEY REFERENCES environments (id),
    kind                TEXT    NOT NULL CHECK (kind IN ('demo', 'test')),
    max_session_seconds INTEGER NOT NULL CHECK (max_session_seconds BETWEEN 60 AND 2592000),
    updated_at          INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE environment_session_policies;
