package budget

import (
	"context"
	"errors"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// Raiser is what the detector reports to: alerts.Setter, and Escalate for
// the 100 % step (alerts/alerter's Alerter implements both).
type Raiser interface {
	alerts.Setter
	// Escalate reports the condition as holding at severity, which
	// overrides the table's: it opens the alert at that severity, or
	// raises an open one and sends it again.
	Escalate(ctx context.Context, kind string, subject alerts.Subject, severity alerts.Severity, detail string) error
}

// Config is what a Detector needs.
type Config struct {
	// DB is the database; required.
	DB *storage.DB
	// Alerts receives the condition; required.
	Alerts Raiser
	// BudgetUSD is CHALUPA_BUDGET_USD_MONTH (> 0).
	BudgetUSD float64
	// Rule is the billing rule the cost reconciler uses (zero:
	// cost.DefaultRule).
	Rule cost.Rule
	// ReaperOff is true when the reaper destroys nothing (CHALUPA_REAPER
	// off or dry-run): every deployment is then projected to the month's
	// end.
	ReaperOff bool
	// Fresh is how long a heartbeat's CI report counts as live, as the
	// reaper's (its decision times).
	Fresh time.Duration
	// Clock is the daemon's clock; nil is the real clock.
	Clock clockwork.Clock
	// Log receives a failed evaluation.
	Log zerolog.Logger
}

// Detector evaluates the budget condition. The alert's state is the
// alerts table itself: the open budget alert, opened this month, at
// warning (80 % passed) or critical (100 % passed), so each step is sent
// once a month across restarts.
type Detector struct{ cfg Config }

// New returns a detector over cfg. Errors: no database, no Raiser, a
// budget that is not positive.
func New(cfg Config) (*Detector, error) {
	if cfg.DB == nil || cfg.Alerts == nil || !(cfg.BudgetUSD > 0) {
		return nil, errors.New("budget: a database, an alerter and a positive budget are required")
	}
	if cfg.Rule == (cost.Rule{}) {
		cfg.Rule = cost.DefaultRule
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Detector{cfg: cfg}, nil
}

// subject is the budget condition's: the platform.
var subject = alerts.Subject{Kind: alerts.SubjectPlatform}

// Evaluate projects the month at the clock's now and reports the change
// (docs/operations.md, "Alerts", under Budget): an alert opened in an
// earlier month resolves; past 80 % with no alert open this month it
// fires (warning); past 100 % with none open at critical it is raised to
// critical (or opens at critical). A projection that falls back changes
// nothing before the month ends: each step is sent once a month. It
// returns the projection.
func (d *Detector) Evaluate(ctx context.Context) (Projection, error) {
	now := d.cfg.Clock.Now()
	start, _ := cost.MonthBounds(now)
	reached := 0
	open, err := storage.OpenAlertFor(ctx, d.cfg.DB.Read, alerts.KindBudget, subject.Kind, subject.ID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return Projection{}, err
	case open.OpenedAt.Before(start):
		if err := d.cfg.Alerts.Set(ctx, alerts.KindBudget, subject, false, ""); err != nil {
			return Projection{}, err
		}
	case open.Severity == string(alerts.Critical):
		reached = CriticalPercent
	default:
		reached = WarnPercent
	}
	p, err := d.project(ctx, now)
	if err != nil {
		return Projection{}, err
	}
	level := Level(p.TotalUSD(), d.cfg.BudgetUSD)
	if level <= reached {
		return p, nil
	}
	detail := Detail(p, d.cfg.BudgetUSD)
	if level == CriticalPercent {
		return p, d.cfg.Alerts.Escalate(ctx, alerts.KindBudget, subject, alerts.Critical, detail)
	}
	return p, d.cfg.Alerts.Set(ctx, alerts.KindBudget, subject, true, detail)
}

// project reads the month-to-date estimate (cost.EstimateMonth, the
// figure the cost reconciler stores) and the active deployments, and
// projects them at now.
func (d *Detector) project(ctx context.Context, now time.Time) (Projection, error) {
	start, _ := cost.MonthBounds(now)
	est, err := cost.EstimateMonth(ctx, d.cfg.DB.Read, d.cfg.Rule, start, now)
	if err != nil {
		return Projection{}, err
	}
	rows, err := storage.BudgetDeployments(ctx, d.cfg.DB.Read, d.cfg.Fresh)
	if err != nil {
		return Projection{}, err
	}
	deps := make([]Deployment, 0, len(rows))
	for _, r := range rows {
		deps = append(deps, Deployment{Environment: r.EnvironmentSlug, ID: r.ID, DropletID: r.DropletID, Start: r.BillingStart(),
			HourlyUSD: r.HourlyUSD, MonthlyUSD: r.MonthlyUSD, Priced: r.Priced, DecideAt: r.DecideAt,
			Held:      r.HoldUntil.After(now),
			ReaperOff: d.cfg.ReaperOff || !r.InReaperScope,
			NoAgent:   r.Source == storage.SourceInventory})
	}
	return Project(d.cfg.Rule, est.TotalUSD(), deps, now), nil
}

// AfterPass is the cost reconciler's hook: it evaluates after each pass,
// logging a failure (the next pass tries again).
func (d *Detector) AfterPass(ctx context.Context) {
	if _, err := d.Evaluate(ctx); err != nil && ctx.Err() == nil {
		d.cfg.Log.Warn().Err(err).Msg("evaluating the budget failed; the next cost pass tries again")
	}
}

// Check is the budget kind's re-check at start (alerter.RegisterCheck): an
// open budget alert still holds while its month lasts.
func (d *Detector) Check(ctx context.Context, _ alerts.Subject) (bool, string, error) {
	open, err := storage.OpenAlertFor(ctx, d.cfg.DB.Read, alerts.KindBudget, subject.Kind, subject.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	start, _ := cost.MonthBounds(d.cfg.Clock.Now())
	return !open.OpenedAt.Before(start), open.Detail, nil
}
