package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// Storage health (docs/operations.md, "Storage and the writer" and
// "Quotas").
const (
	// storageProbeInterval is how often the storage-health loop writes its
	// probe while commits fail: readiness turns green within 10 s of
	// storage returning on an idle daemon, for one tiny write per 10 s
	// during an outage. With traffic, the first request that commits
	// clears the state sooner.
	storageProbeInterval = 10 * time.Second
	// probeMinFreeBytes is the free space below which the probe does not
	// even try to write: a batch appends pages to the WAL and Litestream
	// copies them, so under 1 MiB the next real batch would fail again.
	probeMinFreeBytes = 1 << 20
	// diskLowRecheck is how often the loop measures free space while the
	// disk_low guard holds, so it lifts (and its event is recorded) with no
	// traffic at all; once a minute, like replication's idle check. While
	// the guard is off there is no timer.
	diskLowRecheck = time.Minute
	// diskLowRetryAfter is the Retry-After of a 503 disk_low, in seconds:
	// space returns when the operator makes room, not in seconds.
	diskLowRetryAfter = 60
	// StorageHealthLoop is the loop's name in logs.
	StorageHealthLoop = "storage-health"
)

// Lifecycle event kinds of the free-space guard (platform events).
const (
	// DiskLowKind is recorded when the guard starts refusing.
	DiskLowKind = "disk-low"
	// DiskLowLiftedKind is recorded when it lifts.
	DiskLowLiftedKind = "disk-low-lifted"
)

// diskLowRefusal is the answer to signed ingest other than heartbeats while
// the free-space guard holds; nothing is read past authentication and
// nothing is written, not even the nonce.
func diskLowRefusal() ingest.Response {
	return ingest.Response{Status: http.StatusServiceUnavailable, Refusal: &ingest.Refusal{
		Status: http.StatusServiceUnavailable, Code: "disk_low", RetryAfter: diskLowRetryAfter,
		Message: "the server's disk is nearly full: only heartbeats are accepted until the operator makes room; retry later",
	}}
}

// writeStorageUnavailable answers 503 storage_unavailable with Retry-After
// (an admin write that failed for storage reasons).
func writeStorageUnavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(ingest.StorageRetryAfter))
	writeError(w, http.StatusServiceUnavailable, "storage_unavailable", "the server cannot store writes right now; retry later")
}

// storageHealth is the storage-health loop. It has no timer while storage
// works and the disk has room: it waits for the writer to turn failing or
// the free-space guard to change. While commits fail it probes every
// storageProbeInterval (free space, then one tiny write); while the guard
// holds it measures every diskLowRecheck. It records the guard's disk-low
// and disk-low-lifted events and logs each change of the writer's state
// once. Never paused: it keeps readiness honest (docs/operations.md,
// "Background loops").
type storageHealth struct {
	db    *storage.DB
	disk  *storage.DiskGuard
	clock clockwork.Clock
	log   zerolog.Logger
	// alerts reports storage-unavailable and disk-low to the alerter
	// (nil: not reported; docs/operations.md, "Alerts").
	alerts *storageAlerts

	// recorded is the guard state the last event said (false at start:
	// a guard that holds at start is recorded then).
	recorded bool
	// failingLogged is whether the current run of faults was logged.
	failingLogged bool
}

// storageTick is what one tick did.
type storageTick struct {
	// Failing is whether the writer still fails after the tick.
	Failing bool
	// Probed is whether the probe wrote; Recovered whether that (or
	// another commit) ended a run of faults.
	Probed, Recovered bool
	// Unavailable is storage-unavailable as the tick reported it: the
	// writer fails, or it last failed and no probe has committed since.
	Unavailable bool
	// Disk is the guard's state as measured by the tick.
	Disk storage.DiskState
	// Event is the kind of the event recorded, "" for none.
	Event string
}

// Name implements Loop.
func (l *storageHealth) Name() string { return StorageHealthLoop }

// Tick measures free space, records a guard event when the guard changed
// since the last one, and while the writer fails logs the fault once and
// probes: when at least probeMinFreeBytes are free, one write of the
// storage_probe row, whose commit ends the failing state. Errors: the
// event's write (the probe's failure is the state it reports, not an
// error).
func (l *storageHealth) Tick(ctx context.Context) (storageTick, error) {
	var res storageTick
	res.Disk = l.disk.Refresh()
	var evErr error
	if res.Disk.Low != l.recorded {
		kind := DiskLowKind
		msg := fmt.Sprintf("free space on the data directory's filesystem is %d bytes, below CHALUPA_MIN_FREE_BYTES (%d bytes): signed ingest other than heartbeats is refused 503 disk_low until space returns",
			res.Disk.FreeBytes, res.Disk.MinFreeBytes)
		if !res.Disk.Low {
			kind = DiskLowLiftedKind
			msg = fmt.Sprintf("free space on the data directory's filesystem is back to %d bytes (floor %d bytes): signed ingest is accepted again",
				res.Disk.FreeBytes, res.Disk.MinFreeBytes)
		}
		now := l.clock.Now()
		evErr = l.db.Writer.Do(ctx, func(tx storage.Tx) error {
			_, err := storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{
				ID: fmt.Sprintf("%s:%d", kind, now.UnixMilli()), Kind: kind, Message: msg, OccurredAt: now,
			})
			return err
		})
		if evErr == nil {
			l.recorded, res.Event = res.Disk.Low, kind
			ev := l.log.Warn()
			if kind == DiskLowLiftedKind {
				ev = l.log.Info()
			}
			ev.Uint64("free_bytes", res.Disk.FreeBytes).Uint64("min_free_bytes", res.Disk.MinFreeBytes).Msg(msg)
		} else {
			evErr = fmt.Errorf("record %s event: %w", kind, evErr)
		}
	}
	h := l.db.Writer.StorageHealth()
	if h.Failing && !l.failingLogged {
		l.failingLogged = true
		l.log.Error().Str("fault", h.LastFault).Time("since", h.Since).
			Msg("storage failing: writes are answered 503 storage_unavailable and /api/ready 503 until a commit succeeds")
	}
	if h.Failing && (res.Disk.Err != "" || res.Disk.FreeBytes >= probeMinFreeBytes) {
		res.Probed = true
		_ = l.db.Writer.Do(ctx, func(tx storage.Tx) error { return storage.WriteStorageProbe(ctx, tx, l.clock.Now()) })
		h = l.db.Writer.StorageHealth()
	}
	res.Failing = h.Failing
	if !h.Failing && l.failingLogged {
		l.failingLogged, res.Recovered = false, true
		l.log.Info().Str("fault", h.LastFault).Msg("storage works again: writes are accepted and /api/ready follows replication")
	}
	// The conditions as this tick found them: while the database refuses
	// writes the alerter holds them in memory and sends them directly.
	res.Unavailable = h.Failing
	if !h.Failing && l.alerts.holds(alerts.KindStorageUnavailable) {
		// A COMMIT that wrote nothing (a transaction that only read)
		// also ends the writer's failing state, on a disk that still
		// refuses every real write: storage-unavailable ends only at
		// the probe's commit, which writes a row, and not while less
		// than probeMinFreeBytes are free (docs/operations.md, "Alerts").
		res.Unavailable = true
		if res.Disk.Err != "" || res.Disk.FreeBytes >= probeMinFreeBytes {
			res.Probed = true
			res.Unavailable = l.db.Writer.Do(ctx, func(tx storage.Tx) error { return storage.WriteStorageProbe(ctx, tx, l.clock.Now()) }) != nil
		}
	}
	detail := ""
	if res.Unavailable {
		detail = storageDetail(l.db.Writer.StorageHealth())
	}
	l.alerts.report(ctx, alerts.KindStorageUnavailable, res.Unavailable, detail)
	detail = ""
	if res.Disk.Low {
		detail = diskDetail(res.Disk)
	}
	l.alerts.report(ctx, alerts.KindDiskLow, res.Disk.Low, detail)
	return res, evErr
}

// Run ticks until ctx ends, then returns nil.
func (l *storageHealth) Run(ctx context.Context) error {
	for {
		res, err := l.Tick(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			l.log.Error().Err(err).Str("loop", l.Name()).Msg("storage health tick failed")
		}
		var wait <-chan time.Time
		switch {
		case res.Failing || res.Unavailable:
			wait = l.clock.After(storageProbeInterval)
		case res.Disk.Low || l.recorded != res.Disk.Low:
			wait = l.clock.After(diskLowRecheck)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.db.Writer.FailingSignal():
		case <-l.disk.Changed():
		case <-wait:
		}
	}
}
