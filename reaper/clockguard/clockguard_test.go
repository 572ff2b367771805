package clockguard_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/reaper/clockguard"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// stepped is a fake clock whose wall time the test steps apart from its
// monotonic time.
type stepped struct {
	*clockwork.FakeClock
	offset atomic.Int64
}

func (s *stepped) Now() time.Time           { return s.FakeClock.Now().Add(time.Duration(s.offset.Load())) }
func (s *stepped) Monotonic() time.Duration { return s.FakeClock.Now().Sub(t0) }

func newGuard() (*clockguard.Guard, *stepped) {
	c := &stepped{FakeClock: clockwork.NewFakeClockAt(t0)}
	g := clockguard.New(c)
	g.Evaluate()
	return g, c
}

// TestStep: a wall step beyond StepThreshold against the monotonic clock
// holds the fleet; a smaller one, or a day of NTP slew, does not.
func TestStep(t *testing.T) {
	for _, tc := range []struct {
		name    string
		elapsed time.Duration
		step    time.Duration
		held    bool
	}{
		{"+61s", time.Second, 61 * time.Second, true},
		{"-61s", time.Second, -61 * time.Second, true},
		{"+59s", time.Second, 59 * time.Second, false},
		{"a day of slew", 24 * time.Hour, 40 * time.Second, false},
		{"+10m after a day", 24 * time.Hour, 10 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newGuard()
			c.Advance(tc.elapsed)
			c.offset.Add(int64(tc.step))
			st := g.Evaluate()
			if (st.Global != nil) != tc.held || (st.Step != 0) != tc.held {
				t.Fatalf("state %+v, want held %v", st, tc.held)
			}
			if tc.held && (st.Global.Reason != clockguard.ReasonStep || st.LastStep.IsZero()) {
				t.Fatalf("hold %+v, want a clock-step", st.Global)
			}
		})
	}
}

// TestSkewRules: skew refusals hold no environment; only
// ClusterEnvironments environments off by about the same offset hold the
// fleet (a single deployment's contact is the reaper's, per deployment).
func TestSkewRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offsets []time.Duration // one environment each
		fleet   bool
	}{
		{"one environment", []time.Duration{10 * time.Minute}, false},
		{"two environments", []time.Duration{10 * time.Minute, 10 * time.Minute}, false},
		{"three alike", []time.Duration{10 * time.Minute, 10*time.Minute + 20*time.Second, 10*time.Minute - 25*time.Second}, true},
		{"three apart", []time.Duration{10 * time.Minute, 20 * time.Minute, -10 * time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newGuard()
			for i, off := range tc.offsets {
				g.SkewRefused(fmt.Sprintf("env-%d", i), "dep", c.Now().Add(-off))
			}
			st := g.Evaluate()
			if (st.Global != nil) != tc.fleet {
				t.Fatalf("fleet hold %+v, want %v", st.Global, tc.fleet)
			}
		})
	}
}

// TestLift: a hold lasts while the fleet disagrees; once a heartbeat is
// accepted after the trigger it is agreed, and it lifts by Lift (every
// deployment heartbeated) or by itself after SettleMax.
func TestLift(t *testing.T) {
	g, c := newGuard()
	c.Advance(time.Second)
	c.offset.Store(int64(10 * time.Minute))
	if st := g.Evaluate(); st.Global == nil {
		t.Fatal("no hold after the step")
	}
	g.Lift()
	c.Advance(2 * time.Hour)
	st := g.Evaluate()
	if st.Global == nil || st.Global.Agreed {
		t.Fatalf("%+v: a hold without agreement must last", st.Global)
	}
	if st.Global.HoldsSessions() || st.Global.Raise() != 2 {
		t.Fatalf("after 2 h: sessions held %v, raise %d; want the cap passed and the third event", st.Global.HoldsSessions(), st.Global.Raise())
	}
	c.offset.Store(0) // corrected (a step back): heartbeats are accepted again
	c.Advance(time.Second)
	g.Evaluate()
	c.Advance(time.Second)
	g.HeartbeatAccepted("env-1")
	st = g.Evaluate()
	if st.Global == nil || !st.Global.Agreed {
		t.Fatalf("%+v, want agreed and still held", st.Global)
	}
	c.Advance(clockguard.SettleMax)
	if st := g.Evaluate(); st.Global != nil {
		t.Fatalf("%+v, want lifted SettleMax after the agreement", st.Global)
	}

	// Lift after agreement ends it at once.
	g, c = newGuard()
	c.Advance(time.Second)
	c.offset.Store(int64(10 * time.Minute))
	g.Evaluate()
	c.Advance(time.Second)
	g.HeartbeatAccepted("env-1")
	if st := g.Evaluate(); st.Global == nil || !st.Global.Agreed {
		t.Fatalf("%+v, want the fleet held and agreed", st.Global)
	}
	g.Lift()
	if st := g.Evaluate(); st.Global != nil {
		t.Fatalf("%+v, want lifted", st.Global)
	}
}

// TestContact: the latest signed time counts; a replay (same or older
// signed time) does not refresh it; an environment keeps at most
// MaxContactsPerEnvironment, evicting its own oldest.
func TestContact(t *testing.T) {
	g, c := newGuard()
	signed := c.Now().Add(-10 * time.Minute)
	g.SkewRefused("env-1", "dep", signed)
	c.Advance(40 * time.Second)
	g.SkewRefused("env-1", "dep", signed) // a replay
	if at, age, ok := g.Contact("env-1", "dep"); !ok || !at.Equal(signed) || age != 40*time.Second {
		t.Fatalf("contact %v %v %v, want the first arrival, 40s old", at, age, ok)
	}
	g.SkewRefused("env-1", "dep", signed.Add(30*time.Second))
	if _, age, _ := g.Contact("env-1", "dep"); age != 0 {
		t.Fatalf("a later signed time did not refresh the contact: age %v", age)
	}
	g.SkewRefused("env-2", "other", signed)
	for i := range clockguard.MaxContactsPerEnvironment {
		c.Advance(time.Millisecond)
		g.SkewRefused("env-1", fmt.Sprintf("minted-%d", i), signed)
	}
	if _, _, ok := g.Contact("env-1", "dep"); ok {
		t.Fatal("env-1's oldest contact was not evicted")
	}
	if _, _, ok := g.Contact("env-2", "other"); !ok {
		t.Fatal("one environment's ids evicted another environment's contact")
	}
}

// TestReplayDoesNotHoldForever: one captured heartbeat replayed again and
// again is refused for its timestamp every time, but proves nothing new:
// replays from three environments do not keep the fleet held, and the
// contact keeps the first arrival's time.
func TestReplayDoesNotHoldForever(t *testing.T) {
	g, c := newGuard()
	captured := t0.Add(-10 * time.Minute)
	for _, env := range []string{"a", "b", "c"} {
		g.SkewRefused(env, "dep-1", captured)
	}
	if st := g.Evaluate(); st.Global == nil {
		t.Fatalf("the first refusals did not hold the fleet: %+v", st)
	}
	for i := 0; i < 20; i++ {
		c.Advance(clockguard.HeartbeatInterval)
		for _, env := range []string{"a", "b", "c"} {
			g.SkewRefused(env, "dep-1", captured)
		}
		g.HeartbeatAccepted("a")
		g.HeartbeatAccepted("b")
		g.HeartbeatAccepted("c")
	}
	st := g.Evaluate()
	if st.Global != nil && !st.Global.Agreed {
		t.Fatalf("replays keep the fleet held: %+v", st.Global)
	}
	if _, age, ok := g.Contact("a", "dep-1"); !ok || age != 20*clockguard.HeartbeatInterval {
		t.Fatalf("contact %v, age %v: want the first refusal's, %v old (replays renew nothing)", ok, age, 20*clockguard.HeartbeatInterval)
	}
}

// TestEnvironmentAhead: the environment's fresh contacts say how far the
// server's clock runs ahead of its agents (their median); a server behind
// them, contacts older than ContactFresh, another environment's, or any
// heartbeat accepted in the fleet meanwhile say nothing.
func TestEnvironmentAhead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		offsets  []time.Duration // server minus signed time, one deployment each
		wait     time.Duration   // before asking
		accepted bool            // a heartbeat accepted anywhere after them
		env      string
		want     time.Duration // 0: not ok
	}{
		{"one agent, server 10 min ahead", []time.Duration{10 * time.Minute}, 0, false, "env-1", 10 * time.Minute},
		{"the median of three", []time.Duration{10 * time.Minute, 2 * time.Hour, 9 * time.Minute}, 0, false, "env-1", 10 * time.Minute},
		{"server behind", []time.Duration{-10 * time.Minute}, 0, false, "env-1", 0},
		{"stale after ContactFresh", []time.Duration{10 * time.Minute}, clockguard.ContactFresh, false, "env-1", 0},
		{"fresh just before ContactFresh", []time.Duration{10 * time.Minute}, clockguard.ContactFresh - time.Second, false, "env-1", 10 * time.Minute},
		{"a heartbeat accepted in the fleet", []time.Duration{10 * time.Minute}, 0, true, "env-1", 0},
		{"another environment's contacts", []time.Duration{10 * time.Minute}, 0, false, "env-2", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newGuard()
			for i, off := range tc.offsets {
				g.SkewRefused("env-1", fmt.Sprintf("dep-%d", i), c.Now().Add(-off))
			}
			if tc.accepted {
				g.HeartbeatAccepted("env-3")
			}
			c.Advance(tc.wait)
			got, ok := g.EnvironmentAhead(tc.env)
			if ok != (tc.want != 0) || got != tc.want {
				t.Fatalf("EnvironmentAhead = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}
