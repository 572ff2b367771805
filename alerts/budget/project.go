// Package budget is the detector of the budget condition
// (docs/operations.md, "Alerts", under Budget): after each cost
// reconciliation pass it adds the month-to-date estimate to the projected
// cost of the active deployments, each projected to its own decision time,
// and reports a warning past 80 % of CHALUPA_BUDGET_USD_MONTH and a
// critical past 100 %, each once a calendar month (UTC). The projection is
// pure functions over the stored rates and deadlines.
package budget

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/reaper/cost"
)

// Why a deployment is projected to the month's end (docs/operations.md,
// "Alerts", under Budget): nothing will end it before.
const (
	// ReasonHeld: the reaper holds it.
	ReasonHeld = "held"
	// ReasonReaperOff: the reaper destroys nothing (CHALUPA_REAPER off
	// or dry-run), or no token may reap it (a customer organization
	// without an active provider token).
	ReasonReaperOff = "reaper off"
	// ReasonNoAgent: no agent reports for it (a droplet inventory
	// adopted), or it has no deadline at all.
	ReasonNoAgent = "no agent"
)

// Thresholds, in percent of the budget.
const (
	// WarnPercent: past it the budget alert fires as a warning.
	WarnPercent = 80
	// CriticalPercent: past it the alert is raised to critical.
	CriticalPercent = 100
)

// Deployment is one active deployment as the projection reads it.
type Deployment struct {
	// Environment and ID name it; DropletID is 0 when unknown.
	Environment, ID string
	DropletID       int64
	// Start is when its droplet's billing began.
	Start time.Time
	// HourlyUSD and MonthlyUSD are its captured rates; Priced is false
	// until captured (projected at 0 USD, counted as unpriced).
	HourlyUSD, MonthlyUSD float64
	Priced                bool
	// DecideAt is the reaper's decision time: the idle deadline or the
	// session expiry (zero: none).
	DecideAt time.Time
	// Held, ReaperOff and NoAgent mark a deployment nothing will end
	// before the month's end.
	Held, ReaperOff, NoAgent bool
}

// Name is "ENV/ID", and the droplet when known, as messages name it.
func (d Deployment) Name() string {
	if d.DropletID != 0 {
		return fmt.Sprintf("%s/%s (droplet %d)", d.Environment, d.ID, d.DropletID)
	}
	return d.Environment + "/" + d.ID
}

// End is when d's billing is projected to end within the month ending at
// monthEnd, seen at now, and why it runs to the month's end ("" when its
// decision time bounds it): a held deployment, one the reaper will not
// destroy, and one without an agent (or any deadline) run to monthEnd;
// any other ends at its decision time, or now when that has passed.
func End(d Deployment, now, monthEnd time.Time) (time.Time, string) {
	switch {
	case d.Held:
		return monthEnd, ReasonHeld
	case d.ReaperOff:
		return monthEnd, ReasonReaperOff
	case d.NoAgent, d.DecideAt.IsZero():
		return monthEnd, ReasonNoAgent
	}
	end := d.DecideAt
	if end.Before(now) {
		end = now
	}
	if end.After(monthEnd) {
		end = monthEnd
	}
	return end, ""
}

// Cost is d's projected charge (USD) in the month [monthStart, monthEnd)
// from now until end, under rule: the month's charge if it ran until end,
// less its month-to-date charge, so the minimum charge and the monthly cap
// count once (docs/operations.md, "Cost reconciliation"). 0 when unpriced
// or when end is not after now.
func Cost(rule cost.Rule, d Deployment, now, end, monthStart, monthEnd time.Time) float64 {
	if !d.Priced || !end.After(now) {
		return 0
	}
	full := rule.Charge(d.HourlyUSD, d.MonthlyUSD, d.Start, end, end, monthStart, monthEnd)
	sofar := rule.Charge(d.HourlyUSD, d.MonthlyUSD, d.Start, time.Time{}, now, monthStart, monthEnd)
	return max(full-sofar, 0)
}

// Named is a deployment projected to the month's end, and why.
type Named struct {
	Deployment
	Reason string
	// USD is its projected charge from now to the month's end.
	USD float64
}

// Projection is the month's estimate and projection.
type Projection struct {
	// Month is "YYYY-MM" (UTC).
	Month string
	// SpentUSD is the month-to-date estimate (the cost reconciler's);
	// ProjectedUSD the active deployments' projected charge after now.
	SpentUSD, ProjectedUSD float64
	// Named are the deployments projected to the month's end, the
	// costliest first.
	Named []Named
	// Unpriced counts active deployments without a captured rate.
	Unpriced int
}

// TotalUSD is spent plus projected.
func (p Projection) TotalUSD() float64 { return p.SpentUSD + p.ProjectedUSD }

// Project projects deps at now under rule on top of spentUSD, the month's
// estimate to date.
func Project(rule cost.Rule, spentUSD float64, deps []Deployment, now time.Time) Projection {
	start, end := cost.MonthBounds(now)
	p := Projection{Month: cost.MonthName(start), SpentUSD: spentUSD}
	for _, d := range deps {
		if !d.Priced {
			p.Unpriced++
		}
		until, reason := End(d, now, end)
		usd := Cost(rule, d, now, until, start, end)
		p.ProjectedUSD += usd
		if reason != "" {
			p.Named = append(p.Named, Named{Deployment: d, Reason: reason, USD: usd})
		}
	}
	sort.SliceStable(p.Named, func(i, j int) bool { return p.Named[i].USD > p.Named[j].USD })
	return p
}

// Level is the threshold totalUSD has reached against budgetUSD: 0,
// WarnPercent or CriticalPercent. Passing means more than: a total equal
// to 80 % is not past it.
func Level(totalUSD, budgetUSD float64) int {
	switch {
	case budgetUSD <= 0:
		return 0
	case totalUSD > budgetUSD*CriticalPercent/100:
		return CriticalPercent
	case totalUSD > budgetUSD*WarnPercent/100:
		return WarnPercent
	}
	return 0
}

// MaxNamed is how many deployments a message names; the rest are counted.
const MaxNamed = 20

// Detail is the alert's words for p against budgetUSD: the figures, then
// the deployments projected to the month's end, by name and reason.
func Detail(p Projection, budgetUSD float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Month %s (UTC): $%.2f estimated to date + $%.2f projected = $%.2f, %.0f %% of CHALUPA_BUDGET_USD_MONTH ($%.2f).",
		p.Month, cost.RoundCents(p.SpentUSD), cost.RoundCents(p.ProjectedUSD), cost.RoundCents(p.TotalUSD()),
		100*p.TotalUSD()/budgetUSD, budgetUSD)
	if len(p.Named) > 0 {
		fmt.Fprintf(&b, "\nProjected to the month's end (%d):", len(p.Named))
		for i, n := range p.Named {
			if i == MaxNamed {
				fmt.Fprintf(&b, "\n- … and %d more", len(p.Named)-MaxNamed)
				break
			}
			fmt.Fprintf(&b, "\n- %s: %s, $%.2f", n.Name(), n.Reason, cost.RoundCents(n.USD))
		}
	}
	if p.Unpriced > 0 {
		fmt.Fprintf(&b, "\n%d active deployments have no captured rate yet and count as $0.", p.Unpriced)
	}
	return b.String()
}
