package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHoldReadPinsTheWAL holds a read transaction with holdRead on a real
// WAL-mode file while another connection writes and checkpoints: the WAL
// cannot be checkpointed past the reader's snapshot, so it grows; once the
// reader lets go, a checkpoint resets it.
func TestHoldReadPinsTheWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chalupa.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(wal)&_pragma=busy_timeout(100)&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE heartbeats (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`)
	write := func(n int) {
		for range n {
			exec(`INSERT INTO heartbeats (body) VALUES (?)`, strings.Repeat("x", 2000))
		}
	}
	walSize := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	write(50)
	rows, release, err := holdRead(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if rows != 50 {
		t.Errorf("the reader's snapshot has %d rows, want 50", rows)
	}
	var busy, logFrames, checkpointed int
	if err := db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logFrames, &checkpointed); err != nil {
		t.Fatal(err)
	}
	held := walSize()
	write(200)
	if err := db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logFrames, &checkpointed); err != nil {
		t.Fatal(err)
	}
	if grown := walSize(); grown <= held || checkpointed >= logFrames {
		t.Errorf("with the reader held: WAL %d → %d bytes, checkpoint log=%d done=%d; want it pinned", held, grown, logFrames, checkpointed)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &checkpointed); err != nil {
		t.Fatal(err)
	}
	if busy != 0 || walSize() != 0 {
		t.Errorf("after the reader let go: checkpoint busy=%d, WAL %d bytes; want it truncated", busy, walSize())
	}
}
