package storage

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// TestCommitDelayIsPerCommit: the commit → replica hook hears every commit
// a sync confirmed, each with its own wait (not its 100 ms group's first
// commit); past the stamp cap the later commits are measured from the
// last stamp kept (overstated, never understated), and exact stamping
// resumes with the first commit after them.
func TestCommitDelayIsPerCommit(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	r := &Replicator{
		clock: clock, log: slog.New(slog.DiscardHandler), notify: make(chan struct{}, 1),
		stampsFrom: 1, stampCap: 3, epoch: clock.Now(),
	}
	var got []time.Duration
	r.SetReplicatedHook(func(d time.Duration) { got = append(got, d) })
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	check := func(what string, want []time.Duration) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: delays %v, want %v", what, got, want)
		}
		got = nil
	}

	// Three commits 20 ms apart (one lag marker), confirmed 50 ms after
	// the last: each is measured from its own commit.
	r.Committed()
	clock.Advance(20 * time.Millisecond)
	r.Committed()
	clock.Advance(20 * time.Millisecond)
	r.Committed()
	clock.Advance(50 * time.Millisecond)
	r.succeeded(2, 1) // a sync that started before the third commit
	check("first two", ms(90, 70))
	clock.Advance(10 * time.Millisecond)
	r.succeeded(3, 2)
	check("the third", ms(60))

	// Five commits 10 ms apart with room for three stamps: the fourth and
	// fifth are measured from the third's time.
	for range 5 {
		r.Committed()
		clock.Advance(10 * time.Millisecond)
	}
	r.succeeded(7, 3) // commits 4-7 of 4-8
	check("past the cap, partly confirmed", ms(50, 40, 30, 30))
	r.Committed() // commit 9 follows 8's carried stamp: its own time again
	clock.Advance(10 * time.Millisecond)
	r.succeeded(9, 4)
	check("the rest past the cap", ms(40, 10))

	// Everything confirmed: stamping is exact again.
	r.Committed()
	clock.Advance(5 * time.Millisecond)
	r.succeeded(10, 5)
	check("after the cap drained", ms(5))
	if len(r.stamps) != 0 || len(r.markers) != 0 {
		t.Errorf("left behind: %d stamps, %d markers", len(r.stamps), len(r.markers))
	}
}
