package reaper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// steppedClock is the server's clock in these tests: the fleet's fake
// clock plus a wall offset the test steps, while timers and the monotonic
// time (clockguard.Monotonic) follow the fake clock alone — what a
// wall-clock step does to a real server.
type steppedClock struct {
	*clockwork.FakeClock
	origin time.Time
	offset atomic.Int64
}

func newSteppedClock(base *clockwork.FakeClock) *steppedClock {
	return &steppedClock{FakeClock: base, origin: base.Now()}
}

func (s *steppedClock) step(d time.Duration)                   { s.offset.Add(int64(d)) }
func (s *steppedClock) Now() time.Time                         { return s.FakeClock.Now().Add(time.Duration(s.offset.Load())) }
func (s *steppedClock) Since(t time.Time) time.Duration        { return s.Now().Sub(t) }
func (s *steppedClock) Until(t time.Time) time.Duration        { return t.Sub(s.Now()) }
func (s *steppedClock) Monotonic() time.Duration               { return s.FakeClock.Now().Sub(s.origin) }
func (s *steppedClock) After(d time.Duration) <-chan time.Time { return s.FakeClock.After(d) }

// fleetRig is a server (ingest and reaper sharing one clock guard, on a
// steppedClock) and a fleet of agents on the fake clock, with the
// DigitalOcean test server.
type fleetRig struct {
	t      *testing.T
	base   *clockwork.FakeClock
	server *steppedClock
	db     *storage.DB
	fake   *dofake.Server
	client *digitalocean.Client
	guard  *clockguard.Guard
	svc    *ingest.Service
	r      *reaper.Reaper
	keys   map[string]adminKey
	agents []*fleetAgent
}

type adminKey struct {
	id  string
	key []byte
}

// fleetAgent is one droplet's agent: alive ones heartbeat every
// HeartbeatInterval with activity a minute old (someone works on it).
type fleetAgent struct {
	env, id string
	droplet int64
	limit   int64
	alive   bool
	// skew is how far the droplet's own clock is off the fleet's.
	skew time.Duration
}

func newFleetRig(t *testing.T, tweak ...func(*reaper.Config)) *fleetRig {
	t.Helper()
	base := clockwork.NewFakeClockAt(t0)
	rig := &fleetRig{t: t, base: base, server: newSteppedClock(base), db: storagetest.NewDB(t), keys: map[string]adminKey{}}
	rig.fake = dofake.New(t, dofake.WithClock(base))
	tok := rig.fake.AddToken("write", dofake.FullAccess...)
	c, err := digitalocean.New(digitalocean.Config{BaseURL: rig.fake.URL, Token: digitalocean.Token(tok), Label: "write", Clock: base})
	if err != nil {
		t.Fatal(err)
	}
	rig.client = c
	rig.guard = clockguard.New(rig.server)
	sealer, err := envelope.New(bytes.Repeat([]byte{9}, envelope.KeySize), 1)
	if err != nil {
		t.Fatal(err)
	}
	kr := ingest.NewKeyring(rig.db, sealer, rig.server)
	rig.svc = ingest.NewService(ingest.Config{DB: rig.db, Keys: kr, Clock: rig.server, Quotas: ingest.DefaultQuotas(), Contact: rig.guard})
	for _, slug := range []string{"harbor", "quay", "wharf"} {
		storagetest.Environment(t, rig.db, storage.Environment{Slug: slug})
		k, err := kr.Issue(context.Background(), slug)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
		if err != nil {
			t.Fatal(err)
		}
		rig.keys[slug] = adminKey{id: k.KeyID, key: raw}
	}
	rig.r = rig.newReaper(tweak...)
	return rig
}

// newReaper starts a reaper process on the rig: a restart of the daemon.
func (rig *fleetRig) newReaper(tweak ...func(*reaper.Config)) *reaper.Reaper {
	m, err := reaper.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		rig.t.Fatal(err)
	}
	cfg := reaper.Config{DB: rig.db, Clock: rig.server, Credentials: reaper.Platform{Write: rig.client}, Metrics: m, Guard: rig.guard, Log: zerolog.New(zerolog.NewTestWriter(rig.t))}
	for _, tw := range tweak {
		tw(&cfg)
	}
	return reaper.New(cfg)
}

// agent adds a live agent with a droplet tagged for env and limit minutes.
func (rig *fleetRig) agent(env string, limit int64) *fleetAgent {
	d := rig.fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags(env), CreatedAt: t0.Add(-2 * time.Hour)})
	a := &fleetAgent{env: env, id: fmt.Sprintf("dep-%s-%d", env, len(rig.agents)+1), droplet: int64(d.ID), limit: limit, alive: true}
	rig.agents = append(rig.agents, a)
	return a
}

// heartbeat sends a's heartbeat signed at the fleet's time (the fake
// clock) and returns the status and refusal code.
func (rig *fleetRig) heartbeat(a *fleetAgent, signedAt time.Time) (int, string) {
	rig.t.Helper()
	return rig.signed(a, signedAt)()
}

// signed signs a's heartbeat at signedAt once and returns a sender of
// those very bytes (a replay is a second call): the status and refusal
// code of each send.
func (rig *fleetRig) signed(a *fleetAgent, signedAt time.Time) func() (int, string) {
	rig.t.Helper()
	body, err := json.Marshal(map[string]any{
		"environmentSlug": a.env, "agentVersion": "fleet-test/1", "sentAt": signedAt.UTC(),
		"deployment": map[string]any{"id": a.id, "dropletId": a.droplet},
		"reaper":     map[string]any{"idleChecks": 1, "limitMinutes": a.limit, "lastActivityAt": signedAt.Add(-time.Minute).UTC(), "ciActive": false},
	})
	if err != nil {
		rig.t.Fatal(err)
	}
	h := http.Header{}
	k := rig.keys[a.env]
	protocol.Attach(h, k.id, k.key, strconv.FormatInt(signedAt.Unix(), 10), protocol.NewNonce(), http.MethodPost, ingest.HeartbeatRoute, body)
	return func() (int, string) {
		req, err := http.NewRequest(http.MethodPost, "http://chalupa.test"+ingest.HeartbeatRoute, bytes.NewReader(body))
		if err != nil {
			rig.t.Fatal(err)
		}
		req.Header = h.Clone()
		v, refusal := rig.svc.Authenticate(req, ingest.MaxHeartbeatBody)
		resp := refusal
		if resp == nil {
			r := rig.svc.Heartbeat(context.Background(), v)
			resp = &r
		}
		return resp.Status, resp.Result()
	}
}

// beat has every live agent heartbeat now (fleet time).
func (rig *fleetRig) beat() {
	rig.t.Helper()
	for _, a := range rig.agents {
		if a.alive {
			if status, code := rig.heartbeat(a, rig.base.Now().Add(a.skew)); status != http.StatusAccepted && code != "timestamp_skew" {
				rig.t.Fatalf("heartbeat of %s: %d %s", a.id, status, code)
			}
		}
	}
}

func (rig *fleetRig) tick() reaper.TickResult {
	rig.t.Helper()
	res, err := rig.r.Tick(context.Background())
	if err != nil {
		rig.t.Fatal(err)
	}
	return res
}

// run lets d of fleet time pass in heartbeat intervals: the live agents
// heartbeat, then the reaper ticks (as often as it would: the loop runs
// every tick that is due).
func (rig *fleetRig) run(d time.Duration) {
	rig.t.Helper()
	for end := rig.base.Now().Add(d); rig.base.Now().Before(end); {
		rig.base.Advance(agent.HeartbeatInterval)
		rig.beat()
		for range 3 {
			rig.tick()
		}
	}
}

func (rig *fleetRig) events(kind string) []storage.LifecycleEventRow {
	rig.t.Helper()
	ev, err := storage.ListLifecycleEvents(context.Background(), rig.db.Read, storage.EventFilter{Kind: kind, Limit: 1000})
	if err != nil {
		rig.t.Fatal(err)
	}
	return ev
}

// TestHeartbeatIntervalMatchesTheAgent: the guard's waits are counted in
// the agent's real cadence.
func TestHeartbeatIntervalMatchesTheAgent(t *testing.T) {
	if clockguard.HeartbeatInterval != agent.HeartbeatInterval {
		t.Fatalf("clockguard.HeartbeatInterval %v, agent.HeartbeatInterval %v", clockguard.HeartbeatInterval, agent.HeartbeatInterval)
	}
	if clockguard.SkewWindow != ingest.SkewWindow {
		t.Fatalf("clockguard.SkewWindow %v, ingest.SkewWindow %v", clockguard.SkewWindow, ingest.SkewWindow)
	}
	if clockguard.SettleMax != agent.DefaultLimitMinutes*time.Minute {
		t.Fatalf("clockguard.SettleMax %v, the agent's default limit %d minutes", clockguard.SettleMax, agent.DefaultLimitMinutes)
	}
}

// TestLiveClockStepsDestroyNothing: agents in three environments heartbeat
// with five-minute limits while the server's wall clock steps +10 min,
// +2 h or −10 min: for 40 minutes after the step, zero DELETEs; the step is
// recorded once as clock-suspect and the gauge shows it.
func TestLiveClockStepsDestroyNothing(t *testing.T) {
	for _, step := range []time.Duration{10 * time.Minute, 2 * time.Hour, -10 * time.Minute} {
		t.Run(step.String(), func(t *testing.T) {
			rig := newFleetRig(t)
			for _, env := range []string{"harbor", "harbor", "quay", "wharf"} {
				rig.agent(env, 5)
			}
			rig.beat()
			rig.run(5 * time.Minute)
			rig.server.step(step)
			rig.run(40 * time.Minute)
			if d := rig.fake.Deletes(); len(d) != 0 {
				t.Fatalf("%d DELETEs after a %v step of the server clock, want 0: %v", len(d), step, d)
			}
			if ev := rig.events(reaper.KindClockSuspect); len(ev) != 1 || ev[0].EnvironmentSlug != "" {
				t.Fatalf("clock-suspect events %+v, want one, for the fleet", ev)
			}
			st, err := rig.r.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Clock.Global == nil || st.Clock.Global.Reason != clockguard.ReasonStep {
				t.Fatalf("status clock %+v, want the fleet held for the step", st.Clock)
			}

			// The clock is set right: heartbeats are accepted again, every
			// deployment is heard, the guard lifts, and an agent that then
			// really stops is reaped after its limit — the others are not.
			rig.server.step(-step)
			rig.run(5 * time.Minute)
			if st, _ := rig.r.Status(context.Background()); st.Clock.Global != nil {
				t.Fatalf("clock guard %+v after the fleet agreed and every deployment heartbeated, want lifted", st.Clock)
			}
			rig.agents[0].alive = false
			rig.run(7 * time.Minute)
			if d := rig.fake.Deletes(); len(d) != 1 || d[0].Path != "/v2/droplets/"+strconv.FormatInt(rig.agents[0].droplet, 10) {
				t.Fatalf("DELETEs %v, want only the stopped agent's droplet", d)
			}
		})
	}
}

// TestDowntimeDestroysNoLiveDroplet: chalupa was down 45 minutes with
// 30-minute limits, so every stored deadline passed; after the restart
// the live agents report within the grace and keep their droplets, and
// the one whose agent really stopped is reaped once the grace is over.
func TestDowntimeDestroysNoLiveDroplet(t *testing.T) {
	rig := newFleetRig(t)
	live := []*fleetAgent{rig.agent("harbor", 30), rig.agent("harbor", 30), rig.agent("quay", 30)}
	dead := rig.agent("quay", 30)
	// Before the downtime: every agent heartbeated 45 minutes ago.
	rig.base.Advance(-45 * time.Minute)
	rig.beat()
	rig.base.Advance(45 * time.Minute)
	dead.alive = false

	rig.r = rig.newReaper() // the restart, with the default grace
	if res := rig.tick(); res.Count(reaper.ActionHeld) != 4 || len(rig.fake.Deletes()) != 0 {
		t.Fatalf("first tick after the restart %+v, want all four held", res.Outcomes)
	}
	rig.base.Advance(10 * time.Second)
	rig.beat()
	for range 3 {
		rig.tick()
	}
	if d := rig.fake.Deletes(); len(d) != 0 {
		t.Fatalf("DELETEs within the grace: %v", d)
	}
	rig.base.Advance(reaper.DefaultGrace)
	rig.beat()
	for range 3 {
		rig.tick()
	}
	d := rig.fake.Deletes()
	if len(d) != 1 || d[0].Path != "/v2/droplets/"+strconv.FormatInt(dead.droplet, 10) {
		t.Fatalf("DELETEs %v, want only the dead agent's droplet %d", d, dead.droplet)
	}
	rig.run(10 * time.Minute)
	if n := len(rig.fake.Deletes()); n != 1 {
		t.Fatalf("%d DELETEs after ten more minutes, want still 1 (live: %v)", n, live)
	}
}

// TestSessionExpiryAndTheHolds: a passed session expiry is not held by
// the start-up grace; the clock guard holds it for SessionHoldMax at most,
// then it is enforced.
func TestSessionExpiryAndTheHolds(t *testing.T) {
	t.Run("grace", func(t *testing.T) {
		rig := newFleetRig(t)
		d := rig.fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("harbor"), CreatedAt: t0.Add(-2 * time.Hour)})
		env, _ := storage.EnvironmentBySlug(context.Background(), rig.db.Read, "harbor")
		storagetest.Deployment(t, rig.db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-s", DropletID: int64(d.ID),
			LaunchedAt: t0.Add(-time.Hour), IdleDeadlineAt: t0.Add(time.Hour), SessionExpiresAt: t0.Add(-time.Minute)})
		if res := rig.tick(); res.Count(reaper.ActionDestroyed) != 1 {
			t.Fatalf("%+v, want the expired session destroyed within the grace", res.Outcomes)
		}
	})
	t.Run("clock guard", func(t *testing.T) {
		rig := newFleetRig(t)
		a := rig.agent("harbor", 60)
		rig.beat()
		env, _ := storage.EnvironmentBySlug(context.Background(), rig.db.Read, "harbor")
		if err := rig.db.Writer.Do(context.Background(), func(tx storage.Tx) error {
			_, err := tx.ExecContext(context.Background(), `UPDATE deployments SET session_expires_at = ? WHERE environment_id = ? AND id = ?`,
				t0.Add(20*time.Minute).UnixMilli(), env.ID, a.id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		rig.run(time.Minute)
		rig.server.step(30 * time.Minute) // the expiry seems 10 minutes past
		rig.run(clockguard.SessionHoldMax - 2*time.Minute)
		if d := rig.fake.Deletes(); len(d) != 0 {
			t.Fatalf("DELETEs %v within the session hold's cap", d)
		}
		rig.run(5 * time.Minute)
		if d := rig.fake.Deletes(); len(d) != 1 {
			t.Fatalf("DELETEs %v, want the expired session destroyed once the cap passed", d)
		}
		var fleet []string
		for _, e := range rig.events(reaper.KindClockSuspect) {
			if e.EnvironmentSlug == "" {
				fleet = append(fleet, e.Message)
			}
		}
		if len(fleet) != 2 || !strings.Contains(fleet[0], "session expiry is enforced again") {
			t.Fatalf("fleet clock-suspect events %q, want one at the step and one an hour later saying expiry is enforced again", fleet)
		}
	})
}

// TestPacedDestroys: ten deployments due at once with a pace of three a
// minute are destroyed three a minute, oldest deadline first, all of them
// in the end; one reaper-mass-due event says so; dry run reports all ten
// in one tick.
func TestPacedDestroys(t *testing.T) {
	pace := func(c *reaper.Config) { c.MaxDestroy = 3 }
	f := newFixture(t, pace)
	env := f.env("harbor")
	var want []string
	for i := range 10 {
		id := f.droplet(dofake.EnvTags("harbor"))
		// Seeded newest deadline first, so id order is not deadline order.
		f.deployment(env, storage.Deployment{ID: fmt.Sprintf("dep-%02d", i), DropletID: id, IdleDeadlineAt: t0.Add(-time.Duration(i+1) * time.Minute)})
		want = append([]string{"/v2/droplets/" + strconv.FormatInt(id, 10)}, want...)
	}
	res := f.tick()
	if res.Count(reaper.ActionDestroyed) != 3 || !res.More || !res.PacedUntil.Equal(t0.Add(reaper.PaceWindow)) {
		t.Fatalf("first tick %+v, want 3 destroyed, more, paced until %v", res, t0.Add(reaper.PaceWindow))
	}
	if res := f.tick(); len(res.Outcomes) != 0 || res.PacedUntil.IsZero() {
		t.Fatalf("a tick at once %+v, want nothing done and paced", res)
	}
	for minute := 1; len(f.fake.Deletes()) < 10; minute++ {
		if minute > 4 {
			t.Fatalf("after %d minutes %d DELETEs, want 10 in four", minute, len(f.fake.Deletes()))
		}
		f.clock.Advance(reaper.PaceWindow)
		f.tick()
		if n, max := len(f.fake.Deletes()), 3*(minute+1); n > max {
			t.Fatalf("%d DELETEs after %d minutes, pace 3 a minute allows %d", n, minute, max)
		}
	}
	var got []string
	for _, d := range f.fake.Deletes() {
		got = append(got, d.Path)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("DELETE order %v, want oldest deadline first %v", got, want)
	}
	if ev := f.events("harbor", reaper.KindMassDue); len(ev) != 1 {
		t.Fatalf("reaper-mass-due events %+v, want one", ev)
	}

	dry := newFixture(t, pace, func(c *reaper.Config) { c.DryRun = true })
	denv := dry.env("harbor")
	for i := range 10 {
		dry.deployment(denv, storage.Deployment{DropletID: dry.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Duration(i+1) * time.Minute)})
	}
	if res := dry.tick(); res.Count(reaper.ActionWouldDestroy) != 10 || !res.PacedUntil.IsZero() {
		t.Fatalf("dry run %+v, want all 10 reported, unpaced", res)
	}
}

// TestStorageFaultHoldsIdle: while commits fail, and for StorageGrace
// after they recover, idle destruction is held; session expiry is not.
func TestStorageFaultHoldsIdle(t *testing.T) {
	var failing atomic.Bool
	var last atomic.Int64
	f := newFixture(t, func(c *reaper.Config) {
		c.StorageFault = func() (bool, time.Time) {
			if l := last.Load(); l != 0 {
				return failing.Load(), time.UnixMilli(l)
			}
			return failing.Load(), time.Time{}
		}
	})
	env := f.env("harbor")
	failing.Store(true)
	last.Store(t0.UnixMilli())
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Minute)})
	f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(time.Hour), SessionExpiresAt: t0.Add(-time.Minute)})
	if res := f.tick(); res.Count(reaper.ActionHeld) != 1 || res.Count(reaper.ActionDestroyed) != 1 {
		t.Fatalf("while failing %+v, want the idle one held and the expired session destroyed", res.Outcomes)
	}
	// Recovered at t0+10s: still held for StorageGrace.
	f.clock.Advance(10 * time.Second)
	failing.Store(false)
	last.Store(f.clock.Now().UnixMilli())
	f.clock.Advance(reaper.StorageGrace - time.Second)
	if res := f.tick(); len(res.Outcomes) != 0 && res.Count(reaper.ActionHeld) != len(res.Outcomes) {
		t.Fatalf("within the storage grace %+v, want nothing destroyed", res.Outcomes)
	}
	f.clock.Advance(time.Minute)
	if res := f.tick(); res.Count(reaper.ActionDestroyed) != 1 {
		t.Fatalf("after the storage grace %+v, want the idle one destroyed", res.Outcomes)
	}
}

// TestSkewRefusedHeartbeatIsContact: a heartbeat refused only for its
// timestamp stays 401 timestamp_skew and writes nothing (no heartbeat,
// no nonce), but is contact for its deployment; one with a bad
// signature, a body naming another environment, or over the rate quota
// is not.
func TestSkewRefusedHeartbeatIsContact(t *testing.T) {
	rig := newFleetRig(t)
	a := rig.agent("harbor", 30)
	rig.beat()
	count := func() string {
		var hb, nonces int
		if err := rig.db.Read.QueryRowContext(context.Background(), `SELECT (SELECT count(*) FROM heartbeats), (SELECT count(*) FROM nonces)`).Scan(&hb, &nonces); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d heartbeats, %d nonces", hb, nonces)
	}
	before := count()
	rig.server.step(10 * time.Minute)
	signed := rig.base.Now().Add(time.Second)
	if status, code := rig.heartbeat(a, signed); status != http.StatusUnauthorized || code != "timestamp_skew" {
		t.Fatalf("%d %s, want 401 timestamp_skew", status, code)
	}
	if at, _, ok := rig.guard.Contact("harbor", a.id); !ok || !at.Equal(signed) {
		t.Fatalf("contact %v %v, want the signed time %v", at, ok, signed)
	}
	if after := count(); after != before {
		t.Fatalf("a skew refusal wrote: %s before, %s after", before, after)
	}

	// A bad signature, and a body naming another environment: no contact.
	forged := *a
	forged.id = "dep-forged"
	k := rig.keys["harbor"]
	rig.keys["harbor"] = adminKey{id: k.id, key: bytes.Repeat([]byte{1}, 32)}
	if status, code := rig.heartbeat(&forged, signed); status != http.StatusUnauthorized || code != "timestamp_skew" {
		t.Fatalf("forged: %d %s, want 401 timestamp_skew", status, code)
	}
	rig.keys["harbor"] = k
	other := *a
	other.id, other.env = "dep-other", "quay"
	rig.keys["quay"] = k // harbor's key, signing a body that names quay
	rig.heartbeat(&other, signed)
	for _, c := range []struct{ env, id string }{{"harbor", "dep-forged"}, {"quay", "dep-other"}} {
		if _, _, ok := rig.guard.Contact(c.env, c.id); ok {
			t.Fatalf("%s/%s counted as contact", c.env, c.id)
		}
	}

	// Beyond the deployment's heartbeat burst, refusals are not contact.
	var last time.Time
	for i := range ingest.DefaultHeartbeatBurst + 5 {
		last = signed.Add(time.Duration(i+1) * time.Second)
		rig.heartbeat(a, last)
	}
	if at, _, _ := rig.guard.Contact("harbor", a.id); !at.Before(last) {
		t.Fatalf("contact %v: heartbeats over the rate quota counted (last sent %v)", at, last)
	}
}

// TestOneEnvironmentsSkewHoldsOnlyIt: one droplet's clock runs ten
// minutes behind (a broken image): its live agent's refused heartbeats
// are contact and hold its deployment alone; the stopped agents beside it
// and in another environment are reaped after their limits, and the
// clock guard holds nothing.
func TestOneEnvironmentsSkewHoldsOnlyIt(t *testing.T) {
	rig := newFleetRig(t)
	skewed := rig.agent("harbor", 5)
	gone := rig.agent("harbor", 5)
	rig.agent("quay", 5)
	quayGone := rig.agent("quay", 5)
	rig.beat()
	rig.run(time.Minute)
	skewed.skew = -10 * time.Minute
	gone.alive, quayGone.alive = false, false
	rig.run(15 * time.Minute)
	got := map[string]bool{}
	for _, d := range rig.fake.Deletes() {
		got[d.Path] = true
	}
	want := map[string]bool{"/v2/droplets/" + strconv.FormatInt(gone.droplet, 10): true, "/v2/droplets/" + strconv.FormatInt(quayGone.droplet, 10): true}
	if len(rig.fake.Deletes()) != 2 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("DELETEs %v, want the two stopped agents' droplets %d and %d (never the skewed live one's %d)",
			rig.fake.Deletes(), gone.droplet, quayGone.droplet, skewed.droplet)
	}
	st, err := rig.r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Clock.Global != nil {
		t.Fatalf("clock guard %+v, want nothing held by one droplet's clock", st.Clock)
	}
}

// TestRunKeepsThePace: the loop itself destroys three a minute of ten due
// at once — it sleeps on a timer until the pace allows the next, never
// spinning and never sending early.
func TestRunKeepsThePace(t *testing.T) {
	f := newFixture(t, func(c *reaper.Config) { c.MaxDestroy = 3 })
	env := f.env("harbor")
	for i := range 10 {
		f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags("harbor")), IdleDeadlineAt: t0.Add(-time.Duration(i+1) * time.Minute)})
	}
	startRun(t, f.r)
	for minute, want := range []int{3, 6, 9} {
		eventually(t, fmt.Sprintf("%d DELETEs in minute %d", want, minute), func() bool { return len(f.fake.Deletes()) == want })
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := f.clock.BlockUntilContext(ctx, 1) // the loop's pace timer
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(f.fake.Deletes()); n != want {
			t.Fatalf("%d DELETEs in minute %d, want %d", n, minute, want)
		}
		f.clock.Advance(reaper.PaceWindow)
	}
	eventually(t, "all ten destroyed", func() bool { return len(f.fake.Deletes()) == 10 })
}
