package reaper_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
)

// countingClock is a fake clock that counts the timers made on it.
type countingClock struct {
	*clockwork.FakeClock
	timers atomic.Int64
}

func (c *countingClock) NewTimer(d time.Duration) clockwork.Timer {
	c.timers.Add(1)
	return c.FakeClock.NewTimer(d)
}

func (c *countingClock) After(d time.Duration) <-chan time.Time {
	c.timers.Add(1)
	return c.FakeClock.After(d)
}

func (c *countingClock) NewTicker(d time.Duration) clockwork.Ticker {
	c.timers.Add(1)
	return c.FakeClock.NewTicker(d)
}

func (c *countingClock) AfterFunc(d time.Duration, fn func()) clockwork.Timer {
	c.timers.Add(1)
	return c.FakeClock.AfterFunc(d, fn)
}

// eventually waits (in real time, as synchronisation only: nothing is
// asserted about how long it takes) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, testwait.Short, what, func() (bool, string) { return cond(), "not yet" })
}

// startRun runs the reaper's loop until the test ends.
func startRun(t *testing.T, r *reaper.Reaper) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// TestRunIsEventDriven: with an empty fleet the loop waits without any
// timer; a heartbeat's deadline signal wakes it; it sleeps until that
// deadline (not MaxSleep later) and destroys the droplet at the deadline
// itself on the fake clock; with the fleet empty again it has no timer.
func TestRunIsEventDriven(t *testing.T) {
	f := newFixture(t)
	cc := &countingClock{FakeClock: f.clock}
	f.r = f.newReaper(func(c *reaper.Config) { c.Clock = cc })
	env := f.env("harbor")
	startRun(t, f.r)

	eventually(t, "the loop waits without a timer", func() bool { return f.r.IdleWaits() >= 1 })
	if n := cc.timers.Load(); n != 0 {
		t.Fatalf("an empty fleet made %d timers, want 0", n)
	}

	deadline := t0.Add(90 * time.Second)
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: deadline})
	if !f.wake.Notify(deadline) {
		t.Fatal("the idle reaper did not take the deadline signal")
	}
	if err := f.clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	st, err := f.r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.NextWake.Equal(deadline) {
		t.Fatalf("next wake-up %v, want the deadline %v", st.NextWake, deadline)
	}
	// A later deadline does not wake it; an earlier one would.
	if f.wake.Notify(deadline.Add(time.Minute)) {
		t.Fatal("a later deadline woke the reaper")
	}

	f.clock.Advance(90 * time.Second)
	eventually(t, "the droplet is destroyed", func() bool { return len(f.fake.Deletes()) == 1 })
	if at := f.fake.Deletes()[0].At; !at.Equal(deadline) {
		t.Fatalf("DELETE at %v on the fake clock, want at the deadline %v", at, deadline)
	}
	eventually(t, "the loop waits without a timer again", func() bool { return f.r.IdleWaits() >= 2 })
	if n := cc.timers.Load(); n != 1 {
		t.Fatalf("timers made = %d, want exactly 1 (the deadline's)", n)
	}
}

// TestRunSleepsAtMostMaxSleep: a deadline an hour away is re-checked after
// MaxSleep while the deployment is active.
func TestRunSleepsAtMostMaxSleep(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(time.Hour)})
	startRun(t, f.r)
	if err := f.clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	st, err := f.r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.NextWake.Equal(t0.Add(reaper.MaxSleep)) {
		t.Fatalf("next wake-up %v, want %v", st.NextWake, t0.Add(reaper.MaxSleep))
	}
}

// TestRunNeverSpinsOnAHeldDeployment: a due deployment the guard refused
// does not make the loop tick again before the hold ends.
func TestRunNeverSpinsOnAHeldDeployment(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.NoTags), IdleDeadlineAt: t0.Add(-time.Minute)})
	startRun(t, f.r)
	if err := f.clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	st, err := f.r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.NextWake.Equal(t0.Add(reaper.MaxSleep)) || len(st.Due) != 0 || st.LastTick == nil || st.LastTick.Count(reaper.ActionWarned) != 1 {
		t.Fatalf("status %+v: want one warning, nothing due, asleep until %v", st, t0.Add(reaper.MaxSleep))
	}
	if n := len(f.fake.Requests()); n != 1 {
		t.Fatalf("requests %v, want the one guard read", f.fake.Requests())
	}
}
