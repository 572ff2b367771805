package reaper_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alertstest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// TestTroubleAlerts: each of the reaper's troubles raises its condition
// on the platform when the reaper records it, once however many ticks see
// it, and clears it when it ends: a refused write token at the next
// successful destroy call, a rate limit when its hold lifts, overdue
// deployments when none is overdue any more (docs/operations.md,
// "Alerts").
func TestTroubleAlerts(t *testing.T) {
	cases := []struct {
		name     string
		kind     string
		deadline time.Duration // before t0
		tags     bool
		fault    *dofake.Fault
		// end makes the trouble end before the last tick.
		end func(f *fixture, d storage.Deployment)
	}{
		{name: "write token refused, then a destroy succeeds", kind: alerts.KindReaperTokenRefused, deadline: time.Minute, tags: true,
			fault: &dofake.Fault{Route: dofake.RouteGetDroplet, Status: 403},
			end:   func(f *fixture, _ storage.Deployment) { f.clock.Advance(reaper.BackoffMin + 10*time.Second) }},
		{name: "rate limited, then the hold lifts", kind: alerts.KindReaperRateLimited, deadline: time.Minute, tags: true,
			fault: &dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 429, RetryAfter: 10 * time.Second},
			end:   func(f *fixture, _ storage.Deployment) { f.clock.Advance(11 * time.Second) }},
		{name: "overdue, then the deployment ends", kind: alerts.KindReaperOverdue, deadline: 2 * time.Hour, tags: false,
			end: func(f *fixture, d storage.Deployment) {
				if err := f.db.Writer.Do(context.Background(), func(tx storage.Tx) error {
					_, err := storage.EndDeployment(context.Background(), tx, d.EnvironmentID, d.ID, f.clock.Now())
					return err
				}); err != nil {
					f.t.Fatal(err)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := &alertstest.Recorder{}
			f := newFixture(t, func(c *reaper.Config) { c.Alerts = set })
			env := f.env("harbor")
			tags := dofake.EnvTags("harbor")
			if !tc.tags {
				tags = tags[:1]
			}
			d := f.deployment(env, storage.Deployment{DropletID: f.droplet(tags), IdleDeadlineAt: t0.Add(-tc.deadline),
				LaunchedAt: t0.Add(-tc.deadline - time.Hour)})
			if tc.fault != nil {
				f.fake.Inject(*tc.fault)
			}
			f.tick()
			f.clock.Advance(time.Second)
			f.tick() // the trouble still holds (or is held): no second report
			if got := set.Holds(tc.kind); !slices.Equal(got, []bool{true}) {
				t.Fatalf("%s reported %v after the trouble, want [true]", tc.kind, got)
			}
			for _, c := range set.Raised() {
				if c.Kind != tc.kind || c.Subject != (alerts.Subject{Kind: alerts.SubjectPlatform}) || c.Detail == "" {
					t.Errorf("raised %+v, want only %s on the platform with its detail", c, tc.kind)
				}
			}
			tc.end(f, d)
			f.tick()
			if got := set.Holds(tc.kind); !slices.Equal(got, []bool{true, false}) {
				t.Fatalf("%s reported %v after the trouble ended, want [true false]", tc.kind, got)
			}
		})
	}
}

// TestNoAlertOnANormalTick: a tick that destroys a due deployment and
// leaves a live one raises nothing.
func TestNoAlertOnANormalTick(t *testing.T) {
	set := &alertstest.Recorder{}
	f := newFixture(t, func(c *reaper.Config) { c.Alerts = set })
	env := f.env("harbor")
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(time.Hour)})
	res := f.tick()
	if res.Count(reaper.ActionDestroyed) != 1 {
		t.Fatalf("tick %+v, want one destroyed", res)
	}
	f.clock.Advance(time.Minute)
	f.tick()
	if r := set.Raised(); len(r) != 0 {
		t.Fatalf("normal ticks raised %+v", r)
	}
}

// TestClockGuardAlerts: the clock guard's hold raises clock-step when it
// holds for a wall-clock step and clock-suspect when it holds for another
// reason (here a start behind the high-water mark); each clears when the
// hold lifts (the fleet agrees and every active deployment heartbeated).
func TestClockGuardAlerts(t *testing.T) {
	cases := []struct {
		name, kind, other string
		trip              func(clock *wallStepped, guard *clockguard.Guard)
	}{
		{"a wall-clock step", alerts.KindClockStep, alerts.KindClockSuspect,
			func(clock *wallStepped, _ *clockguard.Guard) { clock.offset.Store(int64(2 * time.Hour)) }},
		{"a start behind the mark", alerts.KindClockSuspect, alerts.KindClockStep,
			func(_ *wallStepped, guard *clockguard.Guard) { guard.RestoreMark(t0.Add(time.Hour)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := &alertstest.Recorder{}
			clock := &wallStepped{}
			var guard *clockguard.Guard
			f := newFixture(t, func(c *reaper.Config) {
				clock.FakeClock = c.Clock.(*clockwork.FakeClock)
				guard = clockguard.New(clock)
				c.Clock, c.Guard, c.Alerts = clock, guard, set
			})
			f.tick()
			if r := set.Raised(); len(r) != 0 {
				t.Fatalf("a tick under a good clock raised %+v", r)
			}
			f.clock.Advance(time.Minute)
			tc.trip(clock, guard)
			f.tick()
			f.clock.Advance(time.Minute)
			f.tick()
			if got := set.Holds(tc.kind); !slices.Equal(got, []bool{true}) {
				t.Fatalf("%s reported %v while the guard holds, want [true]", tc.kind, got)
			}
			for _, c := range set.Raised() {
				if c.Kind != tc.kind {
					t.Errorf("raised %+v, want only %s", c, tc.kind)
				}
			}
			// The fleet agrees again; with no active deployment the
			// reaper lifts the hold at its next look.
			guard.HeartbeatAccepted("harbor")
			f.clock.Advance(time.Minute)
			f.tick()
			if got := set.Holds(tc.kind); !slices.Equal(got, []bool{true, false}) {
				t.Fatalf("%s reported %v after the hold lifted, want [true false]", tc.kind, got)
			}
			for _, c := range set.Raised() {
				if c.Kind == tc.other {
					t.Errorf("%s raised too: %+v", tc.other, c)
				}
			}
		})
	}
}

// TestAlertChecks: each re-check the reaper gives the alerter says whether
// its condition holds now, so an alert an earlier process left open
// resolves at start when it no longer does (docs/operations.md, "Alerts",
// under Detectors).
func TestAlertChecks(t *testing.T) {
	check := func(t *testing.T, r *reaper.Reaper, kind string) bool {
		t.Helper()
		c, ok := r.AlertChecks()[kind]
		if !ok {
			t.Fatalf("no check for %s", kind)
		}
		holds, _, err := c(context.Background(), alerts.Subject{Kind: alerts.SubjectPlatform})
		if err != nil {
			t.Fatal(err)
		}
		return holds
	}
	due := func(f *fixture) {
		f.deployment(f.env("harbor"), storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	}
	t.Run("reaper-overdue", func(t *testing.T) {
		if check(t, newFixture(t).r, alerts.KindReaperOverdue) {
			t.Error("holds with no deployment")
		}
		if !check(t, overdueFixture(t).r, alerts.KindReaperOverdue) {
			t.Error("does not hold with a deployment two hours past its deadline")
		}
	})
	t.Run("reaper-rate-limited", func(t *testing.T) {
		f := newFixture(t)
		if check(t, f.r, alerts.KindReaperRateLimited) {
			t.Error("holds in a new process")
		}
		due(f)
		f.fake.Inject(dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 429, RetryAfter: 10 * time.Second})
		f.tick()
		if !check(t, f.r, alerts.KindReaperRateLimited) {
			t.Error("does not hold while rate-limited")
		}
		f.clock.Advance(11 * time.Second)
		if check(t, f.r, alerts.KindReaperRateLimited) {
			t.Error("holds after the retry time")
		}
	})
	t.Run("reaper-token-refused", func(t *testing.T) {
		f := newFixture(t, func(c *reaper.Config) { c.Alerts = &alertstest.Recorder{} })
		if !check(t, f.r, alerts.KindReaperTokenRefused) {
			t.Error("a new process resolves it before the write token made a call")
		}
		due(f)
		f.tick()
		if check(t, f.r, alerts.KindReaperTokenRefused) {
			t.Error("holds after a successful destroy")
		}
		off := newFixture(t, func(c *reaper.Config) { c.Credentials = nil })
		if check(t, off.r, alerts.KindReaperTokenRefused) {
			t.Error("holds without a write token")
		}
	})
	t.Run("clock", func(t *testing.T) {
		var guard *clockguard.Guard
		f := newFixture(t, func(c *reaper.Config) { guard = clockguard.New(c.Clock); c.Guard = guard })
		if check(t, f.r, alerts.KindClockSuspect) || check(t, f.r, alerts.KindClockStep) {
			t.Error("a clock condition holds under a good clock")
		}
		guard.RestoreMark(t0.Add(time.Hour))
		if !check(t, f.r, alerts.KindClockSuspect) || check(t, f.r, alerts.KindClockStep) {
			t.Error("a start behind the mark: want clock-suspect alone")
		}
	})
}

// TestMassDueAlert: reaper-mass-due is raised on the environment whose
// deployments fall due at once, reported once however many paced ticks
// see it, and ends at the first look where no more than half of the
// environment's active deployments (or fewer than MassDueMin) are due
// (docs/operations.md, "Alerts", under Detectors).
func TestMassDueAlert(t *testing.T) {
	set := &alertstest.Recorder{}
	f := newFixture(t, func(c *reaper.Config) { c.Alerts, c.MaxDestroy = set, 1 })
	env := f.env("harbor")
	quiet := f.env("quay")
	for range 5 {
		f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	}
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(time.Hour)})
	f.deployment(quiet, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("quay")), IdleDeadlineAt: t0.Add(-time.Minute)})
	want := alerts.Subject{Kind: alerts.SubjectEnvironment, ID: "harbor"}
	// 5 of 6 due, then 4 of 5 and 3 of 4 as the pace destroys one a
	// minute: it holds; then 2 of 3, fewer than MassDueMin: it ends.
	for i, holds := range []bool{true, true, true, false} {
		f.tick()
		got := set.Holds(alerts.KindMassDue)
		if wantN := map[bool]int{true: 1, false: 2}[holds]; len(got) != wantN {
			t.Fatalf("look %d: reaper-mass-due reported %v, want %d reports", i, got, wantN)
		}
		f.clock.Advance(reaper.PaceWindow)
	}
	if got := set.Holds(alerts.KindMassDue); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("reaper-mass-due reported %v, want [true false]", got)
	}
	for _, c := range set.Calls() {
		if c.Kind != alerts.KindMassDue {
			continue
		}
		if c.Subject != want {
			t.Errorf("reported on %+v, want %+v", c.Subject, want)
		}
		if c.Holds && !strings.Contains(c.Detail, "5 of 6 active deployments") {
			t.Errorf("detail %q does not give the counts", c.Detail)
		}
	}
}

// TestMassDueCheck: reaper-mass-due's re-check at start holds for an
// environment with a mass of due deployments and not for another.
func TestMassDueCheck(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	f.env("quay")
	for range 3 {
		f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	}
	check := f.r.AlertChecks()[alerts.KindMassDue]
	if check == nil {
		t.Fatal("no check for reaper-mass-due")
	}
	for slug, want := range map[string]bool{"harbor": true, "quay": false} {
		holds, detail, err := check(context.Background(), alerts.Subject{Kind: alerts.SubjectEnvironment, ID: slug})
		if err != nil {
			t.Fatal(err)
		}
		if holds != want || (holds && detail == "") {
			t.Errorf("%s: holds %v (detail %q), want %v", slug, holds, detail, want)
		}
	}
}
