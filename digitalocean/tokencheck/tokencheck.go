// Package tokencheck finds a DigitalOcean token that DigitalOcean refuses
// before a call that needs it does (docs/operations.md, "Alerts"): a
// Checker makes one read-only call with the token (GET /v2/account, through
// the client of the code that holds the token, which alone sees it) and
// reports the do-token-refused condition on the token's variable to the
// alerter, raising it on a refusal and lifting it when the token works
// again. It never makes a write to check.
package tokencheck

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/digitalocean"
)

// Interval is how often a token is checked on its own: hourly (and at
// start, and on `chalupa admin status --check-tokens`; docs/operations.md,
// "Alerts"). One GET an hour is nothing against a token's 5,000-an-hour
// budget.
const Interval = time.Hour

// States of a token after a check (Result.State).
const (
	// Works: DigitalOcean accepted the token: the account answered 200,
	// or 403 (the token authenticates but lacks account:read, as a
	// custom-scoped token may: it is not refused).
	Works = "works"
	// Refused: DigitalOcean answered 401 (unknown, expired or deleted
	// token). The do-token-refused condition holds.
	Refused = "refused"
	// Unreachable: no answer about the token (the API could not be
	// reached, timed out, answered 5xx or 429). Nothing is learned; the
	// condition stays as it was until a check gets an answer.
	Unreachable = "unreachable"
	// Unchecked: no check has run yet.
	Unchecked = "unchecked"
)

// Probe is the holder's read-only call with its token: nil when the call
// succeeded, else the digitalocean client's error (an *digitalocean.Error
// carrying the token's label, never its value).
type Probe func(ctx context.Context) error

// AccountProbe is the probe over a client's Account call (GET /v2/account).
func AccountProbe(c interface {
	Account(ctx context.Context) (digitalocean.Account, error)
}) Probe {
	return func(ctx context.Context) error {
		_, err := c.Account(ctx)
		return err
	}
}

// Result is what one check found about one token.
type Result struct {
	// Variable is the token's environment variable, never its value.
	Variable string
	// State is Works, Refused, Unreachable or Unchecked.
	State string
	// Detail says why, from the client's error (status and kind, never
	// the token); empty when the token works.
	Detail string
	// CheckedAt is when the check ran (zero when Unchecked).
	CheckedAt time.Time
}

// Subject is the do-token-refused alert's subject for variable: the
// platform, with the variable as its id, so each token's alert fires and
// lifts on its own (docs/operations.md, "Alerts").
func Subject(variable string) alerts.Subject {
	return alerts.Subject{Kind: alerts.SubjectPlatform, ID: variable}
}

// Checker checks one token. It is safe for concurrent use; checks of one
// token run one at a time.
type Checker struct {
	variable string
	probe    Probe
	alerts   alerts.Setter
	clock    clockwork.Clock
	log      zerolog.Logger

	// run keeps checks one at a time, so a check asked for while one
	// runs (at start, the alerter's re-check and the token loop's first
	// check) reads the same answer instead of calling twice.
	run sync.Mutex
	mu  sync.Mutex
	// last is the latest result.
	last Result
	// reported is what was last reported to the alerter (nil: nothing
	// yet, so the first answer is always reported, resolving an alert
	// left open by an earlier process).
	reported *bool
}

// New returns a checker of the token in variable through probe, reporting
// to setter (nil: none) on clock (nil: the real clock).
func New(variable string, probe Probe, setter alerts.Setter, clock clockwork.Clock, log zerolog.Logger) *Checker {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Checker{variable: variable, probe: probe, alerts: setter, clock: clock, log: log,
		last: Result{Variable: variable, State: Unchecked}}
}

// Variable is the token's variable.
func (c *Checker) Variable() string { return c.variable }

// Last is the latest result (State Unchecked before the first check).
func (c *Checker) Last() Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Check calls the probe now and reports the result: a refusal raises
// do-token-refused on the variable, an answer that the token works lifts
// it; an Unreachable result reports nothing.
func (c *Checker) Check(ctx context.Context) Result {
	c.run.Lock()
	defer c.run.Unlock()
	return c.check(ctx)
}

// CheckDue checks like Check unless a check answered within the last
// Interval, and returns the latest result either way: the hourly loop and
// the re-check at start call it, so the token is not checked twice.
func (c *Checker) CheckDue(ctx context.Context) Result {
	c.run.Lock()
	defer c.run.Unlock()
	if l := c.Last(); l.State != Unchecked && c.clock.Since(l.CheckedAt) < Interval {
		return l
	}
	return c.check(ctx)
}

// Recheck is the do-token-refused re-check for the alerter
// (alerter.RegisterCheck's Check) on this checker's subject: CheckDue's
// answer. An Unreachable answer is an error: the alert stays open.
func (c *Checker) Recheck(ctx context.Context, _ alerts.Subject) (bool, string, error) {
	r := c.CheckDue(ctx)
	if r.State == Unreachable {
		return false, "", errors.New(r.Detail)
	}
	return r.State == Refused, r.Detail, nil
}

func (c *Checker) check(ctx context.Context) Result {
	err := c.probe(ctx)
	r := Result{Variable: c.variable, State: Works, CheckedAt: c.clock.Now()}
	switch {
	case err == nil, errors.Is(err, digitalocean.ErrForbidden):
		// 403: DigitalOcean knows the token; it lacks account:read.
	case errors.Is(err, digitalocean.ErrUnauthorized):
		r.State, r.Detail = Refused, c.variable+": DigitalOcean refused the token on a read-only check (GET /v2/account): "+err.Error()
	default:
		r.State, r.Detail = Unreachable, c.variable+": the check got no answer about the token: "+err.Error()
	}
	c.mu.Lock()
	c.last = r
	c.mu.Unlock()
	if r.State == Unreachable {
		c.log.Warn().Str("variable", c.variable).Str("error", digitalocean.KindName(err)).Msg("checking a DigitalOcean token got no answer; checked again at the next hour")
		return r
	}
	c.report(ctx, r.State == Refused, r.Detail)
	return r
}

// report tells the alerter when the condition differs from what was last
// reported; a report that fails is logged and made again at the next check.
func (c *Checker) report(ctx context.Context, holds bool, detail string) {
	if c.alerts == nil {
		return
	}
	c.mu.Lock()
	same := c.reported != nil && *c.reported == holds
	c.mu.Unlock()
	if same {
		return
	}
	if err := c.alerts.Set(ctx, alerts.KindDOTokenRefused, Subject(c.variable), holds, detail); err != nil {
		c.log.Error().Err(err).Str("variable", c.variable).Bool("holds", holds).Msg("reporting a token check to the alerter failed; reported again at the next check")
		return
	}
	c.mu.Lock()
	c.reported = &holds
	c.mu.Unlock()
}
