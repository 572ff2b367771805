-- chalupa:migration expand
-- +goose Up
-- The wall-clock high-water mark (docs/operations.md, "Signed ingest"): the
-- newest signed timestamp ingest accepted while the clock guard was not
-- suspect, never past the server's own clock. Requests signed before it
-- minus the signing window are refused timestamp_skew, and the nonce pruner
-- deletes only nonces signed before that bound, so a pruned nonce cannot
-- be replayed after the server's clock steps back. It lives in the database,
-- so it travels with the replica. An existing database starts from its
-- newest stored nonce, capped at the migration's own clock: the nonces
-- stored so far stay protected.
CREATE TABLE clock_mark (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    mark_at INTEGER NOT NULL
) STRICT;

INSERT INTO clock_mark (id, mark_at)
SELECT 1, min(max(signed_at), CAST(strftime('%s', 'now') AS INTEGER) * 1000) FROM nonces HAVING count(*) > 0;

-- +goose Down
DROP TABLE clock_mark;
