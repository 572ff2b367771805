package ingest

import (
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Nonce holding rule (docs/operations.md, "Signed ingest", nonces).
const (
	// NonceHold is how long a nonce is kept at least, on both clocks: held
	// that long by the monotonic clock, and signed that long before wall
	// time. The skew window (300 s) plus a 60 s margin: a request is
	// refused for its timestamp before its nonce could be forgotten.
	NonceHold = SkewWindow + pruneMargin
	// ledgerBucket is the monotonic width of one ledger bucket: a nonce is
	// held up to one bucket longer than NonceHold, and the ledger's memory
	// is NonceHold/ledgerBucket + 2 buckets.
	ledgerBucket = 10 * time.Second
	// ledgerBuckets covers NonceHold plus the bucket being filled and the
	// one being left: 38 buckets of 16 bytes.
	ledgerBuckets = int(NonceHold/ledgerBucket) + 2
)

// NonceLedger lets the nonce pruner hold every nonce at least NonceHold by
// the monotonic clock, whatever the wall clock does (docs/operations.md,
// "Signed ingest"). The nonces table stores only the signed timestamp, so
// the ledger remembers, per 10 s of process time, the earliest signed
// timestamp of the nonces claimed then: every nonce claimed in the last
// NonceHold of process time is signed at or after the earliest of those, so
// the pruner deletes only nonces signed before it. Nonces of an earlier
// process are held until this one has run NonceHold. Memory is fixed
// (ledgerBuckets); the zero value is not usable: NewNonceLedger.
type NonceLedger struct {
	mono  clockwork.Clock
	start time.Time

	mu      sync.Mutex
	buckets [ledgerBuckets]ledgerSlot

	// mark is the service's high-water mark (nil: none): the pruner then
	// also holds every nonce not yet below the persisted mark minus
	// SkewWindow (NoncePruner).
	mark ClockMark
}

// ledgerSlot is one bucket: its index (process time / ledgerBucket) and the
// earliest signed timestamp claimed in it, in unix milliseconds.
type ledgerSlot struct {
	index    int64
	earliest int64
	used     bool
}

// NewNonceLedger returns a ledger whose process time starts now on mono.
// mono must be a monotonic clock: the real clock (nil) reads Go's
// monotonic time; tests pass a fake clock and move the wall clock apart
// from it.
func NewNonceLedger(mono clockwork.Clock) *NonceLedger {
	if mono == nil {
		mono = clockwork.NewRealClock()
	}
	return &NonceLedger{mono: mono, start: mono.Now()}
}

// elapsed is the ledger's process time, never negative: a clock that is
// not monotonic (a test's fake clock set back) must not index a bucket
// before the first.
func (l *NonceLedger) elapsed() time.Duration { return max(l.mono.Since(l.start), 0) }

// Claimed records a nonce signed at signedAt, claimed now. Ingest calls it
// inside the claim's writer unit, before the commit: a unit that rolls back
// leaves only a more cautious record.
func (l *NonceLedger) Claimed(signedAt time.Time) {
	idx := int64(l.elapsed() / ledgerBucket)
	ms := signedAt.UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.buckets[idx%int64(ledgerBuckets)]
	if !s.used || s.index != idx {
		*s = ledgerSlot{index: idx, earliest: ms, used: true}
		return
	}
	s.earliest = min(s.earliest, ms)
}

// Cutoff is the pruner's bound at wall time now: a nonce may be deleted
// only when it was signed before the returned time. ok is false while the
// process is younger than NonceHold (a nonce of the previous process may
// have been claimed a moment before it stopped): nothing may be deleted.
// The bound is the earlier of now − NonceHold (the wall rule) and the
// earliest signed timestamp claimed within the last NonceHold of process
// time (the monotonic rule). Call it inside the writer unit that deletes,
// so no claim can come between the bound and the delete.
func (l *NonceLedger) Cutoff(now time.Time) (cutoff time.Time, ok bool) {
	e := l.elapsed()
	if e < NonceHold {
		return time.Time{}, false
	}
	cut := now.Add(-NonceHold).UnixMilli()
	oldest := int64((e - NonceHold) / ledgerBucket) // the bucket that may hold a claim NonceHold ago
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.buckets {
		if s.used && s.index >= oldest {
			cut = min(cut, s.earliest)
		}
	}
	return time.UnixMilli(cut), true
}
