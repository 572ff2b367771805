package reaper_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
)

// TestReaperTroubleEvents: the reaper's own troubles (a refused write
// token, a rate-limit hold, deployments an hour past their deadline) are
// platform events, at most one of each kind an hour, counted in
// chalupa_reaper_trouble_events_total (docs/operations.md, "Reaper").
func TestReaperTroubleEvents(t *testing.T) {
	cases := []struct {
		name string
		kind string
		// setup seeds one due deployment and the provider's answer; fault
		// is re-injected before every tick.
		deadline time.Duration // before t0
		tags     bool          // the droplet carries both tags
		revoke   bool
		fault    *dofake.Fault
		// others are kinds that must not be recorded in the first hour.
		others []string
	}{
		{name: "write token refused (401)", kind: reaper.KindTokenRefused, deadline: time.Minute, tags: true, revoke: true,
			others: []string{reaper.KindRateLimited, reaper.KindOverdue}},
		{name: "write token lacks a scope (403)", kind: reaper.KindTokenRefused, deadline: time.Minute, tags: true,
			fault:  &dofake.Fault{Route: dofake.RouteGetDroplet, Status: 403},
			others: []string{reaper.KindRateLimited, reaper.KindOverdue}},
		{name: "rate-limit hold", kind: reaper.KindRateLimited, deadline: time.Minute, tags: true,
			fault:  &dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 429, RetryAfter: 10 * time.Second},
			others: []string{reaper.KindTokenRefused, reaper.KindOverdue}},
		{name: "overdue and not destroyed", kind: reaper.KindOverdue, deadline: 2 * time.Hour, tags: false,
			others: []string{reaper.KindTokenRefused, reaper.KindRateLimited}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := reaper.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, func(c *reaper.Config) { c.Metrics = m })
			env := f.env("harbor")
			tags := dofake.EnvTags("harbor")
			if !tc.tags {
				tags = tags[:1]
			}
			f.deployment(env, storage.Deployment{DropletID: f.droplet(tags), IdleDeadlineAt: t0.Add(-tc.deadline),
				LaunchedAt: t0.Add(-tc.deadline - time.Hour)})
			if tc.revoke {
				f.fake.RevokeToken("write")
			}
			platform := func(kind string) []storage.LifecycleEventRow {
				t.Helper()
				ev, err := storage.ListLifecycleEvents(context.Background(), f.db.Read, storage.EventFilter{Kind: kind, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ev {
					if e.EnvironmentID != 0 {
						t.Fatalf("%s event in environment %s, want a platform event", kind, e.EnvironmentSlug)
					}
				}
				return ev
			}
			tick := func() {
				t.Helper()
				if tc.fault != nil {
					f.fake.Inject(*tc.fault)
				}
				f.tick()
			}
			// Three ticks within the hour, past every back-off and
			// retry time: one event.
			for range 3 {
				tick()
				f.clock.Advance(reaper.BackoffMin + 10*time.Second)
			}
			if ev := platform(tc.kind); len(ev) != 1 {
				t.Fatalf("after three ticks in one hour: %d %s events, want 1: %+v", len(ev), tc.kind, ev)
			}
			if n := troubleCount(t, reg, tc.kind); n != 1 {
				t.Fatalf("chalupa_reaper_trouble_events_total{kind=%q} = %v, want 1", tc.kind, n)
			}
			for _, k := range tc.others {
				if ev := platform(k); len(ev) != 0 && f.clock.Since(t0) < time.Hour {
					t.Errorf("%s recorded %+v", k, ev)
				}
			}
			// The next hour: one more.
			f.clock.Advance(time.Hour)
			tick()
			if ev := platform(tc.kind); len(ev) != 2 {
				t.Fatalf("the next hour: %d %s events, want 2", len(ev), tc.kind)
			}
		})
	}
}

// troubleCount reads chalupa_reaper_trouble_events_total{kind} from reg.
func troubleCount(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "chalupa_reaper_trouble_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no chalupa_reaper_trouble_events_total{kind=%q}", kind)
	return 0
}
