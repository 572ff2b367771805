package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One holder at a time; DataDirLocked sees the holder without taking the
// lock; LockDataDir makes the dir owner-only.
func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if DataDirLocked(dir) {
		t.Fatal("locked before anyone took the lock")
	}
	unlock, err := LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %v, want 0700", fi.Mode().Perm())
	}
	if !DataDirLocked(dir) {
		t.Fatal("DataDirLocked does not see the holder")
	}
	if _, err := LockDataDir(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	unlock()
	if DataDirLocked(dir) {
		t.Fatal("still locked after unlock")
	}
	unlock2, err := LockDataDir(dir)
	if err != nil {
		t.Fatalf("relock: %v", err)
	}
	unlock2()
}

// TestLockedNamesTheHolder: the holder writes its pid in the lock file, and
// both the refused second lock and DataDirHolder name it (what serve says
// before it binds its port, docs/operations.md "Embedded default"); a lock
// file with no pid in it (an older holder) still refuses, without one.
func TestLockedNamesTheHolder(t *testing.T) {
	dir := t.TempDir()
	if pid, held := DataDirHolder(dir); held || pid != 0 {
		t.Fatalf("DataDirHolder before any lock = %d, %v; want 0, false", pid, held)
	}
	unlock, err := LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pid, held := DataDirHolder(dir); !held || pid != os.Getpid() {
		t.Fatalf("DataDirHolder = %d, %v; want %d, true", pid, held, os.Getpid())
	}
	_, err = LockDataDir(dir)
	var le *LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() || !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want a LockedError with pid %d", err, os.Getpid())
	}
	if want := fmt.Sprintf("(pid %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("second lock's message %q does not name %s", err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, LockFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if pid, held := DataDirHolder(dir); !held || pid != 0 {
		t.Fatalf("DataDirHolder with no pid recorded = %d, %v; want 0, true", pid, held)
	}
	if _, err := LockDataDir(dir); !errors.Is(err, ErrLocked) || err.Error() != ErrLocked.Error() {
		t.Fatalf("second lock with no pid recorded: %v, want ErrLocked's words", err)
	}
	unlock()
	if _, held := DataDirHolder(dir); held {
		t.Fatal("DataDirHolder sees a holder after unlock")
	}
}

// Abandon removes what AcquireDataDir created and nothing else: a lock file
// that existed stays, a directory holding anything stays, an existing
// directory gets its mode back.
func TestAbandonDataDirLock(t *testing.T) {
	t.Run("lock file that existed", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, LockFileName), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := AcquireDataDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		l.Abandon()
		if _, err := os.Stat(filepath.Join(dir, LockFileName)); err != nil {
			t.Fatalf("a lock file that existed was removed: %v", err)
		}
		if DataDirLocked(dir) {
			t.Fatal("still locked after Abandon")
		}
	})
	t.Run("made dir that gained a file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		l, err := AcquireDataDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kept"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		l.Abandon()
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 || entries[0].Name() != "kept" {
			t.Fatalf("after Abandon the dir holds %v (%v), want only kept", entries, err)
		}
	})
	t.Run("existing dir's mode restored", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		l, err := AcquireDataDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
			t.Fatalf("held data dir mode %v, want 0700", fi.Mode().Perm())
		}
		l.Abandon()
		if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
			t.Fatalf("after Abandon the data dir's mode is %v, want its own 0755 back", fi.Mode().Perm())
		}
	})
	t.Run("another holder", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		unlock, err := LockDataDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		if _, err := AcquireDataDir(dir); !errors.Is(err, ErrLocked) {
			t.Fatalf("second lock: %v, want ErrLocked", err)
		}
		if _, err := os.Stat(filepath.Join(dir, LockFileName)); err != nil {
			t.Fatalf("the holder's lock file is gone: %v", err)
		}
	})
}
