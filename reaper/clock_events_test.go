package reaper_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// wallStepped is the fixture's fake clock with a wall time the test steps
// apart from it; the fake clock stays the monotonic clock.
type wallStepped struct {
	*clockwork.FakeClock
	offset atomic.Int64
}

func (s *wallStepped) Now() time.Time                  { return s.FakeClock.Now().Add(time.Duration(s.offset.Load())) }
func (s *wallStepped) Since(t time.Time) time.Duration { return s.Now().Sub(t) }
func (s *wallStepped) Monotonic() time.Duration        { return s.FakeClock.Now().Sub(t0) }

// overdueFixture is a fixture with one deployment two hours past its
// deadline whose droplet lacks the environment tag: every tick finds it
// overdue and does not destroy it, so the reaper records reaper-overdue
// once an hour.
func overdueFixture(t *testing.T, tweak ...func(*reaper.Config)) *fixture {
	f := newFixture(t, tweak...)
	env := f.env("harbor")
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")[:1]), IdleDeadlineAt: t0.Add(-2 * time.Hour),
		LaunchedAt: t0.Add(-3 * time.Hour)})
	return f
}

func overdueEvents(t *testing.T, f *fixture) []storage.LifecycleEventRow {
	t.Helper()
	ev, err := storage.ListLifecycleEvents(context.Background(), f.db.Read, storage.EventFilter{Kind: reaper.KindOverdue, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// hourID is a trouble event's id for the clock hour holding at.
func hourID(kind string, at time.Time) string {
	return fmt.Sprintf("%s:%d", kind, at.Unix()/int64(reaper.TroubleEvery/time.Second))
}

// TestTroubleEventsUnderAWrongClock: while the clock guard is suspect
// (the wall clock stepped 2 h ahead), the reaper's events carry the
// trusted time (the high-water mark plus the monotonic time since it), and
// the hour-bucketed trouble id is computed from it (docs/operations.md,
// "Reaper", event times).
func TestTroubleEventsUnderAWrongClock(t *testing.T) {
	clock := &wallStepped{}
	var guard *clockguard.Guard
	f := overdueFixture(t, func(c *reaper.Config) {
		clock.FakeClock = c.Clock.(*clockwork.FakeClock)
		guard = clockguard.New(clock)
		c.Clock, c.Guard = clock, guard
	})
	f.db.Writer.SetEventTime(guard.EventTime)
	guard.MarkAccepted(t0) // a heartbeat accepted at t0
	f.tick()
	if ev := overdueEvents(t, f); len(ev) != 1 || ev[0].ID != hourID(reaper.KindOverdue, t0) {
		t.Fatalf("first hour: %+v, want one event of hour %s", ev, t0)
	}

	f.clock.Advance(time.Minute)
	clock.offset.Store(int64(2 * time.Hour))
	f.tick() // the step is detected: the guard is suspect
	f.clock.Advance(time.Hour)
	f.tick()
	trusted := t0.Add(time.Hour + time.Minute)
	ev := overdueEvents(t, f)
	if len(ev) != 2 || ev[0].ID != hourID(reaper.KindOverdue, trusted) || !ev[0].OccurredAt.Equal(trusted) {
		t.Fatalf("an hour under a clock 2 h ahead: %+v, want the second event at the trusted %s (not %s)", ev, trusted, clock.Now())
	}
	suspect, err := storage.ListLifecycleEvents(context.Background(), f.db.Read, storage.EventFilter{Kind: reaper.KindClockSuspect, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range suspect {
		if e.OccurredAt.After(trusted) {
			t.Fatalf("clock-suspect event stamped %s, after the trusted %s", e.OccurredAt, trusted)
		}
	}
	if len(suspect) == 0 {
		t.Fatal("no clock-suspect event")
	}
}

// TestGenuineTroubleKeptAfterAWrongClock: a reaper-overdue event written
// under a wall clock 2 h ahead that nothing noticed takes the id of a
// future hour; when that hour comes on the right clock, its genuine event
// is recorded beside it, not silently dropped (INSERT OR IGNORE).
func TestGenuineTroubleKeptAfterAWrongClock(t *testing.T) {
	f := overdueFixture(t)
	f.clock.Advance(2 * time.Hour) // the wrong clock
	f.tick()
	f.clock.Advance(-2 * time.Hour) // corrected
	f.tick()
	f.clock.Advance(2*time.Hour + 10*time.Minute)
	f.tick() // the genuine event of the hour the wrong clock used
	ev := overdueEvents(t, f)
	ids := map[string]bool{}
	for _, e := range ev {
		ids[e.ID] = true
	}
	if len(ev) != 3 || !ids[hourID(reaper.KindOverdue, t0)] || !ids[hourID(reaper.KindOverdue, t0.Add(2*time.Hour))] {
		t.Fatalf("events %+v: want the right clock's first hour, the wrong clock's and the genuine one of its hour", ev)
	}
	genuine := ev[0] // newest first
	if !genuine.OccurredAt.Equal(t0.Add(2*time.Hour + 10*time.Minute)) {
		t.Fatalf("newest event %+v, want the genuine one at %s", genuine, t0.Add(2*time.Hour+10*time.Minute))
	}
}
