package reaper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/storage"
)

// Customer sweep bounds (docs/operations.md, "Customer organizations").
const (
	// MaxCustomerOrgsPerTick is the most customer organizations one tick
	// sweeps: one customer with a broken API cannot hold
	// every other customer's droplets alive.
	MaxCustomerOrgsPerTick = 5
	// CustomerBudget is the provider work one tick's customer sweep may
	// spend; the sweep stops once it is spent and
	// the rest waits for the next tick.
	CustomerBudget = 22 * time.Second
	// shuffleSalt mixes the minute into the sweep order's seed.
	shuffleSalt = 0x63_68_61_6c_75_70_61 // "chalupa"
)

// ActionTokenInvalid: DigitalOcean refused the customer's token (401/403)
// on a droplet call; the token was marked invalid and the organization's
// sweep stopped. The platform token is never used instead.
const ActionTokenInvalid = "token-invalid"

// CustomerCredentials gives a customer organization's droplet client: built
// on its own stored provider token, never the platform's. generation is the
// token generation it was built from (the compare-and-set value when the
// token is refused). Errors: the organization holds no active token, or
// the token cannot be opened; the organization is then not swept.
type CustomerCredentials interface {
	CustomerClient(ctx context.Context, org storage.Organization) (client digitalocean.DropletAPI, generation int64, err error)
}

// TokenSource opens a customer organization's active provider token
// (ingest.ProviderTokens.Active).
type TokenSource interface {
	Active(ctx context.Context, orgID int64) (token []byte, generation int64, err error)
}

// CustomerTokens implements CustomerCredentials with digitalocean clients,
// one per organization and token generation, labelled
// "customer:<org slug>". A client is used only as a DropletAPI.
type CustomerTokens struct {
	// Source opens the stored tokens.
	Source TokenSource
	// BaseURL is CHALUPA_DO_API_URL; Version goes in the User-Agent.
	BaseURL, Version string
	// Clock drives the clients' rate-limit windows.
	Clock clockwork.Clock
	// Log receives the clients' rate-limit warnings (never a token).
	Log zerolog.Logger

	mu      sync.Mutex
	clients map[int64]customerClient
}

type customerClient struct {
	generation int64
	client     *digitalocean.Client
}

// CustomerClient implements CustomerCredentials: a cached client while the
// stored generation is unchanged, a new one after a rotation.
func (ct *CustomerTokens) CustomerClient(ctx context.Context, org storage.Organization) (digitalocean.DropletAPI, int64, error) {
	token, gen, err := ct.Source.Active(ctx, org.ID)
	if err != nil {
		return nil, 0, err
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if c, ok := ct.clients[org.ID]; ok && c.generation == gen {
		return c.client, gen, nil
	}
	c, err := digitalocean.New(digitalocean.Config{BaseURL: ct.BaseURL, Token: digitalocean.Token(token), Label: "customer:" + org.Slug,
		Version: ct.Version, Clock: ct.Clock, Logger: ct.Log})
	if err != nil {
		return nil, 0, err
	}
	if ct.clients == nil {
		ct.clients = map[int64]customerClient{}
	}
	ct.clients[org.ID] = customerClient{generation: gen, client: c}
	return c, gen, nil
}

// SweepOrder returns orgs (ordered by id) in the customer sweep's order
// for the minute holding now: a shuffle seeded from that minute, so the
// order is new each minute, the same for every tick within it, and
// reproducible in tests.
func SweepOrder(orgs []storage.Organization, now time.Time) []storage.Organization {
	out := slices.Clone(orgs)
	slices.SortFunc(out, func(a, b storage.Organization) int { return int(a.ID - b.ID) })
	minute := uint64(now.Unix() / 60)
	rng := rand.New(rand.NewPCG(minute, shuffleSalt))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// customerScope is what handling one customer deployment needs beyond the
// platform path: the organization and the token generation in use.
type customerScope struct {
	org        storage.Organization
	generation int64
}

// sweepCustomers is the customer sweep of one tick: at most
// MaxCustomerOrgsPerTick organizations with due deployments, in
// SweepOrder, each with its own token only, until CustomerBudget is spent.
func (r *Reaper) sweepCustomers(ctx context.Context, g gate, res *TickResult, holds *[]held) error {
	if r.customers == nil {
		return nil
	}
	start := r.clock.Now()
	orgs, err := storage.CustomerDueOrgs(ctx, r.db.Read, start, r.fresh)
	if err != nil {
		return err
	}
	orgs = SweepOrder(orgs, start)
	if len(orgs) > MaxCustomerOrgsPerTick {
		orgs, res.More = orgs[:MaxCustomerOrgsPerTick], true
	}
	spent := func() bool { return r.clock.Since(start) >= CustomerBudget }
	for _, org := range orgs {
		if spent() {
			res.More, res.CustomerBudgetSpent = true, true
			return nil
		}
		res.CustomerOrgs = append(res.CustomerOrgs, org.Slug)
		client, gen, err := r.customers.CustomerClient(ctx, org)
		if err != nil {
			// Revoked or invalidated since the list was read, or an
			// envelope that does not open: never another token.
			r.log.Warn().Str("organization", org.Slug).Err(err).Msg("customer token unavailable; organization not swept")
			continue
		}
		due, err := storage.ReaperDueInOrg(ctx, r.db.Read, org.ID, r.clock.Now(), r.fresh, MaxPerTick+1)
		if err != nil {
			return err
		}
		if len(due) > MaxPerTick {
			due, res.More = due[:MaxPerTick], true
		}
		scope := &customerScope{org: org, generation: gen}
		for _, c := range due {
			if spent() {
				res.More, res.CustomerBudgetSpent = true, true
				return nil
			}
			proceed, stop := r.admit(g, c, res, holds)
			if stop {
				return nil
			}
			if !proceed {
				continue
			}
			o := r.process(ctx, c, client, scope)
			res.Outcomes = append(res.Outcomes, o)
			if o.Action == ActionTokenInvalid || o.Action == ActionRateLimited {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
		}
	}
	return nil
}

// customerRefused handles a 401/403 on a customer's droplet call: the
// token is marked invalid only if it is still the generation the sweep
// used (a concurrent rotation keeps the newer token, and the deployment is
// tried again with it at the next tick), with one reaper-warning reason
// provider under the organization per generation.
func (r *Reaper) customerRefused(ctx context.Context, c storage.ReaperCandidate, o Outcome, scope *customerScope, cause error) Outcome {
	now := r.clock.Now()
	o.Detail = cause.Error()
	var invalidated, inserted bool
	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		invalidated, err = storage.InvalidateProviderToken(ctx, tx, scope.org.ID, scope.generation, now)
		if err != nil || !invalidated {
			return err
		}
		inserted, err = storage.InsertOrgEvent(ctx, tx, storage.OrgEvent{
			ID:    "reaper-warning:org:" + scope.org.Slug + ":invalid:" + strconv.FormatInt(scope.generation, 10),
			OrgID: scope.org.ID, Kind: KindWarning, Reason: ReasonProvider, OccurredAt: now,
			Message: fmt.Sprintf("DigitalOcean refused the organization's provider token (%s): marked invalid; its deployments are not reaped until a new token is set, and never with the platform token", statusOf(cause)),
		})
		return err
	})
	if err != nil {
		return r.dbFault(o, err)
	}
	if !invalidated {
		o.Action, o.Detail = ActionFailed, "the provider token was replaced while it was in use; the new one is used next tick"
		return o
	}
	o.Action = ActionTokenInvalid
	if r.metrics != nil {
		r.metrics.TokensInvalidated.Inc()
		if inserted {
			r.metrics.Warnings.Inc()
		}
	}
	r.log.Warn().Str("organization", scope.org.Slug).Int64("generation", scope.generation).Str("environment", c.EnvironmentSlug).
		Str("deployment", c.DeploymentID).Msg("customer provider token refused; marked invalid")
	return o
}

// statusOf is "401" or "403" for a refused call (the status only: the
// error's text stays in logs and outcomes).
func statusOf(err error) string {
	var e *digitalocean.Error
	if errors.As(err, &e) && e.Status != 0 {
		return strconv.Itoa(e.Status)
	}
	return "refused"
}

// customerRateLimited holds one customer deployment until the customer
// token's retry time: a customer's rate limit never holds back the
// platform token or another customer.
func (r *Reaper) customerRateLimited(ctx context.Context, c storage.ReaperCandidate, o Outcome, err error) Outcome {
	now := r.clock.Now()
	at, ok := digitalocean.RetryAt(err)
	if !ok || !at.After(now) {
		at = now.Add(digitalocean.MinBackoff)
	}
	o.Action, o.Detail = ActionRateLimited, err.Error()
	if herr := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.SetReaperHold(ctx, tx, c.EnvironmentID, c.DeploymentID, storage.ReaperHold{Until: at, Reason: HoldRateLimited,
			Max: max(at.Sub(now), time.Millisecond), Evidence: "the organization's provider token is rate-limited: " + o.Detail})
	}); herr != nil {
		return r.dbFault(o, herr)
	}
	if r.metrics != nil {
		r.metrics.RateLimited.Inc()
	}
	return o
}
