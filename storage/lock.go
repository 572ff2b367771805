package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrLocked is returned by LockDataDir when another process holds the lock.
var ErrLocked = errors.New("another chalupa process is using this data dir")

// LockFileName is the advisory lock file in the data dir.
const LockFileName = "chalupa.lock"

// LockDataDir takes an exclusive advisory lock (flock) on the data dir so
// that exactly one process (serve, or an offline command such as rewrap)
// writes the database: chalupa's single-writer design and Litestream both
// assume it. The lock is released by the returned func or when the process
// exits, even on SIGKILL. Errors: ErrLocked.
func LockDataDir(dir string) (func(), error) {
	if err := mkdirPrivate(dir); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	// A data dir made by hand (say, for a restore) may be world-readable;
	// it holds the database and its replica staging files.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restrict data dir mode: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, LockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// DataDirLocked reports whether another process holds dir's lock, without
// creating or changing anything (for `chalupa config check`).
func DataDirLocked(dir string) bool {
	f, err := os.Open(filepath.Join(dir, LockFileName))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
