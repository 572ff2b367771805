-- +goose Up
-- The console's sign-in (docs/operations.md, "Console"): one operator
-- password, sessions stored by the SHA-256 of their opaque id (a copy of
-- the database never holds a usable cookie), and failed logins, stored so
-- the login rate limit survives a restart.
CREATE TABLE console_password (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    password_hash TEXT    NOT NULL,
    set_at        INTEGER NOT NULL
) STRICT;

CREATE TABLE console_sessions (
    id_hash      BLOB    PRIMARY KEY,
    csrf_token   TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE console_login_failures (
    id     INTEGER PRIMARY KEY,
    source TEXT    NOT NULL,
    at     INTEGER NOT NULL
) STRICT;

CREATE INDEX console_login_failures_source ON console_login_failures (source, at);
CREATE INDEX console_login_failures_at ON console_login_failures (at);

-- +goose Down
DROP TABLE console_login_failures;
DROP TABLE console_sessions;
DROP TABLE console_password;
