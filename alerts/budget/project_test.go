package budget_test

import (
	"math"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/alerts/budget"
	"github.com/chalupa-run/chalupa/reaper/cost"
)

var (
	monthStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	monthEnd   = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	now        = time.Date(2026, 12, 11, 0, 0, 0, 0, time.UTC) // 240 h into the month
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// TestEnd: each deployment is projected to its own decision time (clamped
// to now and the month's end); only a held one, one the reaper will not
// destroy and one without an agent (or any deadline) run to the month's
// end, with their reason.
func TestEnd(t *testing.T) {
	deadline := now.Add(3 * time.Hour)
	for _, tc := range []struct {
		name   string
		d      budget.Deployment
		end    time.Time
		reason string
	}{
		{"idle deadline ahead", budget.Deployment{DecideAt: deadline}, deadline, ""},
		{"session expiry ahead", budget.Deployment{DecideAt: now.Add(20 * time.Minute)}, now.Add(20 * time.Minute), ""},
		{"decision time passed: due now", budget.Deployment{DecideAt: now.Add(-time.Hour)}, now, ""},
		{"decision time next month", budget.Deployment{DecideAt: monthEnd.Add(48 * time.Hour)}, monthEnd, ""},
		{"held", budget.Deployment{DecideAt: deadline, Held: true}, monthEnd, budget.ReasonHeld},
		{"reaper off", budget.Deployment{DecideAt: deadline, ReaperOff: true}, monthEnd, budget.ReasonReaperOff},
		{"no agent (adopted)", budget.Deployment{DecideAt: deadline, NoAgent: true}, monthEnd, budget.ReasonNoAgent},
		{"no deadline at all", budget.Deployment{}, monthEnd, budget.ReasonNoAgent},
		{"held wins over no agent", budget.Deployment{Held: true, NoAgent: true}, monthEnd, budget.ReasonHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end, reason := budget.End(tc.d, now, monthEnd)
			if !end.Equal(tc.end) || reason != tc.reason {
				t.Fatalf("End = %v %q, want %v %q", end, reason, tc.end, tc.reason)
			}
		})
	}
}

// TestCost: the projected charge is the month's charge to the projected
// end less the charge to date, under the reconciler's billing rule: per
// second, the minimum charge once, the monthly cap once.
func TestCost(t *testing.T) {
	started := monthStart
	for _, tc := range []struct {
		name string
		d    budget.Deployment
		end  time.Time
		usd  float64
	}{
		{"ten hours at $0.50", budget.Deployment{Start: started, HourlyUSD: 0.5, MonthlyUSD: 336, Priced: true}, now.Add(10 * time.Hour), 5},
		// 504 h at $0.01, less the $0.01 minimum charge already in the month to date.
		{"to the month's end under the cap", budget.Deployment{Start: now, HourlyUSD: 0.01, MonthlyUSD: 6.72, Priced: true}, monthEnd, 5.03},
		{"capped at the monthly price", budget.Deployment{Start: started, HourlyUSD: 1, MonthlyUSD: 672, Priced: true}, monthEnd, 672 - 240},
		{"already at the cap", budget.Deployment{Start: started, HourlyUSD: 1, MonthlyUSD: 200, Priced: true}, monthEnd, 0},
		{"unpriced counts nothing", budget.Deployment{Start: started, HourlyUSD: 1, Priced: false}, monthEnd, 0},
		{"end not after now", budget.Deployment{Start: started, HourlyUSD: 1, MonthlyUSD: 672, Priced: true}, now, 0},
		// 10 s run: $0.01 to date (the minimum); 110 s in all: $0.011.
		{"minimum charge counted once", budget.Deployment{Start: now.Add(-10 * time.Second), HourlyUSD: 0.36, MonthlyUSD: 241.92, Priced: true}, now.Add(100 * time.Second), 0.001},
		{"started last month", budget.Deployment{Start: monthStart.Add(-72 * time.Hour), HourlyUSD: 0.1, MonthlyUSD: 67.2, Priced: true}, now.Add(24 * time.Hour), 2.4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := budget.Cost(cost.DefaultRule, tc.d, now, tc.end, monthStart, monthEnd)
			if !near(got, tc.usd) {
				t.Fatalf("Cost = %.6f, want %.6f", got, tc.usd)
			}
		})
	}
}

// TestProjectAndLevel: the projection adds each deployment's projected
// charge to the month to date, names those run to the month's end (the
// costliest first), counts the unpriced; the level is past 80 % and past
// 100 %, never at them.
func TestProjectAndLevel(t *testing.T) {
	deps := []budget.Deployment{
		{Environment: "web", ID: "a", DropletID: 1, Start: monthStart, HourlyUSD: 1, MonthlyUSD: 672, Priced: true, DecideAt: now.Add(2 * time.Hour)},
		{Environment: "web", ID: "b", DropletID: 2, Start: monthStart, HourlyUSD: 0.1, MonthlyUSD: 67.2, Priced: true, Held: true},
		{Environment: "ci", ID: "c", Start: monthStart, HourlyUSD: 0.5, MonthlyUSD: 336, Priced: true, NoAgent: true},
		{Environment: "ci", ID: "d", Start: monthStart, Priced: false, DecideAt: now.Add(time.Hour)},
	}
	p := budget.Project(cost.DefaultRule, 100, deps, now)
	// a: 2 h at $1; b: 67.2 − 24; c: 336 − 120.
	want := 2 + (67.2 - 24) + (336 - 120)
	if p.Month != "2026-12" || !near(p.SpentUSD, 100) || !near(p.ProjectedUSD, want) || p.Unpriced != 1 {
		t.Fatalf("projection = %+v, want month 2026-12, spent 100, projected %.2f, 1 unpriced", p, want)
	}
	if len(p.Named) != 2 || p.Named[0].ID != "c" || p.Named[0].Reason != budget.ReasonNoAgent || p.Named[1].ID != "b" || p.Named[1].Reason != budget.ReasonHeld {
		t.Fatalf("named = %+v, want c (no agent) then b (held)", p.Named)
	}
	for _, tc := range []struct {
		name   string
		total  float64
		budget float64
		level  int
	}{
		{"under 80 %", 79, 100, 0},
		{"at 80 % is not past it", 80, 100, 0},
		{"past 80 %", 80.01, 100, budget.WarnPercent},
		{"at 100 % is not past it", 100, 100, budget.WarnPercent},
		{"past 100 %", 100.01, 100, budget.CriticalPercent},
		{"no budget", 1000, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := budget.Level(tc.total, tc.budget); got != tc.level {
				t.Fatalf("Level(%v, %v) = %d, want %d", tc.total, tc.budget, got, tc.level)
			}
		})
	}
}
