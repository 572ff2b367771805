package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DefaultBusyTimeout is how long a connection waits on a lock before SQLITE_BUSY.
// Litestream briefly takes locks to checkpoint and copy WAL frames; five
// seconds rides those out without surfacing errors to requests.
const DefaultBusyTimeout = 5 * time.Second

// DefaultReadConns bounds the read pool. Reads in WAL mode do not block the
// writer, but each connection holds a page cache; a few cover the admin API and
// console on a small droplet.
var DefaultReadConns = max(2, runtime.NumCPU())

// DB is the opened database: one write connection and a bounded read pool over
// the same file. All writes go through Writer so that exactly one connection
// ever holds the write lock (SQLite allows one writer; queuing in Go is cheaper
// and fairer than spinning on SQLITE_BUSY).
type DB struct {
	// Path is the database file path.
	Path string
	// Read is the read-only pool (PRAGMA query_only), for queries outside a write.
	Read *sql.DB
	// write is the single write connection; only Writer uses it.
	write *sql.DB
	// Writer serializes and group-commits every write.
	Writer *Writer
}

// WALAutocheckpointPages is the write connection's wal_autocheckpoint: the
// WAL size, in pages, at which SQLite itself checkpoints after a commit.
// Litestream owns checkpointing and holds a read lock that keeps SQLite's
// own checkpoint from finishing, so at SQLite's default of 1,000 pages the
// writer retried (and re-sorted the whole WAL) after every commit. 10,000
// pages (about 40 MB at 4 KiB pages) is two and a half times the size at
// which Litestream checkpoints (checkpointPages, 4,000; syncs run every
// 100 ms under load, so the WAL never gets near 10,000 between two), so
// SQLite does not checkpoint under Litestream's feet, yet it still bounds
// the WAL if Litestream stops. Never 0: turning the automatic checkpoint off
// has silently stopped replication in some Litestream 0.5.x versions
// (benbjohnson/litestream#1083). See docs/operations.md, "Storage and the
// writer".
const WALAutocheckpointPages = 10000

// dsn builds the modernc.org/sqlite DSN for path. Pragmas go in the DSN so they
// apply to every pooled connection (an Exec("PRAGMA …") reaches only one).
// busy_timeout comes first: setting journal_mode needs a lock, and without a
// busy timeout already in force that first statement fails at once with
// SQLITE_BUSY whenever Litestream holds the lock. The write connection sets
// wal_autocheckpoint to WALAutocheckpointPages (not SQLite's default, never
// 0); the read pool never commits, so the setting does not matter there.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", DefaultBusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(wal)")
	// FULL: the WAL is fsynced at every commit, so an acknowledged write
	// survives power loss, not only a process crash. The writer's group
	// commit pays one fsync per batch, not per request.
	q.Add("_pragma", "synchronous(full)")
	q.Add("_pragma", "foreign_keys(on)")
	if readOnly {
		q.Add("_pragma", "query_only(on)")
	} else {
		// A write transaction takes the write lock when it begins, so a busy
		// database is waited on by busy_timeout instead of failing on upgrade.
		q.Set("_txlock", "immediate")
		// SQLite's own checkpoint as a backstop only (see
		// WALAutocheckpointPages).
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", WALAutocheckpointPages))
	}
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating if needed) the database at path with chalupa's pragmas,
// and starts its writer. The caller applies migrations (Migrate) before use and
// calls Close when done. Errors: the directory cannot be created, the file cannot
// be opened, or the pragmas do not take (for example journal_mode is not WAL).
func Open(ctx context.Context, path string) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	// A file restored by hand may be 0644; SQLite creates -wal and -shm with
	// the database's mode, so restrict all three before opening.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("restrict database file mode: %w", err)
		}
	}
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)

	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	if mode != "wal" {
		_ = w.Close()
		return nil, fmt.Errorf("open database: journal_mode is %q, want wal", mode)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("restrict database file mode: %w", err)
	}

	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open read pool: %w", err)
	}
	r.SetMaxOpenConns(DefaultReadConns)
	r.SetMaxIdleConns(DefaultReadConns)

	// The writer polls BEGIN itself (see busyPoll): SQLite's busy handler on
	// the write connection would only add sleep on top of the lock holder's
	// time. The DSN's busy_timeout stays first for the journal_mode pragma.
	if _, err := w.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		_ = w.Close()
		_ = r.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}

	db := &DB{Path: path, Read: r, write: w}
	db.Writer = newWriter(w)
	return db, nil
}

// Close stops the writer (waiting for queued writes) and closes both pools.
// Litestream's store must be closed after this, never before (its final sync
// needs the application's connections gone; see Replicator.Close).
func (db *DB) Close() error {
	if db.Writer == nil { // read-only
		return db.Read.Close()
	}
	db.Writer.close()
	rerr := db.Read.Close()
	werr := db.write.Close()
	if werr != nil {
		return fmt.Errorf("close database: %w", werr)
	}
	if rerr != nil {
		return fmt.Errorf("close read pool: %w", rerr)
	}
	return nil
}

// Size returns the database file size plus its WAL, in bytes.
func (db *DB) Size() int64 {
	var n int64
	for _, p := range []string{db.Path, db.Path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// Ping checks that the database answers a read.
func (db *DB) Ping(ctx context.Context) error {
	var one int
	if err := db.Read.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// OpenReadOnly opens an existing database for reading only (for `chalupa
// migrate status` and `config check`); it never creates or writes the file.
// Errors: the file does not exist or cannot be opened.
func OpenReadOnly(ctx context.Context, path string) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	r, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)&_pragma=query_only(on)")
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	r.SetMaxOpenConns(1)
	if err := r.PingContext(ctx); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	return &DB{Path: path, Read: r}, nil
}

// IntegrityCheck runs PRAGMA integrity_check on the database file at path
// (opened read-only on its own connection) and returns nil only when SQLite
// answers "ok".
func IntegrityCheck(ctx context.Context, path string) error {
	c, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return fmt.Errorf("open for integrity check: %w", err)
	}
	defer c.Close()
	var res string
	if err := c.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if res != "ok" {
		return fmt.Errorf("integrity check: %s", res)
	}
	return nil
}
