package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Storage fault kinds (FaultKind): the cause of a write that failed because
// the disk under the database could not take it (docs/operations.md,
// "Storage and the writer"). They are what `admin status`, /metrics and the
// log show; an error body says only storage_unavailable.
const (
	// FaultDiskFull is SQLITE_FULL, ENOSPC or EDQUOT: no space (or quota)
	// left on the data directory's filesystem.
	FaultDiskFull = "disk full"
	// FaultIO is SQLITE_IOERR (any extended code) or EIO: the device
	// failed a read, write or fsync.
	FaultIO = "i/o error"
	// FaultReadOnly is SQLITE_READONLY (any extended code) or EROFS: the
	// filesystem was remounted read-only, or the file cannot be written.
	FaultReadOnly = "read-only"
)

// FaultKind classifies err as a storage fault: FaultDiskFull, FaultIO or
// FaultReadOnly, or "" when err is anything else (a refusal, a constraint, a
// bug, a cancelled context). It looks at error codes, never at text: a
// modernc.org/sqlite *sqlite.Error by its primary result code, then the
// errno of a Go file operation (*os.PathError, syscall.Errno) anywhere in
// err's chain.
func FaultKind(err error) string {
	if err == nil {
		return ""
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			return FaultDiskFull
		case sqlite3.SQLITE_IOERR:
			return FaultIO
		case sqlite3.SQLITE_READONLY:
			return FaultReadOnly
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return FaultDiskFull
	case errors.Is(err, syscall.EIO):
		return FaultIO
	case errors.Is(err, syscall.EROFS):
		return FaultReadOnly
	}
	return ""
}

// IsStorageFault reports whether err is a storage fault (FaultKind is not
// ""): the daemon answers it 503 storage_unavailable with Retry-After, never
// 500 internal (docs/operations.md, "HTTP surface and errors").
func IsStorageFault(err error) bool { return FaultKind(err) != "" }

// StorageHealth is whether the writer's commits are failing for storage
// reasons (docs/operations.md, "Storage and the writer").
type StorageHealth struct {
	// Failing is true from the first storage fault until a COMMIT that
	// wrote something succeeds again (a request's or the probe's).
	Failing bool
	// Since is when the current run of faults began (wall clock; zero
	// while not failing).
	Since time.Time
	// LastFault is the kind of the last fault (FaultKind), and LastFaultAt
	// its time; they stay after recovery.
	LastFault   string
	LastFaultAt time.Time
	// Faults counts the writer's batches (BEGIN, unit or COMMIT) that met
	// a storage fault since start.
	Faults int64
}

// writerHealth is the writer's StorageHealth and the signal the
// storage-health loop waits on.
type writerHealth struct {
	mu sync.Mutex
	h  StorageHealth
	// failing receives (coalesced) when the writer turns failing.
	failing chan struct{}
}

// fault records a storage fault of kind at now.
func (wh *writerHealth) fault(kind string, now time.Time) {
	wh.mu.Lock()
	turned := !wh.h.Failing
	if turned {
		wh.h.Failing, wh.h.Since = true, now
	}
	wh.h.LastFault, wh.h.LastFaultAt = kind, now
	wh.h.Faults++
	wh.mu.Unlock()
	if turned {
		select {
		case wh.failing <- struct{}{}:
		default:
		}
	}
}

// healthy records a COMMIT that wrote something.
func (wh *writerHealth) healthy() {
	wh.mu.Lock()
	wh.h.Failing, wh.h.Since = false, time.Time{}
	wh.mu.Unlock()
}

// Failing reports whether the writer's commits are failing for storage
// reasons (disk full, I/O error, read-only file system) and since when
// (wall clock). It turns true at the first such fault and false again at the
// next COMMIT that wrote something. Readiness (/api/ready) answers 503 while
// it is true; the reaper holds idle destruction then, because a deadline
// that could not move while chalupa could not store heartbeats is not
// evidence (docs/operations.md, "Storage and the writer" and "Reaper"). It
// takes one mutex and does no I/O.
func (w *Writer) Failing() (since time.Time, failing bool) {
	w.health.mu.Lock()
	defer w.health.mu.Unlock()
	return w.health.h.Since, w.health.h.Failing
}

// StorageHealth returns the writer's storage health with the last fault's
// kind and the fault count, for `admin status`, /metrics and the log.
func (w *Writer) StorageHealth() StorageHealth {
	w.health.mu.Lock()
	defer w.health.mu.Unlock()
	return w.health.h
}

// FailingSignal receives (coalesced, never blocking the writer) each time
// the writer turns failing: the storage-health loop waits on it instead of
// a timer while storage works.
func (w *Writer) FailingSignal() <-chan struct{} { return w.health.failing }

// noteBatch updates the writer's health after a batch: a storage fault in
// BEGIN, a unit or COMMIT marks it failing; a COMMIT that carried at least
// one unit that changed a row (wrote; so appended to the WAL and fsynced)
// marks it healthy. A COMMIT of units that changed nothing writes no page
// and proves nothing: on a full disk it still succeeds.
func (w *Writer) noteBatch(errs []error, committed bool, wrote int) {
	for _, err := range errs {
		if kind := FaultKind(err); kind != "" {
			w.health.fault(kind, time.Now())
			return
		}
	}
	if committed && wrote > 0 {
		w.health.healthy()
	}
}

// WriteStorageProbe rewrites the one storage_probe row with at: the
// smallest real write, committed by the storage-health loop while the
// writer is failing (docs/operations.md, "Storage and the writer").
func WriteStorageProbe(ctx context.Context, q Querier, at time.Time) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO storage_probe (id, probed_at) VALUES (1, ?)
		 ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at`, ms(at)); err != nil {
		return fmt.Errorf("write storage probe: %w", err)
	}
	return nil
}
