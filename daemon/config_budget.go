package daemon

import (
	"strconv"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/budget"
	"github.com/chalupa-run/chalupa/alerts/digest"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
)

// NotifyConfig is the budget alert and the daily digest
// (CHALUPA_BUDGET_USD_MONTH, CHALUPA_ALERT_DIGEST, CHALUPA_ALERT_TZ;
// docs/operations.md, "Alerts").
type NotifyConfig struct {
	// BudgetUSD is CHALUPA_BUDGET_USD_MONTH: the month's budget in USD;
	// 0 when unset (no budget alert).
	BudgetUSD float64
	// Digest is CHALUPA_ALERT_DIGEST (HH:MM), "" when off.
	Digest string
	// TZ is CHALUPA_ALERT_TZ, the digest's IANA zone ("" is UTC).
	TZ string
	// DigestSchedule is the parsed digest time, valid when Digest is set.
	DigestSchedule digest.Schedule `json:"-"`
}

// MaxBudgetUSD bounds CHALUPA_BUDGET_USD_MONTH: a figure past it is a typo.
const MaxBudgetUSD = 10_000_000

// notifyVariables are the budget's and the digest's rows.
func (c *Config) notifyVariables() []variable {
	n := &c.Notify
	digestGroup := "`CHALUPA_ALERT_DIGEST`, `CHALUPA_ALERT_TZ`"
	return []variable{
		{name: "CHALUPA_BUDGET_USD_MONTH", ptr: &n.BudgetUSD, load: n.loadBudget, show: n.budgetText,
			help: "monthly budget in USD: alert past 80 % (warning) and 100 % (critical) of the projected month",
			doc: docRow{def: "unset: no budget alert",
				refusedWhen: "not a number above 0 and at most 10000000 (NaN refused); set while costs are off",
				why:         "the month-to-date estimate and the rates come from cost reconciliation (see \"Alerts\", under Budget)"}},
		{name: "CHALUPA_ALERT_DIGEST", ptr: &n.Digest, load: func(_ *loader, v string) { n.Digest = v }, show: n.digestText,
			help: "daily alert digest at HH:MM in CHALUPA_ALERT_TZ (off when unset)",
			doc: docRow{group: digestGroup, def: "unset: no digest; zone UTC",
				refusedWhen: "not `HH:MM` from 00:00 to 23:59; a zone the system's time zone database does not hold; the zone set without the digest",
				why:         "a wall-clock time in the operator's zone, once each local day, DST days included (see \"Alerts\", under Digest)"}},
		{name: "CHALUPA_ALERT_TZ", ptr: &n.TZ, load: func(_ *loader, v string) { n.TZ = v }, show: func() string { return orUnset(n.TZ) },
			help: "the digest's IANA time zone (default UTC)",
			doc:  docRow{group: digestGroup}},
	}
}

// loadBudget reads CHALUPA_BUDGET_USD_MONTH.
func (n *NotifyConfig) loadBudget(l *loader, v string) {
	if v == "" {
		return
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= MaxBudgetUSD) { // also refuses NaN
		l.bad("CHALUPA_BUDGET_USD_MONTH must be a number of USD above 0 and at most %d", MaxBudgetUSD)
		return
	}
	n.BudgetUSD = f
}

// budgetText previews CHALUPA_BUDGET_USD_MONTH.
func (n *NotifyConfig) budgetText() string {
	if n.BudgetUSD > 0 {
		return strconv.FormatFloat(n.BudgetUSD, 'f', -1, 64) + " USD a month (alerts past 80 % and 100 %)"
	}
	return "(unset: no budget alert)"
}

// digestText previews CHALUPA_ALERT_DIGEST.
func (n *NotifyConfig) digestText() string {
	if n.Digest == "" {
		return "(unset: no digest)"
	}
	return n.DigestSchedule.String()
}

// validateNotify checks the budget against cost reconciliation and parses
// the digest's time and zone (docs/operations.md, "Alerts"). It runs after
// validateCosts.
func (c *Config) validateNotify(l *loader) {
	n := &c.Notify
	if n.BudgetUSD > 0 && !c.Costs.On {
		l.bad("CHALUPA_BUDGET_USD_MONTH needs cost reconciliation: set DIGITALOCEAN_READ_TOKEN (and CHALUPA_COSTS=on), or unset the budget")
	}
	if n.Digest == "" {
		if n.TZ != "" {
			l.bad("CHALUPA_ALERT_TZ is set but CHALUPA_ALERT_DIGEST is not")
		}
		return
	}
	s, err := digest.ParseSchedule(n.Digest, n.TZ)
	if err != nil {
		l.bad("%v", err)
		return
	}
	n.DigestSchedule = s
}

// newNotify wires the budget alert onto the cost reconciler's passes and
// builds the daily digest (nil when CHALUPA_ALERT_DIGEST is unset: no loop,
// no timer). The budget needs the reconciler, which validateNotify
// requires (docs/operations.md, "Alerts"). Errors: the detector's or the
// digest's construction.
func newNotify(cfg *Config, db *storage.DB, clock clockwork.Clock, log zerolog.Logger, w *workers) (*digest.Digest, error) {
	if cfg.Notify.BudgetUSD > 0 && w.costs != nil {
		fresh := cfg.Reaper.CIFreshness
		if fresh <= 0 {
			fresh = reaper.DefaultCIFreshness
		}
		det, err := budget.New(budget.Config{DB: db, Alerts: w.alerter, BudgetUSD: cfg.Notify.BudgetUSD, Rule: w.costs.Rule(),
			ReaperOff: w.reaper == nil || !w.reaper.Configured() || cfg.Reaper.DryRun, Fresh: fresh, Clock: clock,
			Log: log.With().Str("loop", "budget").Logger()})
		if err != nil {
			return nil, err
		}
		if err := w.alerter.RegisterCheck(alerts.KindBudget, det.Check); err != nil {
			return nil, err
		}
		w.costs.SetAfterPass(det.AfterPass)
	}
	if cfg.Notify.Digest == "" {
		return nil, nil
	}
	return digest.New(digest.Config{DB: db, Alerts: w.alerter, Schedule: cfg.Notify.DigestSchedule, Clock: clock,
		Log: log.With().Str("loop", LoopDigest).Logger()})
}

// LoopDigest is the digest loop's name in logs. Like the alerter it has
// no switch: it changes nothing in the fleet (docs/operations.md, "Loop
// switches").
const LoopDigest = "alert-digest"
