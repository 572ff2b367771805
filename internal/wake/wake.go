// Package wake is a coalesced wake-up with a threshold, between a producer
// of deadlines (signed ingest) and a loop that sleeps until the earliest
// one (the reaper): the loop publishes when it will wake on its own, and
// the producer signals only for a deadline earlier than that, so the hot
// path costs one atomic load and the loop wakes for nothing else
// (docs/operations.md, "Reaper").
package wake

import (
	"math"
	"sync/atomic"
	"time"
)

// Threshold is the signal. The zero value is not usable; call New. It is
// safe for concurrent use.
type Threshold struct {
	ch    chan struct{}
	until atomic.Int64 // unix ms the loop wakes at on its own; MaxInt64: signal everything
}

// New returns a Threshold that signals every Notify until the loop
// publishes a wake-up time with SleepUntil.
func New() *Threshold {
	t := &Threshold{ch: make(chan struct{}, 1)}
	t.until.Store(math.MaxInt64)
	return t
}

// C receives one value per burst of signals (coalesced: one is held at
// most).
func (t *Threshold) C() <-chan struct{} { return t.ch }

// SleepUntil publishes the time the loop wakes at on its own; the zero time
// means it will not wake on its own (or is about to re-read its state), so
// every Notify signals. The loop calls SleepUntil(time.Time{}) before it
// reads the state its wake-up is computed from, and SleepUntil(at) after:
// a deadline written after that read is then never missed.
func (t *Threshold) SleepUntil(at time.Time) {
	if at.IsZero() {
		t.until.Store(math.MaxInt64)
		return
	}
	t.until.Store(at.UnixMilli())
}

// Notify signals the loop when at is before the time it wakes at on its
// own, and reports whether it did. Call it after the deadline at is
// durable (committed).
func (t *Threshold) Notify(at time.Time) bool {
	if at.UnixMilli() >= t.until.Load() {
		return false
	}
	select {
	case t.ch <- struct{}{}:
	default:
	}
	return true
}
