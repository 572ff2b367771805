package ingest

import (
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// TestTransitsLate: a transit is late only when it is more than
// TransitTolerance longer than the lower median of its deployment's last
// transitSamples transits; a deployment with none is never late; a
// shorter transit never is. The history follows a step: after three
// transits 4 minutes longer (an agent clock stepped back), the next is on
// time.
func TestTransitsLate(t *testing.T) {
	k := transitKey{1, "dep"}
	ms := func(d ...time.Duration) []time.Duration { return d }
	for _, tc := range []struct {
		name    string
		history []time.Duration
		transit time.Duration
		late    bool
	}{
		{"no history", nil, time.Hour, false},
		{"within the tolerance", ms(0, 0, 0), TransitTolerance, false},
		{"past the tolerance", ms(0, 0, 0), TransitTolerance + time.Millisecond, true},
		{"much shorter", ms(0, 0, 0), -time.Hour, false},
		{"median of a steady offset", ms(4*time.Minute, 4*time.Minute+time.Second, 4*time.Minute-time.Second), 4*time.Minute + 50*time.Second, false},
		{"one late sample does not move the median", ms(0, 0, 0, 0, 3*time.Minute), 2 * time.Minute, true},
		{"two late of five do not", ms(0, 0, 0, 3*time.Minute, 3*time.Minute), 3 * time.Minute, true},
		{"three late of five do", ms(0, 0, 3*time.Minute, 3*time.Minute, 3*time.Minute), 3 * time.Minute, false},
		{"lower median of two", ms(0, 3*time.Minute), 3 * time.Minute, true},
		{"only the last five count", ms(3*time.Minute, 3*time.Minute, 3*time.Minute, 0, 0, 0, 0, 0), 3 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransits(4)
			for _, d := range tc.history {
				tr.add(k, d)
			}
			if got := tr.late(k, tc.transit); got != tc.late {
				t.Fatalf("late(%s) after %v = %v, want %v", tc.transit, tc.history, got, tc.late)
			}
			if got := tr.late(transitKey{2, "dep"}, tc.transit); got {
				t.Fatal("another environment's deployment of the same id shares the history")
			}
		})
	}
}

// TestTransitsBounded: the table holds at most its bound of deployments,
// evicting the least recently heard; an evicted deployment starts afresh.
func TestTransitsBounded(t *testing.T) {
	tr := newTransits(3)
	key := func(i int) transitKey { return transitKey{1, fmt.Sprintf("dep-%d", i)} }
	for i := range 3 {
		tr.add(key(i), 0)
	}
	tr.add(key(0), 0) // heard again: dep-1 is now the least recent
	tr.add(key(3), 0)
	if n := tr.size(); n != 3 {
		t.Fatalf("%d deployments held, want 3", n)
	}
	if tr.late(key(1), time.Hour) {
		t.Fatal("the least recently heard deployment kept its history")
	}
	for _, i := range []int{0, 2, 3} {
		if !tr.late(key(i), time.Hour) {
			t.Fatalf("dep-%d lost its history", i)
		}
	}
}

// TestSteadyNowIgnoresWallSteps: the steady frame transits are measured in
// moves with the monotonic clock, not with a step of the wall clock.
func TestSteadyNowIgnoresWallSteps(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	wall, mono := clockwork.NewFakeClockAt(start), clockwork.NewFakeClockAt(start)
	s := NewService(Config{Clock: wall, Monotonic: mono})
	mono.Advance(30 * time.Second)
	wall.Advance(30*time.Second + 10*time.Minute)
	if got, want := s.steadyNow(), start.Add(30*time.Second); !got.Equal(want) {
		t.Fatalf("steadyNow %s after a +10m wall step, want %s", got, want)
	}
}
