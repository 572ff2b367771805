package clockguard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/reaper/clockguard"
)

// TestRestoreMark: a start more than MarkTolerance behind the persisted
// mark is a step back that holds the fleet (clock-behind-mark); a start at
// or ahead of the mark, or within the tolerance, holds nothing.
func TestRestoreMark(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behind time.Duration // the clock behind the mark
		held   bool
	}{
		{"541 s behind", 541 * time.Second, true},
		{"61 s behind", 61 * time.Second, true},
		{"within the tolerance", clockguard.MarkTolerance, false},
		{"ahead of the mark", -2 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &stepped{FakeClock: clockwork.NewFakeClockAt(t0)}
			g := clockguard.New(c)
			got := g.RestoreMark(c.Now().Add(tc.behind))
			st := g.Evaluate()
			if (st.Global != nil) != tc.held || (got != 0) != tc.held {
				t.Fatalf("RestoreMark = %s, hold %+v; want held %v", got, st.Global, tc.held)
			}
			if tc.held && (st.Global.Reason != clockguard.ReasonBehindMark || st.Global.Offset != -tc.behind) {
				t.Fatalf("hold %+v, want %s with offset %s", st.Global, clockguard.ReasonBehindMark, -tc.behind)
			}
		})
	}
	t.Run("no mark", func(t *testing.T) {
		g, _ := newGuard()
		if got := g.RestoreMark(time.Time{}); got != 0 || g.Evaluate().Global != nil {
			t.Fatalf("a database without a mark held the fleet (%s)", got)
		}
	})
}

// TestMarkAdvance: accepted signed times advance the mark, never past the
// server's own clock and never back; requests signed before the mark minus
// SkewWindow are below the floor; nothing advances while the guard is
// suspect.
func TestMarkAdvance(t *testing.T) {
	g, c := newGuard()
	now := c.Now()
	if g.MarkFloor(now.Add(-24 * time.Hour)) {
		t.Fatal("a guard without a mark refuses")
	}
	g.MarkAccepted(now.Add(-10 * time.Second))
	if got := g.Mark(); !got.Equal(now.Add(-10 * time.Second)) {
		t.Fatalf("mark %s, want the accepted signed time", got)
	}
	g.MarkAccepted(now.Add(4 * time.Minute)) // an agent ahead: capped at the server's clock
	if got := g.Mark(); !got.Equal(now) {
		t.Fatalf("mark %s, want capped at the server clock %s", got, now)
	}
	g.MarkAccepted(now.Add(-time.Minute))
	if got := g.Mark(); !got.Equal(now) {
		t.Fatalf("mark %s moved back", got)
	}
	floor := now.Add(-clockguard.SkewWindow)
	if g.MarkFloor(floor) || !g.MarkFloor(floor.Add(-time.Millisecond)) {
		t.Fatalf("floor is not mark − SkewWindow (%s)", floor)
	}

	// Suspect (a step): the mark stays.
	c.Advance(time.Second)
	c.offset.Store(int64(10 * time.Minute))
	if g.Evaluate().Global == nil {
		t.Fatal("no hold after the step")
	}
	g.MarkAccepted(c.Now())
	if got := g.Mark(); !got.Equal(now) {
		t.Fatalf("mark %s advanced while suspect", got)
	}
}

// TestMarkDue: an advance is due for writing at once the first time, then
// at most every MarkPersistEvery unless forced; a write that committed
// clears it, one that did not leaves it due.
func TestMarkDue(t *testing.T) {
	g, c := newGuard()
	if _, _, ok := g.MarkDue(true); ok {
		t.Fatal("a mark with no change is due")
	}
	g.MarkAccepted(c.Now())
	m, over, ok := g.MarkDue(false)
	if !ok || !m.Equal(c.Now()) || !over.IsZero() {
		t.Fatalf("MarkDue = %s %s %v, want the mark, no override", m, over, ok)
	}
	// Not persisted (the unit rolled back), and too soon for another.
	c.Advance(time.Second)
	g.MarkAccepted(c.Now())
	if _, _, ok := g.MarkDue(false); ok {
		t.Fatal("due again within MarkPersistEvery")
	}
	if m, _, ok := g.MarkDue(true); !ok || !m.Equal(c.Now()) {
		t.Fatal("a forced write is not due")
	}
	g.MarkPersisted(c.Now())
	c.Advance(clockguard.MarkPersistEvery)
	if _, _, ok := g.MarkDue(false); ok {
		t.Fatal("a persisted mark is due")
	}
	g.MarkAccepted(c.Now())
	if _, _, ok := g.MarkDue(false); !ok {
		t.Fatal("an advance MarkPersistEvery after the last write is not due")
	}
}

// TestMarkOverride: after a start behind the mark, AgreeEnvironments
// environments whose signed times advance with the clock override it:
// the mark is set back to the server clock, due for writing with the mark
// it replaced. Two environments do not; one captured request per
// environment, replayed again and again, never agrees.
func TestMarkOverride(t *testing.T) {
	const behind = 2 * time.Hour
	start := func() (*clockguard.Guard, *stepped) {
		g, c := newGuard()
		g.RestoreMark(c.Now().Add(behind))
		return g, c
	}
	agree := func(g *clockguard.Guard, c *stepped, envs int, replay bool) bool {
		first := c.Now()
		overrode := false
		for beat := 0; beat < 3; beat++ {
			for i := range envs {
				signed := c.Now()
				if replay {
					signed = first
				}
				if g.MarkAgreed(fmt.Sprintf("env-%d", i), signed) {
					overrode = true
				}
			}
			c.Advance(clockguard.HeartbeatInterval)
		}
		return overrode
	}
	t.Run("three environments", func(t *testing.T) {
		g, c := start()
		old := g.Mark()
		if !agree(g, c, clockguard.AgreeEnvironments, false) {
			t.Fatal("three environments agreeing did not override")
		}
		if !g.Mark().Before(old) || g.MarkFloor(c.Now()) {
			t.Fatalf("mark %s after the override, want set back from %s", g.Mark(), old)
		}
		m, over, ok := g.MarkDue(false)
		if !ok || !over.Equal(old) || !m.Equal(g.Mark()) {
			t.Fatalf("MarkDue = %s %s %v, want the new mark replacing %s", m, over, ok, old)
		}
		g.MarkPersisted(m)
		if _, over, _ := g.MarkDue(true); !over.IsZero() {
			t.Fatal("the override is still pending after its write")
		}
	})
	t.Run("two environments", func(t *testing.T) {
		g, c := start()
		if agree(g, c, clockguard.AgreeEnvironments-1, false) {
			t.Fatal("two environments overrode the mark")
		}
	})
	t.Run("replayed captures", func(t *testing.T) {
		g, c := start()
		if agree(g, c, clockguard.AgreeEnvironments, true) {
			t.Fatal("replayed requests overrode the mark")
		}
	})
}

// TestEventTimeWhileSuspect: while the guard is suspect, an event stamped
// on the wall clock is moved to the trusted time (the mark plus the
// monotonic time since it); otherwise it keeps its time.
func TestEventTimeWhileSuspect(t *testing.T) {
	g, c := newGuard()
	g.MarkAccepted(c.Now())
	mark := g.Mark()
	if at := c.Now(); !g.EventTime(at).Equal(at) {
		t.Fatal("an event's time moved while the clock agrees")
	}
	c.Advance(time.Minute)
	c.offset.Store(int64(2 * time.Hour)) // the wall clock jumps 2 h ahead
	g.Evaluate()
	want := mark.Add(time.Minute)
	if got := g.EventTime(c.Now()); !got.Equal(want) {
		t.Fatalf("event time %s under a clock 2 h ahead, want the trusted %s", got, want)
	}
	if trusted, suspect := g.Trusted(); !suspect || !trusted.Equal(want) {
		t.Fatalf("Trusted = %s %v, want %s while suspect", trusted, suspect, want)
	}
}
