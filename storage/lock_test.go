package storage

import (
	"errors"
	"os"
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
