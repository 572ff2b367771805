-- chalupa:migration expand
-- +goose Up
-- The database's identity (docs/operations.md, "Replication"): 16 random hex
-- digits made once, when the database is created or first migrated to this
-- version. Replication writes it into a marker beside the replica's LTX files
-- and refuses a replica whose marker names another identity: that replica
-- holds another database's history. A `litestream restore` copies the row,
-- so a restored database continues its own replica's history. created_at is
-- unix ms.
CREATE TABLE chalupa_database_identity (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    id         TEXT    NOT NULL CHECK (length(id) = 16 AND id <> '0000000000000000'),
    created_at INTEGER NOT NULL
) STRICT;
INSERT INTO chalupa_database_identity (singleton, id, created_at)
VALUES (1, lower(hex(randomblob(8))), CAST(unixepoch('subsec') * 1000 AS INTEGER));

-- +goose Down
DROP TABLE chalupa_database_identity;
