package daemon

import (
	"context"
	"sync"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/tokencheck"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/reaper"
)

// LoopTokenChecks is the token-check loop's name in logs. It has no
// switch: it writes nothing at DigitalOcean, and a paused check would hide
// a refused token until a destroy needs it (docs/operations.md, "Alerts").
const LoopTokenChecks = "token-checks"

// tokenChecks checks each DigitalOcean token the daemon holds at start,
// hourly and on `chalupa admin status --check-tokens`, each through the
// code that holds it (docs/operations.md, "Alerts"): the read token
// through the read client, the write token through the reaper, the
// provision token through the converge executor. It holds checkers, never
// a token.
type tokenChecks struct {
	checkers []*tokencheck.Checker
	clock    clockwork.Clock
	log      zerolog.Logger
	// runs counts the loop's rounds of checks (tests wait on it).
	mu   sync.Mutex
	runs int
}

// tokenCheckProbe is the converge executor's read-only check of the
// provision token (pulumiexec.Executor.CheckToken).
type tokenCheckProbe interface {
	CheckToken(ctx context.Context) error
}

// newTokenChecks builds the checks of the tokens the workers hold, in the
// order read, write, provision, and registers do-token-refused's re-check
// at start on al: an open alert whose variable holds no token any more
// resolves. Errors: the registration's.
func newTokenChecks(cfg *Config, read *digitalocean.Client, r *reaper.Reaper, exec jobs.Executor, al *alerter.Alerter, clock clockwork.Clock, log zerolog.Logger) (*tokenChecks, error) {
	log = log.With().Str("loop", LoopTokenChecks).Logger()
	t := &tokenChecks{clock: clock, log: log}
	var setter alerts.Setter
	if al != nil {
		setter = al
	}
	if read != nil {
		t.checkers = append(t.checkers, tokencheck.New(readTokenVariable, tokencheck.AccountProbe(read), setter, clock, log))
	}
	if r != nil && r.TokenCheck() != nil {
		t.checkers = append(t.checkers, r.TokenCheck())
	}
	if p, ok := exec.(tokenCheckProbe); ok && cfg.Converge.token() != "" {
		t.checkers = append(t.checkers, tokencheck.New(provisionTokenVariable, p.CheckToken, setter, clock, log))
	}
	if al == nil {
		return t, nil
	}
	return t, al.RegisterCheck(alerts.KindDOTokenRefused, t.recheck)
}

// Variables named by the checks (docs/operations.md, "Configuration");
// the write token's is named by the reaper's wiring alone.
const (
	readTokenVariable      = "DIGITALOCEAN_READ_TOKEN"
	provisionTokenVariable = "DIGITALOCEAN_PROVISION_TOKEN"
)

// recheck is do-token-refused's re-check at start: the subject's token
// checked (or its answer within the hour reused); a variable that holds no
// token any more does not hold the condition.
func (t *tokenChecks) recheck(ctx context.Context, subject alerts.Subject) (bool, string, error) {
	for _, c := range t.checkers {
		if c.Variable() == subject.ID {
			return c.Recheck(ctx, subject)
		}
	}
	return false, "", nil
}

// Name implements Loop.
func (*tokenChecks) Name() string { return LoopTokenChecks }

// Run checks every token at start (unless a check answered within the
// hour) and then once an hour, with one timer and nothing else while it
// waits. It returns nil when ctx ends.
func (t *tokenChecks) Run(ctx context.Context) error {
	if len(t.checkers) == 0 {
		<-ctx.Done()
		return nil
	}
	for {
		for _, c := range t.checkers {
			c.CheckDue(ctx)
		}
		t.mu.Lock()
		t.runs++
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.clock.After(tokencheck.Interval):
		}
	}
}

// rounds is how many rounds of checks Run has made.
func (t *tokenChecks) rounds() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs
}

// checkNow checks every token now, in parallel (each call bounded by its
// client's request timeout), for adminCheckTokens.
func (t *tokenChecks) checkNow(ctx context.Context) adminapi.TokenChecks {
	out := make([]tokencheck.Result, len(t.checkers))
	var wg sync.WaitGroup
	for i, c := range t.checkers {
		wg.Go(func() { out[i] = c.Check(ctx) })
	}
	wg.Wait()
	return tokenChecksWire(out)
}

// last is every token's latest check, for adminGetStatus.
func (t *tokenChecks) last() []adminapi.TokenCheck {
	out := make([]tokencheck.Result, len(t.checkers))
	for i, c := range t.checkers {
		out[i] = c.Last()
	}
	return tokenChecksWire(out).Tokens
}

// tokenChecksWire is the wire form of rs.
func tokenChecksWire(rs []tokencheck.Result) adminapi.TokenChecks {
	out := adminapi.TokenChecks{Tokens: []adminapi.TokenCheck{}}
	for _, r := range rs {
		w := adminapi.TokenCheck{Variable: r.Variable, State: r.State, Detail: r.Detail}
		if !r.CheckedAt.IsZero() {
			at := r.CheckedAt.UTC()
			w.CheckedAt = &at
		}
		out.Tokens = append(out.Tokens, w)
	}
	return out
}
