-- +goose Up
-- SSH key delivery (docs/operations.md, "SSH key delivery"): chalupa's own
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

-- +goose Down
DROP TABLE ssh_host_keys;
DROP TABLE ssh_identity;
