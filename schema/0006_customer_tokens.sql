-- +goose Up
-- Customer organizations' DigitalOcean provider tokens (docs/operations.md,
-- "Customer organizations"). One row per organization: the token is stored
-- only as an AES-256-GCM envelope under the master key, bound to the
-- organization id and generation as additional data. generation starts at 1
-- and grows with every replacement, so the reaper's "mark invalid" is a
-- compare-and-set on the generation it read: a token rotated meanwhile is
-- kept. status: active (swept), invalid (DigitalOcean answered 401/403 on a
-- droplet call), revoked (the operator's DELETE).
CREATE TABLE org_provider_tokens (
    org_id             INTEGER PRIMARY KEY REFERENCES organizations (id),
    status             TEXT    NOT NULL CHECK (status IN ('active', 'invalid', 'revoked')),
    generation         INTEGER NOT NULL CHECK (generation >= 1),
    master_key_version INTEGER NOT NULL,
    envelope           BLOB    NOT NULL,
    created_at         INTEGER NOT NULL,
    rotated_at         INTEGER NOT NULL,
    invalid_at         INTEGER,
    revoked_at         INTEGER
) STRICT;

-- +goose Down
DROP TABLE org_provider_tokens;
