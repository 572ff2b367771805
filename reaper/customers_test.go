package reaper_test

import (
	"context"
	"crypto/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
)

// customerFixture adds customer organizations with provider tokens stored
// through ingest.ProviderTokens (real envelopes under a master key) to a
// reaper fixture whose customer sweep opens them.
type customerFixture struct {
	*fixture
	tokens *ingest.ProviderTokens
	reg    *prometheus.Registry
}

func newCustomerFixture(t *testing.T, wrap func(reaper.CustomerCredentials, *clockwork.FakeClock) reaper.CustomerCredentials) *customerFixture {
	t.Helper()
	return armCustomerSweep(newFixture(t), wrap)
}

// armCustomerSweep rebuilds f's reaper with a customer sweep over tokens
// stored through ingest.ProviderTokens under a fresh master key; wrap (may
// be nil) wraps the sweep's credentials.
func armCustomerSweep(f *fixture, wrap func(reaper.CustomerCredentials, *clockwork.FakeClock) reaper.CustomerCredentials) *customerFixture {
	t := f.t
	t.Helper()
	cf := customerFixture{fixture: f}
	cf.r = cf.newReaper(func(c *reaper.Config) {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		sealer, err := ingest.OpenSealer(context.Background(), c.DB, key, t0)
		if err != nil {
			t.Fatal(err)
		}
		cf.tokens = ingest.NewProviderTokens(c.DB, sealer, c.Clock)
		var creds reaper.CustomerCredentials = &reaper.CustomerTokens{Source: cf.tokens, BaseURL: cf.fake.URL, Clock: c.Clock}
		if wrap != nil {
			creds = wrap(creds, c.Clock.(*clockwork.FakeClock))
		}
		c.Customers = creds
		cf.reg = prometheus.NewRegistry()
		if c.Metrics, err = reaper.NewMetrics(cf.reg); err != nil {
			t.Fatal(err)
		}
	})
	return &cf
}

// org creates a customer organization and stores a token the fake API
// knows under the label "cust-<slug>" with scopes.
func (cf *customerFixture) org(slug string, scopes ...dofake.Scope) storage.Organization {
	cf.t.Helper()
	var org storage.Organization
	if err := cf.db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		var err error
		org, err = storage.CreateOrganization(context.Background(), tx, slug, slug, t0)
		return err
	}); err != nil {
		cf.t.Fatal(err)
	}
	cf.setToken(slug, "cust-"+slug, scopes...)
	return org
}

// setToken registers a token with label in the fake API and stores it as
// the organization's provider token (opt-in or rotation).
func (cf *customerFixture) setToken(slug, label string, scopes ...dofake.Scope) {
	cf.t.Helper()
	if len(scopes) == 0 {
		scopes = dofake.CustomerScopes
	}
	tok := cf.fake.AddToken(label, scopes...)
	if _, err := cf.tokens.Set(context.Background(), slug, []byte(tok)); err != nil {
		cf.t.Fatal(err)
	}
}

// due seeds, in a new environment of org, a deployment whose idle deadline
// is t0 on a correctly tagged droplet, and returns the droplet id.
func (cf *customerFixture) due(org storage.Organization, envSlug string) int64 {
	cf.t.Helper()
	env := storageEnvironment(cf.fixture, org.ID, envSlug)
	id := cf.droplet([]string{digitalocean.TagChalupa, digitalocean.EnvTag(envSlug)})
	cf.deployment(env, storage.Deployment{DropletID: id})
	return id
}

func storageEnvironment(f *fixture, orgID int64, slug string) storage.Environment {
	f.t.Helper()
	var env storage.Environment
	if err := f.db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		var err error
		env, err = storage.CreateEnvironmentInOrg(context.Background(), tx, orgID, slug, slug, t0.Add(-time.Hour))
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return env
}

// deletes returns the fake API's DELETE requests by droplet id: the token
// label each was sent with.
func (cf *customerFixture) deletes() map[int64][]string {
	out := map[int64][]string{}
	for _, r := range cf.fake.Requests() {
		if r.Method != "DELETE" {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(r.Path, "/v2/droplets/"), 10, 64)
		if err != nil {
			cf.t.Fatalf("unexpected DELETE %s", r.Path)
		}
		out[id] = append(out[id], r.Token)
	}
	return out
}

// orgWarnings returns the organization-level reaper-warning events.
func (cf *customerFixture) orgWarnings() []storage.LifecycleEventRow {
	var out []storage.LifecycleEventRow
	for _, e := range cf.events("", reaper.KindWarning) {
		if e.EnvironmentID == 0 {
			out = append(out, e)
		}
	}
	return out
}

func orgSlugs(orgs []storage.Organization) []string {
	var out []string
	for _, o := range orgs {
		out = append(out, o.Slug)
	}
	return out
}

// TestCustomerSweepCapAndOrder: at most five customer organizations a
// tick, in the minute's shuffled order, each reaped with its own token;
// the rest at the next tick.
func TestCustomerSweepCapAndOrder(t *testing.T) {
	cf := newCustomerFixture(t, nil)
	var orgs []storage.Organization
	droplets := map[int64]string{}
	for i := range 7 {
		slug := "cust" + strconv.Itoa(i)
		o := cf.org(slug)
		orgs = append(orgs, o)
		droplets[cf.due(o, slug+"-env")] = "cust-" + slug
	}
	res := cf.tick()
	want := orgSlugs(reaper.SweepOrder(orgs, t0))[:reaper.MaxCustomerOrgsPerTick]
	if !slices.Equal(res.CustomerOrgs, want) || !res.More {
		t.Fatalf("first tick swept %v (more %v), want %v and more", res.CustomerOrgs, res.More, want)
	}
	if n := res.Count(reaper.ActionDestroyed); n != reaper.MaxCustomerOrgsPerTick {
		t.Fatalf("first tick destroyed %d, want %d", n, reaper.MaxCustomerOrgsPerTick)
	}
	res = cf.tick()
	if len(res.CustomerOrgs) != 2 || res.Count(reaper.ActionDestroyed) != 2 {
		t.Fatalf("second tick: swept %v, destroyed %d; want the other 2", res.CustomerOrgs, res.Count(reaper.ActionDestroyed))
	}
	got := cf.deletes()
	if len(got) != len(droplets) {
		t.Fatalf("DELETEs for %d droplets, want %d", len(got), len(droplets))
	}
	for id, label := range droplets {
		if !slices.Equal(got[id], []string{label}) {
			t.Errorf("droplet %d deleted with %v, want once with %s", id, got[id], label)
		}
	}
}

// TestSweepOrder: the order is the same for every tick within one minute
// and differs across minutes.
func TestSweepOrder(t *testing.T) {
	var orgs []storage.Organization
	for i := range 8 {
		orgs = append(orgs, storage.Organization{ID: int64(i + 2), Slug: "o" + strconv.Itoa(i)})
	}
	first := orgSlugs(reaper.SweepOrder(orgs, t0))
	t.Run("stable within a minute", func(t *testing.T) {
		for _, d := range []time.Duration{time.Second, 30 * time.Second, 59 * time.Second} {
			if got := orgSlugs(reaper.SweepOrder(orgs, t0.Add(d))); !slices.Equal(got, first) {
				t.Errorf("at +%v: %v, want %v", d, got, first)
			}
		}
	})
	t.Run("new each minute", func(t *testing.T) {
		seen := map[string]bool{strings.Join(first, ","): true}
		for m := 1; m <= 10; m++ {
			seen[strings.Join(orgSlugs(reaper.SweepOrder(orgs, t0.Add(time.Duration(m)*time.Minute))), ",")] = true
		}
		// 8! orders: eleven minutes giving fewer than 9 distinct ones
		// would mean the minute barely matters.
		if len(seen) < 9 {
			t.Errorf("11 minutes gave only %d distinct orders", len(seen))
		}
	})
}

// slowCredentials wraps customer clients so each droplet call advances
// the fake clock by latency: injected provider latency, no real waiting.
type slowCredentials struct {
	next    reaper.CustomerCredentials
	clock   *clockwork.FakeClock
	latency time.Duration
}

func (s slowCredentials) CustomerClient(ctx context.Context, org storage.Organization) (digitalocean.DropletAPI, int64, error) {
	c, gen, err := s.next.CustomerClient(ctx, org)
	if err != nil {
		return nil, 0, err
	}
	return slowDroplets{c, s}, gen, nil
}

type slowDroplets struct {
	digitalocean.DropletAPI
	s slowCredentials
}

func (d slowDroplets) GetDroplet(ctx context.Context, id int) (digitalocean.Droplet, error) {
	d.s.clock.Advance(d.s.latency)
	return d.DropletAPI.GetDroplet(ctx, id)
}

func (d slowDroplets) DeleteDroplet(ctx context.Context, id int) (digitalocean.DeleteResult, error) {
	d.s.clock.Advance(d.s.latency)
	return d.DropletAPI.DeleteDroplet(ctx, id)
}

// TestCustomerSweepBudget: with 8 s per provider call (two per
// deployment), the 22 s budget is spent after two organizations; the
// sweep stops and the rest is reaped at later ticks.
func TestCustomerSweepBudget(t *testing.T) {
	cf := newCustomerFixture(t, func(c reaper.CustomerCredentials, clock *clockwork.FakeClock) reaper.CustomerCredentials {
		return slowCredentials{next: c, clock: clock, latency: 8 * time.Second}
	})
	for i := range 4 {
		slug := "slow" + strconv.Itoa(i)
		cf.due(cf.org(slug), slug+"-env")
	}
	res := cf.tick()
	if len(res.CustomerOrgs) != 2 || !res.CustomerBudgetSpent || !res.More || res.Count(reaper.ActionDestroyed) != 2 {
		t.Fatalf("swept %v, budget spent %v, more %v, destroyed %d; want 2 organizations, then the budget stop",
			res.CustomerOrgs, res.CustomerBudgetSpent, res.More, res.Count(reaper.ActionDestroyed))
	}
	if n := len(cf.deletes()); n != 2 {
		t.Fatalf("%d DELETEs after the first tick, want 2", n)
	}
	res = cf.tick()
	if res.Count(reaper.ActionDestroyed) != 2 || len(cf.deletes()) != 4 {
		t.Fatalf("second tick destroyed %d (DELETEs in all %d), want the other 2", res.Count(reaper.ActionDestroyed), len(cf.deletes()))
	}
}

// TestCustomerTokenRefused: a 401 (token deleted at DigitalOcean) or 403
// (token without droplet:delete) marks the token invalid once, records one
// reaper-warning reason provider under the organization, counts one
// invalidation, and the platform token is never used for its droplets.
func TestCustomerTokenRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scopes []dofake.Scope
		revoke bool
	}{
		{name: "401 revoked at the provider", revoke: true},
		{name: "403 without droplet:delete", scopes: []dofake.Scope{dofake.ScopeDropletRead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := newCustomerFixture(t, nil)
			org := cf.org("acme", tc.scopes...)
			if tc.revoke {
				cf.fake.RevokeToken("cust-acme")
			}
			d1, d2 := cf.due(org, "acme-a"), cf.due(org, "acme-b")
			platformEnv := cf.env("plat")
			pd := cf.droplet([]string{digitalocean.TagChalupa, digitalocean.EnvTag("plat")})
			cf.deployment(platformEnv, storage.Deployment{DropletID: pd})

			res := cf.tick()
			if n := res.Count(reaper.ActionTokenInvalid); n != 1 {
				t.Fatalf("outcomes %+v: want one token-invalid", res.Outcomes)
			}
			for range 3 {
				cf.clock.Advance(2 * reaper.GuardHold)
				cf.tick()
			}
			tok, err := storage.ProviderTokenByOrg(context.Background(), cf.db.Read, org.ID)
			if err != nil || tok.Status != storage.TokenInvalid || tok.Generation != 1 {
				t.Fatalf("token %+v, %v; want invalid at generation 1", tok, err)
			}
			w := cf.orgWarnings()
			if len(w) != 1 || w[0].Reason != reaper.ReasonProvider {
				t.Fatalf("organization warnings %+v, want one with reason provider", w)
			}
			if n := cf.counter("chalupa_reaper_customer_tokens_invalidated_total"); n != 1 {
				t.Fatalf("tokens invalidated = %v, want 1", n)
			}
			for _, r := range cf.fake.Requests() {
				if strings.Contains(r.Path, strconv.FormatInt(d1, 10)) || strings.Contains(r.Path, strconv.FormatInt(d2, 10)) {
					// A token deleted at DigitalOcean is logged as unknown.
					if r.Token != "cust-acme" && !(tc.revoke && r.Token == dofake.LabelUnknown) {
						t.Errorf("%s %s sent with %s: a customer droplet only ever gets its own token", r.Method, r.Path, r.Token)
					}
				}
			}
			if got := cf.deletes(); !slices.Equal(got[pd], []string{"write"}) || (!tc.revoke && len(got[d1])+len(got[d2]) > 1) || (tc.revoke && len(got[d1])+len(got[d2]) > 0) {
				t.Fatalf("DELETEs %v: want the platform droplet with write, no customer droplet destroyed", got)
			}
		})
	}
}

// counter reads a counter the reaper's metrics registered.
func (cf *customerFixture) counter(name string) float64 {
	cf.t.Helper()
	mfs, err := cf.reg.Gather()
	if err != nil {
		cf.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	cf.t.Fatalf("no counter %s", name)
	return 0
}

// rotatingCredentials runs rotate once, between the sweep reading the
// token's generation and the provider's answer to its first call.
type rotatingCredentials struct {
	next   reaper.CustomerCredentials
	rotate *func()
}

func (r rotatingCredentials) CustomerClient(ctx context.Context, org storage.Organization) (digitalocean.DropletAPI, int64, error) {
	c, gen, err := r.next.CustomerClient(ctx, org)
	if err != nil {
		return nil, 0, err
	}
	return rotatingDroplets{c, r.rotate}, gen, nil
}

type rotatingDroplets struct {
	digitalocean.DropletAPI
	rotate *func()
}

func (d rotatingDroplets) GetDroplet(ctx context.Context, id int) (digitalocean.Droplet, error) {
	if f := *d.rotate; f != nil {
		*d.rotate = nil
		f()
	}
	return d.DropletAPI.GetDroplet(ctx, id)
}

// TestCustomerTokenRotatedConcurrently: the operator stores a new token
// while the sweep's call with the old one is refused; the refusal does not
// invalidate the newer token, records no warning, and the next tick reaps
// with the new token.
func TestCustomerTokenRotatedConcurrently(t *testing.T) {
	var rotate func()
	cf := newCustomerFixture(t, func(c reaper.CustomerCredentials, _ *clockwork.FakeClock) reaper.CustomerCredentials {
		return rotatingCredentials{next: c, rotate: &rotate}
	})
	org := cf.org("acme")
	id := cf.due(org, "acme-a")
	rotate = func() {
		cf.fake.RevokeToken("cust-acme")
		cf.setToken("acme", "cust-acme-2")
	}
	res := cf.tick()
	if res.Count(reaper.ActionTokenInvalid) != 0 || res.Count(reaper.ActionFailed) != 1 {
		t.Fatalf("outcomes %+v: want one failed, no token-invalid", res.Outcomes)
	}
	tok, err := storage.ProviderTokenByOrg(context.Background(), cf.db.Read, org.ID)
	if err != nil || tok.Status != storage.TokenActive || tok.Generation != 2 {
		t.Fatalf("token %+v, %v: want the rotated token active at generation 2", tok, err)
	}
	if w := cf.orgWarnings(); len(w) != 0 {
		t.Fatalf("warnings %+v, want none", w)
	}
	if n := cf.counter("chalupa_reaper_customer_tokens_invalidated_total"); n != 0 {
		t.Fatalf("tokens invalidated = %v, want 0", n)
	}
	res = cf.tick()
	if res.Count(reaper.ActionDestroyed) != 1 {
		t.Fatalf("second tick %+v: want the deployment destroyed with the new token", res.Outcomes)
	}
	if got := cf.deletes()[id]; !slices.Equal(got, []string{"cust-acme-2"}) {
		t.Fatalf("droplet deleted with %v, want once with the rotated token", got)
	}
}
