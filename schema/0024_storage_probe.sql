-- chalupa:migration expand
-- +goose Up
-- The storage probe (docs/operations.md, "Storage and the writer"): while
-- commits fail for storage reasons (disk full, I/O error, read-only file
-- system), the storage-health loop rewrites this one row at a low cadence.
-- Its commit is the smallest real write (a page appended to the WAL and
-- fsynced), so its success says storage works again on an idle daemon.
CREATE TABLE storage_probe (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE storage_probe;
