package storage

import (
	"errors"
	"sync"
	"time"
)

// Free-space guard defaults (docs/operations.md, "Quotas" and "Storage and
// the writer").
const (
	// MinFreeAuto is the CHALUPA_MIN_FREE_BYTES setting that means the
	// default rule: the larger of DefaultMinFreeFloor and
	// DefaultMinFreePercent of the filesystem (MinFreeFor).
	MinFreeAuto int64 = -1
	// DefaultMinFreeFloor is 1 GiB: room for the WAL a write storm grows
	// before Litestream checkpoints it (up to ~121,000 pages, ~470 MiB),
	// a restore point the next migration takes, and the operator's own
	// work (a `litestream restore`, a log file) on a small droplet disk.
	DefaultMinFreeFloor = 1 << 30
	// DefaultMinFreePercent is 5 % of the filesystem: on a large disk
	// 1 GiB goes in minutes under a flood, and filesystems slow down and
	// fragment as they fill.
	DefaultMinFreePercent = 5
	// DiskCheckInterval is how long a measurement of free space is
	// reused: at most one statfs every 5 s however many requests ask,
	// and a guard lifts within 5 s of space returning under traffic.
	DiskCheckInterval = 5 * time.Second
	// diskLiftFraction and maxDiskLiftMargin make the guard's lifting
	// margin (LiftMarginFor): once low, it lifts only when free space is
	// back to the floor plus 1/16 of it, at most 256 MiB (64 MiB for the
	// 1 GiB default). Free space near the floor moves by megabytes within
	// seconds — the WAL, Litestream's L0 files and their retention, other
	// processes' logs — and without a margin the guard would flip with each
	// measurement, recording a disk-low and a disk-low-lifted event (never
	// pruned) every few seconds and letting ingest in and out in turn.
	diskLiftFraction  = 16
	maxDiskLiftMargin = 256 << 20
)

// LiftMarginFor is how far above the floor minFree (bytes) free space must
// be before a guard that is low lifts (bytes): 1/16 of the floor, at most
// 256 MiB; 0 when the guard is off (docs/operations.md, "Quotas").
func LiftMarginFor(minFree uint64) uint64 {
	return min(minFree/diskLiftFraction, maxDiskLiftMargin)
}

// ErrStatfsUnsupported is returned by Statfs where the platform has no
// statfs: the guard then never refuses.
var ErrStatfsUnsupported = errors.New("free space cannot be measured on this platform")

// DiskSpace is one measurement of a filesystem, in bytes.
type DiskSpace struct {
	// Free is the space an unprivileged process may still use (statfs
	// f_bavail × f_bsize): blocks reserved for root are not counted.
	Free uint64
	// Total is the filesystem's size (f_blocks × f_bsize).
	Total uint64
}

// StatfsFunc measures the filesystem holding path (Statfs; tests inject
// their own).
type StatfsFunc func(path string) (DiskSpace, error)

// MinFreeFor is the free-space floor in bytes for a filesystem of total
// bytes: configured itself when it is 0 or more (0: the guard is off), else
// (MinFreeAuto) the larger of DefaultMinFreeFloor and DefaultMinFreePercent
// of total.
func MinFreeFor(configured int64, total uint64) uint64 {
	if configured >= 0 {
		return uint64(configured)
	}
	return max(uint64(DefaultMinFreeFloor), total/100*DefaultMinFreePercent)
}

// DiskState is what the guard last measured.
type DiskState struct {
	// FreeBytes and TotalBytes are the last measurement (0 when it
	// failed).
	FreeBytes, TotalBytes uint64
	// MinFreeBytes is the floor in force (MinFreeFor); 0 is off.
	MinFreeBytes uint64
	// Low is true once FreeBytes fell below MinFreeBytes, until it is
	// back to MinFreeBytes plus LiftMarginFor(MinFreeBytes): signed
	// ingest other than heartbeats is refused 503 disk_low.
	Low bool
	// LowSince is when Low last turned true (zero while not low).
	LowSince time.Time
	// Err is the measurement's failure ("" when it worked); the guard
	// never refuses on a failed measurement.
	Err string
}

// DiskGuard is the free-space guard on the data directory's filesystem
// (docs/operations.md, "Quotas"). Check is cheap enough for the request
// path: it reuses a measurement for DiskCheckInterval, so at most one
// statfs runs every 5 s however many requests ask, and nothing runs on a
// timer. A guard is safe for concurrent use.
type DiskGuard struct {
	path       string
	configured int64
	statfs     StatfsFunc
	interval   time.Duration
	now        func() time.Time
	// changed receives (coalesced) when Low turns on or off.
	changed chan struct{}

	mu       sync.Mutex
	state    DiskState
	measured time.Time // zero: never measured
}

// DiskGuardConfig configures NewDiskGuard.
type DiskGuardConfig struct {
	// Path is a path on the filesystem to watch (the data directory).
	Path string
	// MinFreeBytes is CHALUPA_MIN_FREE_BYTES: MinFreeAuto for the default
	// rule, 0 for off, else bytes.
	MinFreeBytes int64
	// Statfs measures; nil means Statfs.
	Statfs StatfsFunc
	// Interval is how long a measurement is reused; zero means
	// DiskCheckInterval, negative measures at every Check (tests).
	Interval time.Duration
	// Now is the monotonic clock the interval is measured on; nil means
	// time.Now.
	Now func() time.Time
}

// NewDiskGuard returns a guard; it measures at its first Check.
func NewDiskGuard(c DiskGuardConfig) *DiskGuard {
	g := &DiskGuard{path: c.Path, configured: c.MinFreeBytes, statfs: c.Statfs, interval: c.Interval, now: c.Now,
		changed: make(chan struct{}, 1)}
	if g.statfs == nil {
		g.statfs = Statfs
	}
	if g.interval == 0 {
		g.interval = DiskCheckInterval
	}
	if g.now == nil {
		g.now = time.Now
	}
	return g
}

// Check returns the guard's state, measuring again when the last
// measurement is older than the interval.
func (g *DiskGuard) Check() DiskState {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !g.measured.IsZero() && g.interval > 0 && now.Sub(g.measured) < g.interval {
		return g.state
	}
	return g.measureLocked(now)
}

// Refresh measures now, whatever the age of the last measurement, and
// returns the state.
func (g *DiskGuard) Refresh() DiskState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.measureLocked(g.now())
}

// Changed receives (coalesced) each time Low turns on or off: the
// storage-health loop records the event.
func (g *DiskGuard) Changed() <-chan struct{} { return g.changed }

func (g *DiskGuard) measureLocked(now time.Time) DiskState {
	g.measured = now
	sp, err := g.statfs(g.path)
	prev := g.state
	st := DiskState{FreeBytes: sp.Free, TotalBytes: sp.Total}
	if err != nil {
		// A failed measurement refuses nothing: the guard exists to keep
		// room, never to stop ingest on a fault of its own.
		st = DiskState{Err: FaultKind(err)}
		if st.Err == "" {
			st.Err = "statfs failed"
		}
		if errors.Is(err, ErrStatfsUnsupported) {
			st.Err = ErrStatfsUnsupported.Error()
		}
	} else {
		st.MinFreeBytes = MinFreeFor(g.configured, sp.Total)
		// Low below the floor; once low, until the floor plus its lifting
		// margin, so free space that hovers at the floor does not flip
		// the guard at every measurement.
		st.Low = sp.Free < st.MinFreeBytes || (prev.Low && sp.Free < st.MinFreeBytes+LiftMarginFor(st.MinFreeBytes))
	}
	switch {
	case st.Low && prev.Low:
		st.LowSince = prev.LowSince
	case st.Low:
		st.LowSince = now
	}
	g.state = st
	if st.Low != prev.Low {
		select {
		case g.changed <- struct{}{}:
		default:
		}
	}
	return st
}
