-- chalupa:migration expand
-- +goose Up
-- Alerts (docs/operations.md, "Alerts"). One row per alert: a condition of
-- a kind on a subject that started (opened_at) and, once it ended,
-- resolved_at. At most one open alert per kind and subject. last_sent_at is
-- when its last fired or repeated message was queued (repeats: critical
-- hourly, warning daily); acked_at stops repeats until it resolves.
CREATE TABLE alerts (
    id           TEXT    PRIMARY KEY,                    -- ULID
    kind         TEXT    NOT NULL,
    subject_kind TEXT    NOT NULL,
    subject_id   TEXT    NOT NULL DEFAULT '',
    severity     TEXT    NOT NULL CHECK (severity IN ('critical', 'warning')),
    detail       TEXT    NOT NULL DEFAULT '',            -- words, never a secret
    opened_at    INTEGER NOT NULL,
    resolved_at  INTEGER,
    last_sent_at INTEGER NOT NULL,
    acked_at     INTEGER
) STRICT;

CREATE UNIQUE INDEX alerts_open ON alerts (kind, subject_kind, subject_id) WHERE resolved_at IS NULL;
CREATE INDEX alerts_opened ON alerts (opened_at);

-- A muted kind sends no messages until until_at (`admin alerts mute`,
-- at most 24 h).
CREATE TABLE alert_mutes (
    kind     TEXT    PRIMARY KEY,
    until_at INTEGER NOT NULL,
    muted_at INTEGER NOT NULL
) STRICT;

-- The outbox: one row per message to one sink, written in the transaction
-- that changed the condition. id is the message's stable id (every retry
-- and every re-send after a crash or a restore carries it). A sink's
-- messages go in (ord, seq) order; ord is NULL for a row that keeps its own
-- seq, and a coalesced row (a storm, or the rate cap's "n more") takes its
-- first member's. Members of a coalesced row point at it (merged_into) and
-- are never sent themselves. last_error is the kind of the last failure
-- (timeout, refused, permanent, expired), never a URL or a secret.
CREATE TABLE alert_outbox (
    seq              INTEGER PRIMARY KEY,
    id               TEXT    NOT NULL UNIQUE,             -- ULID
    ord              INTEGER,
    alert_id         TEXT    REFERENCES alerts (id) ON DELETE CASCADE,
    sink             TEXT    NOT NULL,
    event            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    severity         TEXT    NOT NULL,
    subjects         TEXT    NOT NULL,                    -- JSON array of {kind, id}
    more             INTEGER NOT NULL DEFAULT 0,
    coalesced        INTEGER NOT NULL DEFAULT 0,          -- 1 for a storm or "n more" row
    title            TEXT    NOT NULL,
    body             TEXT    NOT NULL,
    at               INTEGER NOT NULL,                    -- when the condition changed
    created_at       INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_attempt_at INTEGER,
    next_attempt_at  INTEGER NOT NULL,
    delivered_at     INTEGER,
    expired_at       INTEGER,
    merged_into      TEXT,
    last_error       TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX alert_outbox_pending ON alert_outbox (sink, ord, seq)
    WHERE delivered_at IS NULL AND expired_at IS NULL AND merged_into IS NULL;
CREATE INDEX alert_outbox_sent ON alert_outbox (sink, first_attempt_at) WHERE first_attempt_at IS NOT NULL;
CREATE INDEX alert_outbox_alert ON alert_outbox (alert_id);

-- +goose Down
DROP TABLE alert_outbox;
DROP TABLE alert_mutes;
DROP TABLE alerts;
