package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked is returned by LockDataDir when another process holds the lock;
// the error returned is a *LockedError naming the holder's pid when the
// lock file records it (errors.Is(err, ErrLocked) holds either way).
var ErrLocked = errors.New("another chalupa process is using this data dir")

// LockedError is ErrLocked with the holder's process id, read from the lock
// file (the holder writes its pid there once it holds the lock).
type LockedError struct {
	// PID is the holder's process id; 0 when the lock file records none
	// (a holder from a release before the pid was recorded).
	PID int
}

// Error names the holder's pid when known, and how to stop it.
func (e *LockedError) Error() string {
	if e.PID == 0 {
		return ErrLocked.Error()
	}
	return fmt.Sprintf("another chalupa process (pid %d) is using this data dir: stop it first, or set CHALUPA_DATA_DIR to another directory", e.PID)
}

// Is makes errors.Is(err, ErrLocked) true for a *LockedError.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// DataDirHolder reports whether another process holds dir's lock and, if
// so, its pid (0 when the lock file records none), without creating or
// changing anything: serve checks it before it binds its port, so that a
// second serve on a data dir names the holder rather than the port it also
// holds (docs/operations.md, "Embedded default"). A missing data dir or lock
// file is not held.
func DataDirHolder(dir string) (pid int, held bool) {
	path := filepath.Join(dir, LockFileName)
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return readLockPID(path), true
		}
		return 0, false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return 0, false
}

// readLockPID is the pid a holder wrote in the lock file, 0 when it holds
// none (empty, or not a positive number).
func readLockPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// LockFileName is the advisory lock file in the data dir.
const LockFileName = "chalupa.lock"

// LockDataDir takes an exclusive advisory lock (flock) on the data dir so
// that exactly one process (serve, or an offline command such as rewrap)
// writes the database: chalupa's single-writer design and Litestream both
// assume it. The lock is released by the returned func or when the process
// exits, even on SIGKILL. The holder's pid is written in the lock file for
// the next one's refusal (LockedError). Errors: those of AcquireDataDir.
func LockDataDir(dir string) (func(), error) {
	l, err := AcquireDataDir(dir)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// DataDirLock is a held data-dir lock, remembering what taking it created
// so that a start refused before writing anything can take it back.
type DataDirLock struct {
	f *os.File
	// made lists what AcquireDataDir created, innermost first: the lock
	// file, then each directory MkdirAll made (the data dir, and parents
	// that did not exist).
	made []string
	// dir and mode are the existing data dir and its mode before it was
	// made owner-only (mode 0 when AcquireDataDir created it), restored
	// by Abandon.
	dir  string
	mode os.FileMode
}

// AcquireDataDir is LockDataDir returning the lock itself: the data dir is
// created (owner only) when missing, made owner-only when it exists, and
// its chalupa.lock taken, with this process's pid written in it. Errors: a
// *LockedError (errors.Is ErrLocked) naming the holder's pid when another
// process holds the lock; a filesystem error otherwise, after removing what
// it created.
func AcquireDataDir(dir string) (*DataDirLock, error) {
	l := &DataDirLock{}
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	if err := mkdirPrivate(dir); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	l.made = missing
	if len(missing) == 0 {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm() != 0o700 {
			l.dir, l.mode = dir, fi.Mode().Perm()
		}
	}
	// A data dir made by hand (say, for a restore) may be world-readable;
	// it holds the database and its replica staging files.
	if err := os.Chmod(dir, 0o700); err != nil {
		l.Abandon()
		return nil, fmt.Errorf("restrict data dir mode: %w", err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		l.made = append([]string{path}, l.made...)
	} else if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, os.O_RDWR, 0o600)
	}
	if err != nil {
		l.Abandon()
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		// Another holder: the lock file is its too now.
		if len(l.made) > 0 && l.made[0] == path {
			l.made = l.made[1:]
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{PID: readLockPID(path)}
		}
		l.Abandon()
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	l.f = f
	// The pid is for the next process's refusal only; a lock file that
	// cannot take it still locks.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return l, nil
}

// Release releases the lock, leaving the data dir as it is.
func (l *DataDirLock) Release() {
	if l.f != nil {
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

// Abandon removes what AcquireDataDir created — the lock file, and the
// data dir (with parents it made) when it made it and it is empty, or the
// existing data dir's mode when it made it owner-only — then releases the
// lock: a start refused before writing anything leaves the filesystem as
// it found it (docs/operations.md, "Backup and restore"). A directory that
// holds anything else is left; so is everything that existed before.
func (l *DataDirLock) Abandon() {
	for _, p := range l.made {
		if err := os.Remove(p); err != nil {
			break
		}
	}
	if l.dir != "" {
		_ = os.Chmod(l.dir, l.mode)
		l.dir = ""
	}
	l.made = nil
	l.Release()
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
