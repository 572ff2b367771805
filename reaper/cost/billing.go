// Package cost is chalupa's inventory and cost reconciliation worker
// (docs/operations.md, "Cost reconciliation"): every 15 minutes, on the
// quarter hour, and on demand, it lists the chalupa-tagged droplets and
// volumes with DIGITALOCEAN_READ_TOKEN only, adopts droplets no agent
// reported, ends deployments whose droplet is gone, captures each
// deployment's launch-time rate once, and stores a cost snapshot with the
// month-to-date estimate. Estimates only: the DigitalOcean invoice is
// authoritative.
package cost

import (
	"math"
	"time"
)

// The billing rule (docs/operations.md, "Cost reconciliation"), from
// DigitalOcean's own statements:
//
//   - Since 2026-01-01 droplets are billed per second, with a minimum
//     charge of 60 seconds or $0.01, whichever is higher (DigitalOcean
//     changelog, 2026-01-01, as quoted by DigitalOcean staff on
//     digitalocean.com/community; before that, hourly with a one-hour
//     minimum: docs.digitalocean.com/products/droplets/details/pricing).
//   - "You will never be billed more than the monthly cost of your
//     Droplet": each droplet's charge in a calendar month is capped at its
//     size's price_monthly, which equals 672 hours (4 weeks) at the hourly
//     rate (digitalocean.com/help/pricing-and-billing/general).
//   - Billing runs from creation to destruction, powered off or not.
//
// Volumes follow the same shape at DO_VOLUME_USD_PER_GIB_MONTH per GiB for
// a full month (672 hours), per second below that, and stay billed after
// the environment's compute has ended.
//
// If the provider changes the rule, the operator sets DO_BILLING_* (the
// daemon's configuration builds a Rule from DefaultRule and them) until
// DefaultRule and the docs are updated: it is a value handed to the
// Reconciler and Estimate, not spread through the code.
const (
	// BillingGranularity is the unit usage is rounded up to.
	BillingGranularity = time.Second
	// MinimumBilled is the shortest duration a droplet is billed for.
	MinimumBilled = 60 * time.Second
	// MinimumChargeUSD is the smallest charge for one droplet.
	MinimumChargeUSD = 0.01
	// MonthlyCapHours is the usage in a calendar month after which the
	// monthly price applies instead (4 weeks).
	MonthlyCapHours = 672
	// DefaultVolumeUSDPerGiBMonth is the volume storage rate when
	// DO_VOLUME_USD_PER_GIB_MONTH is unset: DigitalOcean's list price for
	// Volumes Block Storage, $0.10 per GiB per month
	// (digitalocean.com/pricing/volumes, reviewed 2026). Review it against
	// the current rate.
	DefaultVolumeUSDPerGiBMonth = 0.10
)

// Rule is a provider billing rule for one resource kind.
type Rule struct {
	// Granularity is the unit usage is rounded up to (> 0).
	Granularity time.Duration
	// MinimumBilled is the least usage one resource's life is billed for.
	MinimumBilled time.Duration
	// MinimumChargeUSD is the least one resource's life costs.
	MinimumChargeUSD float64
	// CapHours is the usage in one calendar month beyond which the
	// monthly price is charged instead.
	CapHours float64
}

// DefaultRule is DigitalOcean's droplet billing rule since 2026-01-01.
var DefaultRule = Rule{
	Granularity:      BillingGranularity,
	MinimumBilled:    MinimumBilled,
	MinimumChargeUSD: MinimumChargeUSD,
	CapHours:         MonthlyCapHours,
}

// MonthBounds returns the calendar month (UTC) holding t: [start, end).
func MonthBounds(t time.Time) (start, end time.Time) {
	t = t.UTC()
	start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// ParseMonth parses "YYYY-MM" into its bounds (UTC). Errors: any other
// form.
func ParseMonth(s string) (start, end time.Time, err error) {
	t, err := time.Parse("2006-01", s)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	start, end = MonthBounds(t)
	return start, end, nil
}

// MonthName is "YYYY-MM" of the month holding t (UTC).
func MonthName(t time.Time) string { return t.UTC().Format("2006-01") }

// Charge is the estimated charge (USD) in the month [monthStart, monthEnd)
// for one resource billed hourlyUSD per hour with monthly price monthlyUSD
// (0: CapHours × hourlyUSD), alive from start until end (end zero: still
// alive at now). Usage after now is not counted (month to date). The
// minimum duration and charge apply to a life that starts inside the
// month; the cap applies per calendar month.
func (r Rule) Charge(hourlyUSD, monthlyUSD float64, start, end, now, monthStart, monthEnd time.Time) float64 {
	if hourlyUSD <= 0 {
		return 0
	}
	if end.IsZero() || end.After(now) {
		end = now
	}
	if end.Before(start) {
		end = start
	}
	// The minimum duration and charge belong to the month the life
	// started in (and only once it has started).
	startsHere := !start.Before(monthStart) && start.Before(monthEnd) && !start.After(now)
	used := earlier(end, monthEnd).Sub(later(start, monthStart))
	if used <= 0 && !startsHere {
		return 0
	}
	if used < 0 {
		used = 0
	}
	if g := r.Granularity; g > 0 && used%g != 0 {
		used = used - used%g + g
	}
	if startsHere && used < r.MinimumBilled {
		used = r.MinimumBilled
	}
	usd := hourlyUSD * used.Hours()
	if startsHere && usd < r.MinimumChargeUSD {
		usd = r.MinimumChargeUSD
	}
	limit := monthlyUSD
	if limit <= 0 && r.CapHours > 0 {
		limit = hourlyUSD * r.CapHours
	}
	if limit > 0 && usd > limit {
		usd = limit
	}
	return usd
}

// VolumeCharge is the estimated storage charge (USD) in the month for a
// volume of gib GiB at usdPerGiBMonth, alive from start until end (zero:
// still present at now): per second, capped at a full month's price once
// it exists CapHours in the month.
func (r Rule) VolumeCharge(gib int64, usdPerGiBMonth float64, start, end, now, monthStart, monthEnd time.Time) float64 {
	if gib <= 0 || usdPerGiBMonth <= 0 || r.CapHours <= 0 {
		return 0
	}
	monthly := float64(gib) * usdPerGiBMonth
	storage := Rule{Granularity: r.Granularity, CapHours: r.CapHours}
	return storage.Charge(monthly/r.CapHours, monthly, start, end, now, monthStart, monthEnd)
}

// RoundCents rounds usd to whole cents, for display.
func RoundCents(usd float64) float64 { return math.Round(usd*100) / 100 }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
