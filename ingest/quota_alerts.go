package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// Ingest is the detector of quota-exceeded, about an environment, of the
// alert table (docs/operations.md, "Alerts"): it holds while ingest
// refuses the environment's requests for a quota, that is from its first
// refusal until QuotaQuiet passes without one. A refused request only
// stamps the environment's last refusal in memory, under the lock the
// warning's dedup already takes, and on its first refusal wakes the
// quota-events loop without waiting; that loop reports the start and the
// end to the alerter. Nothing is written per request, and a refused
// request never waits for the alerter.

// QuotaQuiet is how long an environment must go without a quota refusal
// for quota-exceeded to end: longer than the quotas' minute windows and
// Retry-After times, so an agent that keeps flooding, refused at each
// retry, does not make the alert flap.
const QuotaQuiet = 15 * time.Minute

// maxQuotaAlertEnvs bounds the environments whose refusals are tracked for
// the alert at once (a deprecated shared key can name any slug); past it, a
// new environment's refusals raise nothing until one ends.
const maxQuotaAlertEnvs = 1024

// quotaAlertRetry is how soon a report to the alerter that failed is made
// again.
const quotaAlertRetry = 30 * time.Second

// refusing is one environment's quota-exceeded state.
type refusing struct {
	// last is its latest refusal; detail the first refusal's words.
	last   time.Time
	detail string
	// reported is set once its start was reported (or adopted from an
	// earlier process's open alert); ignored when its environment does
	// not exist (nothing is reported for it).
	reported, ignored bool
}

// refused stamps env's last refusal at at; its first wakes the loop. Call
// with n.mu held.
func (n *quotaNotes) refused(at time.Time, env, detail string) {
	r := n.refusing[env]
	if r == nil {
		if len(n.refusing) >= maxQuotaAlertEnvs {
			return
		}
		r = &refusing{detail: detail}
		n.refusing[env] = r
		select {
		case n.alertWake <- struct{}{}:
		default:
		}
	}
	if at.After(r.last) {
		r.last = at
	}
}

// quotaAlertDetail is quota-exceeded's words for env's first refusal.
func quotaAlertDetail(env, first string) string {
	return fmt.Sprintf("Ingest refuses requests of environment %s for a quota; the first: %s. It ends after %s without a refusal.", env, first, QuotaQuiet)
}

// QuotaAlertCheck is quota-exceeded's re-check at start (docs/operations.md,
// "Alerts"): a new process has seen no refusal yet, so it adopts the
// environment's open alert as if refused now, and the alert ends QuotaQuiet
// later unless a refusal comes (no resolve and fire again while a flood
// goes on across the restart). It always holds.
func (s *Service) QuotaAlertCheck(_ context.Context, subject alerts.Subject) (bool, string, error) {
	n := s.notes
	n.mu.Lock()
	r := n.refusing[subject.ID]
	if r == nil && len(n.refusing) < maxQuotaAlertEnvs {
		r = &refusing{last: s.clock.Now()}
		n.refusing[subject.ID] = r
	}
	if r != nil {
		r.reported = true
	}
	n.mu.Unlock()
	select {
	case n.alertWake <- struct{}{}:
	default:
	}
	return true, "", nil
}

// quotaAlerts reports quota-exceeded's changes to a (docs/operations.md,
// "Alerts"): each environment refusing and not yet reported is raised
// (when it exists), each reported one without a refusal for QuotaQuiet
// ends. It returns when it must look again (zero: nothing refusing).
func (w *QuotaEventWriter) quotaAlerts(ctx context.Context) time.Time {
	n, a := w.Service.notes, w.Alerts
	now := w.Service.clock.Now()
	type change struct {
		env, detail string
		holds       bool
	}
	var changes []change
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	n.mu.Lock()
	for env, r := range n.refusing {
		switch {
		case !r.reported:
			changes = append(changes, change{env, r.detail, true})
		case !now.Before(r.last.Add(QuotaQuiet)):
			delete(n.refusing, env)
			if !r.ignored {
				changes = append(changes, change{env: env})
			}
		default:
			later(r.last.Add(QuotaQuiet))
		}
	}
	n.mu.Unlock()
	for _, c := range changes {
		subject := alerts.Subject{Kind: alerts.SubjectEnvironment, ID: c.env}
		if c.holds {
			ignored := false
			if _, err := storage.EnvironmentBySlug(ctx, w.DB.Read, c.env); errors.Is(err, storage.ErrNotFound) {
				ignored = true
			} else if err != nil {
				w.Log.Error().Err(err).Str("loop", w.Name()).Msg("reading a refusing environment failed; looked at again")
				later(now.Add(quotaAlertRetry))
				continue
			}
			if !ignored {
				if err := a.Set(ctx, alerts.KindQuotaExceeded, subject, true, quotaAlertDetail(c.env, c.detail)); err != nil {
					w.Log.Error().Err(err).Str("loop", w.Name()).Str("environment", c.env).Msg("reporting quota-exceeded to the alerter failed; reported again soon")
					later(now.Add(quotaAlertRetry))
					continue
				}
			}
			n.mu.Lock()
			if r := n.refusing[c.env]; r != nil {
				r.reported, r.ignored = true, ignored
				later(r.last.Add(QuotaQuiet))
			}
			n.mu.Unlock()
			continue
		}
		if err := a.Set(ctx, alerts.KindQuotaExceeded, subject, false, ""); err != nil {
			// Its alert stays open; the re-check at the next start adopts
			// it and it ends QuotaQuiet after.
			w.Log.Error().Err(err).Str("loop", w.Name()).Str("environment", c.env).Msg("reporting the end of quota-exceeded to the alerter failed")
		}
	}
	return next
}
