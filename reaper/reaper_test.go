package reaper_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/wake"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// t0 is every test's "now" on the fake clock.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fixture is one database, one fake DigitalOcean API with a write token,
// and a reaper with the platform credentials on a fake clock.
type fixture struct {
	t      *testing.T
	db     *storage.DB
	clock  *clockwork.FakeClock
	fake   *dofake.Server
	client *digitalocean.Client
	wake   *wake.Threshold
	r      *reaper.Reaper
}

func newFixture(t *testing.T, tweak ...func(*reaper.Config)) *fixture {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	f := &fixture{t: t, db: storagetest.NewDB(t), clock: clock, fake: dofake.New(t, dofake.WithClock(clock)), wake: wake.New()}
	f.client = f.newClient("write", dofake.FullAccess)
	f.r = f.newReaper(tweak...)
	return f
}

func (f *fixture) newClient(label string, scopes []dofake.Scope) *digitalocean.Client {
	f.t.Helper()
	tok := f.fake.AddToken(label, scopes...)
	c, err := digitalocean.New(digitalocean.Config{BaseURL: f.fake.URL, Token: digitalocean.Token(tok), Label: label, Clock: f.clock})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) newReaper(tweak ...func(*reaper.Config)) *reaper.Reaper {
	f.t.Helper()
	m, err := reaper.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		f.t.Fatal(err)
	}
	// Grace -1 and MaxDestroy 1000: the rules of these tests are not about
	// the start-up grace or the pace.
	cfg := reaper.Config{DB: f.db, Clock: f.clock, Credentials: reaper.Platform{Write: f.client}, Wake: f.wake, Metrics: m, Grace: -1, MaxDestroy: 1000}
	for _, tw := range tweak {
		tw(&cfg)
	}
	return reaper.New(cfg)
}

// env creates a platform environment.
func (f *fixture) env(slug string) storage.Environment {
	return storagetest.Environment(f.t, f.db, storage.Environment{Slug: slug})
}

// droplet adds a droplet created an hour before t0 with tags.
func (f *fixture) droplet(tags []string) int64 {
	return int64(f.fake.AddDroplet(dofake.Droplet{Tags: tags, CreatedAt: t0.Add(-time.Hour)}).ID)
}

// deployment seeds an active deployment launched 30 minutes before t0.
func (f *fixture) deployment(env storage.Environment, seed storage.Deployment) storage.Deployment {
	seed.EnvironmentID = env.ID
	if seed.LaunchedAt.IsZero() {
		seed.LaunchedAt = t0.Add(-30 * time.Minute)
	}
	return storagetest.Deployment(f.t, f.db, seed)
}

func (f *fixture) candidate(envID int64, id string) storage.ReaperCandidate {
	f.t.Helper()
	c, err := storage.ReaperCandidateByID(context.Background(), f.db.Read, envID, id, reaper.DefaultCIFreshness)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) events(slug, kind string) []storage.LifecycleEventRow {
	f.t.Helper()
	ev, err := storage.ListLifecycleEvents(context.Background(), f.db.Read, storage.EventFilter{EnvironmentSlug: slug, Kind: kind, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	return ev
}

func (f *fixture) tick() reaper.TickResult {
	f.t.Helper()
	res, err := f.r.Tick(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) envStatus(slug string) string {
	f.t.Helper()
	e, err := storage.EnvironmentBySlug(context.Background(), f.db.Read, slug)
	if err != nil {
		f.t.Fatal(err)
	}
	return e.Status
}

// TestReaperRules is the reaper table: each row is one deployment at t0
// and what one tick must do with it.
func TestReaperRules(t *testing.T) {
	type want struct {
		action  string // "" for not handled at all
		reason  string
		deletes int
		ended   bool
		event   string // the event kind recorded, "" for none
	}
	for _, tc := range []struct {
		name  string
		tags  []string // the droplet's tags; nil: no droplet exists
		noID  bool     // the deployment reported no droplet id
		seed  storage.Deployment
		fault *dofake.Fault
		want  want
	}{
		{
			name: "session expiry beats CI and fresh activity",
			tags: dofake.EnvTags("harbor"),
			seed: storage.Deployment{SessionExpiresAt: t0.Add(-time.Second), IdleDeadlineAt: t0.Add(time.Hour), CIActive: true, LastHeartbeatAt: t0},
			want: want{action: reaper.ActionDestroyed, reason: reaper.ReasonSessionExpired, deletes: 1, ended: true, event: reaper.KindDestroyed},
		},
		{
			name: "fresh CI defers the idle deadline",
			tags: dofake.EnvTags("harbor"),
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute), CIActive: true, LastHeartbeatAt: t0.Add(-time.Minute)},
			want: want{},
		},
		{
			name: "stale CI does not defer",
			tags: dofake.EnvTags("harbor"),
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute), CIActive: true, LastHeartbeatAt: t0.Add(-reaper.DefaultCIFreshness - time.Second)},
			want: want{action: reaper.ActionDestroyed, reason: reaper.ReasonIdle, deletes: 1, ended: true, event: reaper.KindDestroyed},
		},
		{
			name: "fresh activity defers",
			tags: dofake.EnvTags("harbor"),
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(time.Second), SessionExpiresAt: t0.Add(time.Hour)},
			want: want{},
		},
		{
			name: "idle deadline passed without CI",
			tags: dofake.EnvTags("harbor"),
			seed: storage.Deployment{IdleDeadlineAt: t0},
			want: want{action: reaper.ActionDestroyed, reason: reaper.ReasonIdle, deletes: 1, ended: true, event: reaper.KindDestroyed},
		},
		{
			name:  "404 on destroy is success",
			tags:  dofake.EnvTags("harbor"),
			seed:  storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute)},
			fault: &dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 404},
			want:  want{action: reaper.ActionAlreadyGone, reason: reaper.ReasonIdle, deletes: 1, ended: true, event: reaper.KindDestroyed},
		},
		{
			name: "a droplet the provider no longer has is already gone",
			tags: nil,
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute), DropletID: 999},
			want: want{action: reaper.ActionAlreadyGone, reason: reaper.ReasonIdle, deletes: 0, ended: true, event: reaper.KindDestroyed},
		},
		{
			name: "an untagged droplet is never destroyed",
			tags: dofake.NoTags,
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute)},
			want: want{action: reaper.ActionWarned, reason: reaper.ReasonIdle, event: reaper.KindWarning},
		},
		{
			name: "a droplet with chalupa but not the environment tag is never destroyed",
			tags: []string{digitalocean.TagChalupa},
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute)},
			want: want{action: reaper.ActionWarned, reason: reaper.ReasonIdle, event: reaper.KindWarning},
		},
		{
			name: "a foreign-tagged droplet is never destroyed",
			tags: dofake.EnvTags("other-env"),
			seed: storage.Deployment{SessionExpiresAt: t0.Add(-time.Minute)},
			want: want{action: reaper.ActionWarned, reason: reaper.ReasonSessionExpired, event: reaper.KindWarning},
		},
		{
			name: "a deployment without droplet id is found by its tags",
			tags: dofake.EnvTags("harbor"),
			noID: true,
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute)},
			want: want{action: reaper.ActionDestroyed, reason: reaper.ReasonIdle, deletes: 1, ended: true, event: reaper.KindDestroyed},
		},
		{
			name: "a deployment without droplet id and no tagged droplet is warned about",
			tags: dofake.NoTags,
			noID: true,
			seed: storage.Deployment{IdleDeadlineAt: t0.Add(-time.Minute)},
			want: want{action: reaper.ActionWarned, reason: reaper.ReasonIdle, event: reaper.KindWarning},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			env := f.env("harbor")
			seed := tc.seed
			var dropletID int64
			if tc.tags != nil {
				dropletID = f.droplet(tc.tags)
				if !tc.noID {
					seed.DropletID = dropletID
				}
			} else if seed.DropletID == 0 && !tc.noID {
				t.Fatal("a row without a droplet names a droplet id")
			}
			dep := f.deployment(env, seed)
			if tc.fault != nil {
				f.fake.Inject(*tc.fault)
			}
			res := f.tick()

			switch {
			case tc.want.action == "" && len(res.Outcomes) != 0:
				t.Fatalf("outcomes = %+v, want none", res.Outcomes)
			case tc.want.action != "" && (len(res.Outcomes) != 1 || res.Outcomes[0].Action != tc.want.action || res.Outcomes[0].Reason != tc.want.reason):
				t.Fatalf("outcomes = %+v, want one %s (%s)", res.Outcomes, tc.want.action, tc.want.reason)
			}
			if got := f.fake.Deletes(); len(got) != tc.want.deletes {
				t.Fatalf("DELETEs = %v, want %d", got, tc.want.deletes)
			}
			for _, d := range f.fake.Deletes() {
				if d.Token != "write" || d.Path != "/v2/droplets/"+strconv.FormatInt(dropletID, 10) {
					t.Fatalf("DELETE %v: want droplet %d with the write token", d, dropletID)
				}
			}
			c := f.candidate(env.ID, dep.ID)
			if ended := c.Status == storage.DeploymentEnded; ended != tc.want.ended {
				t.Fatalf("deployment status %s, want ended=%v", c.Status, tc.want.ended)
			}
			if tc.want.ended && f.envStatus("harbor") != "sunk" {
				t.Fatal("the environment has no active deployment left and is not sunk")
			}
			if !tc.want.ended && f.envStatus("harbor") != "active" {
				t.Fatal("the environment still has an active deployment but is sunk")
			}
			ev := f.events("harbor", "")
			switch {
			case tc.want.event == "" && len(ev) != 0:
				t.Fatalf("events = %+v, want none", ev)
			case tc.want.event != "" && (len(ev) != 1 || ev[0].Kind != tc.want.event):
				t.Fatalf("events = %+v, want one %s", ev, tc.want.event)
			case tc.want.event == reaper.KindDestroyed && (ev[0].Reason != tc.want.reason || ev[0].ID != "reaper:harbor:"+dep.ID):
				t.Fatalf("event %+v: want reason %s and id reaper:harbor:%s", ev[0], tc.want.reason, dep.ID)
			case tc.want.event == reaper.KindWarning && ev[0].Reason != reaper.ReasonProvider:
				t.Fatalf("warning %+v: want reason provider", ev[0])
			}
			if tc.noID && tc.want.ended && c.DropletID != dropletID {
				t.Fatalf("droplet id recorded %d, want %d (found by tags)", c.DropletID, dropletID)
			}

			// A second tick at the same time does nothing more: ended,
			// held after a warning, or not due.
			f.fake.ResetRequests()
			if res := f.tick(); len(res.Outcomes) != 0 {
				t.Fatalf("second tick: outcomes %+v, want none", res.Outcomes)
			}
			if got := f.fake.Requests(); len(got) != 0 {
				t.Fatalf("second tick sent %v", got)
			}
			if got := f.events("harbor", ""); len(got) != len(ev) {
				t.Fatalf("second tick recorded events: %+v", got)
			}
		})
	}
}

// TestFailedDestroyIsRetriedAfterBackoff: a 500 on DELETE leaves the
// deployment active and held for BackoffMin; the tick after that destroys.
func TestFailedDestroyIsRetriedAfterBackoff(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	dep := f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	f.fake.Inject(dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 500})

	if res := f.tick(); res.Count(reaper.ActionFailed) != 1 {
		t.Fatalf("first tick %+v, want one failed", res.Outcomes)
	}
	if c := f.candidate(env.ID, dep.ID); c.Status != storage.DeploymentActive || !c.HoldUntil.Equal(t0.Add(reaper.BackoffMin)) {
		t.Fatalf("after a failed destroy: %+v, want active and held until %v", c, t0.Add(reaper.BackoffMin))
	}
	if ev := f.events("harbor", ""); len(ev) != 0 {
		t.Fatalf("a failed destroy recorded %+v", ev)
	}
	f.clock.Advance(reaper.BackoffMin - time.Millisecond)
	if res := f.tick(); len(res.Outcomes) != 0 {
		t.Fatalf("tick inside the back-off: %+v", res.Outcomes)
	}
	f.clock.Advance(time.Millisecond)
	if res := f.tick(); res.Count(reaper.ActionDestroyed) != 1 {
		t.Fatalf("tick after the back-off: %+v, want destroyed", res.Outcomes)
	}
	if got := len(f.fake.Deletes()); got != 2 {
		t.Fatalf("DELETEs = %d, want 2 (the 500 and the success)", got)
	}
	if ev := f.events("harbor", reaper.KindDestroyed); len(ev) != 1 {
		t.Fatalf("events %+v, want one reaper-destroyed", ev)
	}
}

func TestBackoffDoublesToItsCap(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 5: 8 * time.Minute, 6: reaper.BackoffMax, 60: reaper.BackoffMax} {
		if got := reaper.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

// TestGuardHoldEndsWithAHeartbeatThatChangesState: a warned deployment is
// not looked at again for an hour, unless a heartbeat changes its state.
func TestGuardHoldEndsWithAHeartbeatThatChangesState(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	id := f.droplet(dofake.NoTags)
	dep := f.deployment(env, storage.Deployment{DropletID: id, IdleDeadlineAt: t0.Add(-time.Minute)})
	if res := f.tick(); res.Count(reaper.ActionWarned) != 1 {
		t.Fatalf("%+v, want warned", res.Outcomes)
	}
	if c := f.candidate(env.ID, dep.ID); !c.HoldUntil.Equal(t0.Add(reaper.GuardHold)) {
		t.Fatalf("hold %v, want %v", c.HoldUntil, t0.Add(reaper.GuardHold))
	}
	// A heartbeat that changes nothing the reaper decides on keeps it.
	storagetest.Heartbeat(t, f.db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: dep.ID, ReceivedAt: t0,
		LastActivityAt: t0.Add(-31 * time.Minute), LimitMinutes: 30})
	if c := f.candidate(env.ID, dep.ID); c.HoldUntil.IsZero() {
		t.Fatal("a heartbeat that changed nothing cleared the hold")
	}
	// One that reports CI clears it.
	storagetest.Heartbeat(t, f.db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: dep.ID, ReceivedAt: t0,
		LastActivityAt: t0.Add(-31 * time.Minute), LimitMinutes: 30, CIActive: true})
	if c := f.candidate(env.ID, dep.ID); !c.HoldUntil.IsZero() {
		t.Fatalf("a heartbeat that reported CI kept the hold %v", c.HoldUntil)
	}
}

// TestDryRunDestroysNothing records reaper-would-destroy once per deadline,
// sends no DELETE and ends nothing.
func TestDryRunDestroysNothing(t *testing.T) {
	f := newFixture(t, func(c *reaper.Config) { c.DryRun = true })
	env := f.env("harbor")
	dep := f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	if res := f.tick(); res.Count(reaper.ActionWouldDestroy) != 1 || !res.DryRun {
		t.Fatalf("%+v, want one would-destroy in dry run", res)
	}
	f.clock.Advance(reaper.GuardHold)
	if res := f.tick(); res.Count(reaper.ActionWouldDestroy) != 1 {
		t.Fatalf("after the hold: %+v, want would-destroy again", res.Outcomes)
	}
	if got := f.fake.Deletes(); len(got) != 0 {
		t.Fatalf("dry run sent %v", got)
	}
	if c := f.candidate(env.ID, dep.ID); c.Status != storage.DeploymentActive {
		t.Fatal("dry run ended the deployment")
	}
	if ev := f.events("harbor", ""); len(ev) != 1 || ev[0].Kind != reaper.KindWouldDestroy || ev[0].Reason != reaper.ReasonIdle {
		t.Fatalf("events %+v, want one reaper-would-destroy (same deadline, one event)", ev)
	}
}

// TestNoCredentialsNoTick: without the write token a tick refuses.
func TestNoCredentialsNoTick(t *testing.T) {
	f := newFixture(t, func(c *reaper.Config) { c.Credentials = nil })
	if _, err := f.r.Tick(context.Background()); err != reaper.ErrNotConfigured {
		t.Fatalf("Tick = %v, want ErrNotConfigured", err)
	}
	if st, err := f.r.Status(context.Background()); err != nil || st.Configured {
		t.Fatalf("Status = %+v, %v; want not configured", st, err)
	}
}

// TestRacingTicksClaimOnce: two reapers on one database tick at once on
// the same due deployment; exactly one claim wins and one event is
// recorded, whatever the interleaving.
func TestRacingTicksClaimOnce(t *testing.T) {
	for i := range 10 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			f := newFixture(t)
			other := f.newReaper()
			env := f.env("harbor")
			dep := f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
			var wg sync.WaitGroup
			results := make([]reaper.TickResult, 2)
			for j, r := range []*reaper.Reaper{f.r, other} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := r.Tick(context.Background())
					if err != nil {
						t.Error(err)
					}
					results[j] = res
				}()
			}
			wg.Wait()
			won := 0
			for _, res := range results {
				won += res.Count(reaper.ActionDestroyed) + res.Count(reaper.ActionAlreadyGone)
			}
			if won != 1 {
				t.Fatalf("claims won = %d, want 1: %+v", won, results)
			}
			if ev := f.events("harbor", ""); len(ev) != 1 || ev[0].Kind != reaper.KindDestroyed {
				t.Fatalf("events %+v, want exactly one reaper-destroyed", ev)
			}
			if c := f.candidate(env.ID, dep.ID); c.Status != storage.DeploymentEnded {
				t.Fatal("deployment not ended")
			}
			for _, d := range f.fake.Deletes() {
				if d.Token != "write" || d.Path != "/v2/droplets/"+strconv.FormatInt(dep.DropletID, 10) {
					t.Fatalf("unexpected DELETE %v", d)
				}
			}
		})
	}
}

// TestTickCap: one tick handles at most MaxPerTick deployments and says
// more are due.
func TestTickCap(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	for range reaper.MaxPerTick + 3 {
		f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	}
	res := f.tick()
	if len(res.Outcomes) != reaper.MaxPerTick || !res.More {
		t.Fatalf("first tick handled %d (more=%v), want %d and more", len(res.Outcomes), res.More, reaper.MaxPerTick)
	}
	if res := f.tick(); res.Count(reaper.ActionDestroyed) != 3 || res.More {
		t.Fatalf("second tick %+v, want the 3 left", res)
	}
	if f.envStatus("harbor") != "sunk" {
		t.Fatal("environment not sunk after its last deployment")
	}
}

// TestRateLimitStopsTheTick: a 429 stops the tick and nothing more is sent
// until its retry time.
func TestRateLimitStopsTheTick(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	for range 3 {
		f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	}
	f.fake.Inject(dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 429, RetryAfter: 10 * time.Second})
	res := f.tick()
	if len(res.Outcomes) != 1 || res.Outcomes[0].Action != reaper.ActionRateLimited || !res.RateLimitedUntil.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("%+v, want one rate-limited outcome until t0+10s", res)
	}
	f.fake.ResetRequests()
	if res := f.tick(); len(res.Outcomes) != 0 || len(f.fake.Requests()) != 0 {
		t.Fatalf("tick while rate-limited: %+v, requests %v", res, f.fake.Requests())
	}
	f.clock.Advance(10 * time.Second)
	if res := f.tick(); res.Count(reaper.ActionDestroyed) != 3 {
		t.Fatalf("after the retry time: %+v, want all 3 destroyed", res.Outcomes)
	}
}

// TestCustomerDeploymentsAreNotThePlatformReapers: a customer
// organization's deployment is never reaped with the platform token (its
// own sweep does that: docs/operations.md, "Coming with later capabilities").
func TestCustomerDeploymentsAreNotThePlatformReapers(t *testing.T) {
	f := newFixture(t)
	org := customerOrg(t, f.db, "acme")
	env := storagetest.Environment(t, f.db, storage.Environment{Slug: "acme-dev", OrgID: org})
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("acme-dev")), IdleDeadlineAt: t0.Add(-time.Minute)})
	if res := f.tick(); len(res.Outcomes) != 0 {
		t.Fatalf("platform reaper handled a customer deployment: %+v", res.Outcomes)
	}
	if got := f.fake.Requests(); len(got) != 0 {
		t.Fatalf("requests %v, want none", got)
	}
}

// customerOrg inserts a customer organization (no storage API creates one
// yet: the customer sweep is still to come) and returns its id.
func customerOrg(t *testing.T, db *storage.DB, slug string) int64 {
	t.Helper()
	var id int64
	if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		return tx.QueryRowContext(context.Background(),
			`INSERT INTO organizations (slug, name, kind, created_at) VALUES (?, ?, 'customer', 0) RETURNING id`, slug, slug).Scan(&id)
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// hookedAPI runs onGet before each droplet lookup: what the fleet does
// while a tick works through its due list.
type hookedAPI struct {
	digitalocean.DropletAPI
	onGet func(id int)
}

func (h hookedAPI) GetDroplet(ctx context.Context, id int) (digitalocean.Droplet, error) {
	h.onGet(id)
	return h.DropletAPI.GetDroplet(ctx, id)
}

// TestHeartbeatDuringTheTickSavesTheDroplet: the due list is read once a
// tick; a heartbeat that arrives while the tick destroys the earlier ones
// moves the later deployment's deadline, so its droplet is not destroyed.
func TestHeartbeatDuringTheTickSavesTheDroplet(t *testing.T) {
	f := newFixture(t)
	var env storage.Environment
	var second storage.Deployment
	var firstID int64
	f.r = f.newReaper(func(c *reaper.Config) {
		c.Credentials = reaper.Platform{Write: hookedAPI{DropletAPI: f.client, onGet: func(id int) {
			if int64(id) == firstID {
				storagetest.Heartbeat(t, f.db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: second.ID, ReceivedAt: t0,
					LastActivityAt: t0, LimitMinutes: 30})
			}
		}}}
	})
	env = f.env("harbor")
	firstID = f.droplet(dofake.EnvTags("harbor"))
	secondID := f.droplet(dofake.EnvTags("harbor"))
	f.deployment(env, storage.Deployment{DropletID: firstID, IdleDeadlineAt: t0.Add(-2 * time.Minute)})
	second = f.deployment(env, storage.Deployment{DropletID: secondID, IdleDeadlineAt: t0.Add(-time.Minute)})
	res := f.tick()
	if res.Count(reaper.ActionDestroyed) != 1 || res.Count(reaper.ActionNotDue) != 1 {
		t.Fatalf("%+v, want the first destroyed and the second not due", res.Outcomes)
	}
	for _, d := range f.fake.Deletes() {
		if strings.HasSuffix(d.Path, "/"+strconv.FormatInt(secondID, 10)) {
			t.Fatalf("the droplet whose agent heartbeated during the tick was destroyed: %v", d)
		}
	}
}
