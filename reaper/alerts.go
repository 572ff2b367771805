package reaper

import (
	"context"
	"fmt"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/digitalocean/tokencheck"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// The reaper is the detector of six conditions of the alert table
// (docs/operations.md, "Alerts"): about the platform, its troubles
// (troubles.go) and the clock guard's hold (holds.go); about an
// environment, a mass of deployments falling due at once (holds.go). It reports a
// condition to Config.Alerts when it starts and when it ends; the alerter
// repeats it while it holds.
//
//   - reaper-token-refused: raised when DigitalOcean refuses the write
//     token (401, or 403 for a missing scope); ends at the next destroy
//     call the write token makes that succeeds (in dry run, which makes
//     none, at its next successful look at a droplet).
//   - reaper-rate-limited: raised when the write token is rate-limited;
//     ends when the hold lifts (the provider's retry time has passed).
//   - reaper-overdue: raised while active deployments are more than
//     OverdueAfter past their deadline; ends when none is any more.
//   - clock-step: raised while the clock guard holds for a wall-clock
//     step; clock-suspect while it holds for another reason (a clock
//     behind the high-water mark, the fleet's skew); both end when it
//     lifts.
//   - reaper-mass-due, about an environment: raised when a look finds
//     more than half of its active deployments (and at least MassDueMin)
//     due at once; ends at the first look that does not (looked at every
//     wake-up while it holds somewhere).
//
// It also holds the write token's read-only check (TokenCheck), which
// reports do-token-refused on the token's variable: the daemon's
// token-check loop calls it, and the token never leaves the reaper.

// initialAlerts are the conditions whose state at the start is known to be
// "not holding" in memory: a rate limit, the clock guard's hold and the
// overdue count are all observed afresh, and an alert left open by an
// earlier process is resolved by AlertChecks. A refused token is not
// known until the write token makes a call, so its first report, either
// way, is always sent.
var initialAlerts = []string{alerts.KindReaperRateLimited, alerts.KindReaperOverdue, alerts.KindClockStep, alerts.KindClockSuspect}

// platformSubject is the subject of every condition the reaper reports.
var platformSubject = alerts.Subject{Kind: alerts.SubjectPlatform}

// setAlert reports kind's condition to the alerter when it differs from
// what this reaper last reported (nothing is written while it stays the
// same). A report that fails is logged and made again at the next look.
func (r *Reaper) setAlert(ctx context.Context, kind string, holds bool, detail string) {
	if r.alerts == nil {
		return
	}
	r.alertMu.Lock()
	defer r.alertMu.Unlock()
	if was, known := r.alerted[kind]; known && was == holds {
		return
	}
	if err := r.alerts.Set(ctx, kind, platformSubject, holds, detail); err != nil {
		r.log.Error().Err(err).Str("kind", kind).Bool("holds", holds).Msg("reporting a condition to the alerter failed; reported again at the next look")
		return
	}
	r.alerted[kind] = holds
}

// massAlerts reports reaper-mass-due on each environment of envs, and its
// end on each environment last reported as holding that is not in envs;
// only changes are reported.
func (r *Reaper) massAlerts(ctx context.Context, envs []storage.MassDue) {
	if r.alerts == nil {
		return
	}
	r.alertMu.Lock()
	defer r.alertMu.Unlock()
	now := map[string]bool{}
	for _, e := range envs {
		now[e.EnvironmentSlug] = true
		if r.massAlerted[e.EnvironmentSlug] {
			continue
		}
		if err := r.alerts.Set(ctx, alerts.KindMassDue, envSubject(e.EnvironmentSlug), true, massDueDetail(e, r.maxDestroy)); err != nil {
			r.log.Error().Err(err).Str("kind", alerts.KindMassDue).Str("environment", e.EnvironmentSlug).Msg("reporting a condition to the alerter failed; reported again at the next look")
			continue
		}
		r.massAlerted[e.EnvironmentSlug] = true
	}
	for slug := range r.massAlerted {
		if now[slug] {
			continue
		}
		if err := r.alerts.Set(ctx, alerts.KindMassDue, envSubject(slug), false, ""); err != nil {
			r.log.Error().Err(err).Str("kind", alerts.KindMassDue).Str("environment", slug).Msg("reporting a condition's end to the alerter failed; reported again at the next look")
			continue
		}
		delete(r.massAlerted, slug)
	}
}

// massAlerting reports whether reaper-mass-due was last reported as
// holding on some environment.
func (r *Reaper) massAlerting() bool {
	r.alertMu.Lock()
	defer r.alertMu.Unlock()
	return len(r.massAlerted) > 0
}

// envSubject is the alert subject of the environment slug.
func envSubject(slug string) alerts.Subject {
	return alerts.Subject{Kind: alerts.SubjectEnvironment, ID: slug}
}

// massDueDetail is reaper-mass-due's words for e: the counts and the pace.
func massDueDetail(e storage.MassDue, maxDestroy int) string {
	return fmt.Sprintf("%d of %d active deployments of environment %s fell due at once; the reaper destroys at most %d a minute, oldest deadline first, and a heartbeat moves a live one's deadline.",
		e.Due, e.Active, e.EnvironmentSlug, maxDestroy)
}

// alerting reports whether the reaper last reported kind as holding.
func (r *Reaper) alerting(kind string) bool {
	r.alertMu.Lock()
	defer r.alertMu.Unlock()
	return r.alerted[kind]
}

// clockAlerts reports the clock guard's hold h (nil: none): clock-step
// while it holds for a step, clock-suspect while it holds for another
// reason; both end when it lifts.
func (r *Reaper) clockAlerts(ctx context.Context, h *clockguard.Hold) {
	step, suspect, detail := false, false, ""
	if h != nil {
		step, detail = h.Reason == clockguard.ReasonStep, suspectMessage(*h)
		suspect = !step
	}
	// The one that ends first, so a step replacing a suspicion never
	// shows both.
	if step {
		r.setAlert(ctx, alerts.KindClockSuspect, false, "")
		r.setAlert(ctx, alerts.KindClockStep, true, detail)
		return
	}
	r.setAlert(ctx, alerts.KindClockStep, false, "")
	r.setAlert(ctx, alerts.KindClockSuspect, suspect, detail)
}

// AlertChecks are the reaper's conditions' re-checks, by kind, for the
// alerter to run at start on every open alert of those kinds, so an alert
// whose end was lost in a crash or a restore resolves
// (docs/operations.md, "Alerts"). A refused token cannot be judged
// without a destroy call: its alert stays open until the write token's
// next destroy call succeeds (or resolves at once without a write token).
func (r *Reaper) AlertChecks() map[string]func(ctx context.Context, subject alerts.Subject) (holds bool, detail string, err error) {
	guard := func(step bool) func(context.Context, alerts.Subject) (bool, string, error) {
		return func(context.Context, alerts.Subject) (bool, string, error) {
			h := r.clockGuard.Evaluate().Global
			if h == nil || (h.Reason == clockguard.ReasonStep) != step {
				return false, "", nil
			}
			return true, suspectMessage(*h), nil
		}
	}
	return map[string]func(context.Context, alerts.Subject) (bool, string, error){
		alerts.KindReaperTokenRefused: func(context.Context, alerts.Subject) (bool, string, error) {
			if r.creds == nil {
				return false, "", nil
			}
			r.alertMu.Lock()
			defer r.alertMu.Unlock()
			was, known := r.alerted[alerts.KindReaperTokenRefused]
			return was || !known, "", nil
		},
		alerts.KindReaperRateLimited: func(context.Context, alerts.Subject) (bool, string, error) {
			return r.clock.Now().Before(r.limitedUntil()), "", nil
		},
		alerts.KindReaperOverdue: func(ctx context.Context, _ alerts.Subject) (bool, string, error) {
			n, err := storage.ReaperOverdue(ctx, r.db.Read, r.clock.Now().Add(-OverdueAfter), r.fresh)
			return n > 0, "", err
		},
		alerts.KindClockStep:    guard(true),
		alerts.KindClockSuspect: guard(false),
		alerts.KindMassDue: func(ctx context.Context, subject alerts.Subject) (bool, string, error) {
			envs, err := storage.ReaperMassDue(ctx, r.db.Read, r.clock.Now(), r.fresh, MassDueMin)
			if err != nil {
				return false, "", err
			}
			for _, e := range envs {
				if e.EnvironmentSlug == subject.ID {
					return true, massDueDetail(e, r.maxDestroy), nil
				}
			}
			return false, "", nil
		},
	}
}

// TokenCheck is the check of the write token (do-token-refused on
// Config.TokenVariable; docs/operations.md, "Alerts"): a read-only call
// made through the reaper's own client, so the token never leaves it. nil
// without a write token or a variable to name.
func (r *Reaper) TokenCheck() *tokencheck.Checker { return r.tokenCheck }
