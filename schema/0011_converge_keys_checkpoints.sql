-- +goose Up
-- Converge's stage 2b. SSH key delivery (docs/operations.md, "SSH key delivery"): chalupa's own
-- SSH identity, one row, its ed25519 private key sealed under the master key
-- (bound to "chalupa/ssh-identity/<id>", re-sealed by rewrap) so a restored
-- database still reaches live droplets; and the host key pinned at first
-- contact with each droplet, so a changed key is refused later.
CREATE TABLE ssh_identity (
    id                 INTEGER PRIMARY KEY CHECK (id = 1),
    public_key         TEXT    NOT NULL,
    master_key_version INTEGER NOT NULL,
    envelope           BLOB    NOT NULL,
    created_at         INTEGER NOT NULL
) STRICT;

CREATE TABLE ssh_host_keys (
    droplet_id    INTEGER PRIMARY KEY,
    host_key      TEXT    NOT NULL,
    fingerprint   TEXT    NOT NULL,
    first_seen_at INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL
) STRICT;

-- Stack-state checkpoints (docs/operations.md, "Checkpoints"): every
-- Pulumi stack export converge saves, versions increasing per stack, at most
-- 4 MiB each; the newest one restores a stack missing from an empty backend.
CREATE TABLE stack_states (
    id              INTEGER PRIMARY KEY,
    organization_id INTEGER NOT NULL REFERENCES organizations (id),
    environment_id  INTEGER NOT NULL REFERENCES environments (id),
    stack           TEXT    NOT NULL,
    version         INTEGER NOT NULL CHECK (version >= 1),
    export          BLOB    NOT NULL,
    sha256          BLOB    NOT NULL CHECK (length(sha256) = 32),
    size_bytes      INTEGER NOT NULL CHECK (size_bytes BETWEEN 1 AND 4194304),
    created_at      INTEGER NOT NULL,
    UNIQUE (stack, version)
) STRICT;

-- A stack whose import from a checkpoint began and is not yet verified:
-- uploads of that stack are refused until the import is finished.
CREATE TABLE stack_state_imports (
    stack      TEXT    PRIMARY KEY,
    version    INTEGER NOT NULL,
    started_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- +goose Down
DROP TABLE stack_state_imports;
DROP TABLE stack_states;
DROP TABLE ssh_host_keys;
DROP TABLE ssh_identity;
