package reaper_test

// Tests of holds that end and of skew contact per deployment
// (docs/operations.md, "Reaper").

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// deleted reports whether a's droplet was DELETEd.
func (rig *fleetRig) deleted(a *fleetAgent) bool {
	for _, d := range rig.fake.Deletes() {
		if d.Path == "/v2/droplets/"+strconv.FormatInt(a.droplet, 10) {
			return true
		}
	}
	return false
}

// held returns a's stored hold as Status lists it (ok false: not listed).
func (rig *fleetRig) held(r *reaper.Reaper, a *fleetAgent) (storage.HeldDeployment, bool) {
	rig.t.Helper()
	st, err := r.Status(context.Background())
	if err != nil {
		rig.t.Fatal(err)
	}
	if st.HeldTotal != len(st.Held) {
		rig.t.Fatalf("status lists %d held of %d", len(st.Held), st.HeldTotal)
	}
	for _, h := range st.Held {
		if h.EnvironmentSlug == a.env && h.DeploymentID == a.id {
			return h, true
		}
	}
	return storage.HeldDeployment{}, false
}

// skewAhead is how far ahead of the server the skewed requests are signed:
// beyond the 300 s window, as in the report behind these tests.
const skewAhead = 420 * time.Second

// TestSkewRefusedGhostHoldsNothing: one heartbeat signed 420 s ahead for a
// deployment id that does not exist (or for an ended deployment) is
// refused timestamp_skew and is no one's contact: the dead agent's
// droplet beside it in the same environment is reaped at the next tick.
func TestSkewRefusedGhostHoldsNothing(t *testing.T) {
	rig := newFleetRig(t)
	dead := rig.agent("harbor", 1)
	ended := rig.agent("harbor", 1)
	rig.beat()
	dead.alive, ended.alive = false, false
	env, err := storage.EnvironmentBySlug(context.Background(), rig.db.Read, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	if err := rig.db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		_, err := storage.EndDeployment(context.Background(), tx, env.ID, ended.id, rig.base.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if status, code := rig.heartbeat(ended, rig.base.Now().Add(skewAhead)); status != http.StatusUnauthorized || code != "timestamp_skew" {
		t.Fatalf("ended deployment's heartbeat: %d %s, want 401 timestamp_skew", status, code)
	}
	if _, _, ok := rig.guard.Contact("harbor", ended.id); ok {
		t.Fatal("an ended deployment's skew refusal counted as contact")
	}
	rig.base.Advance(90 * time.Second) // past the deadline and the start-up grace
	ghost := &fleetAgent{env: "harbor", id: "dep-made-up", droplet: 424242, limit: 1}
	if status, code := rig.heartbeat(ghost, rig.base.Now().Add(skewAhead)); status != http.StatusUnauthorized || code != "timestamp_skew" {
		t.Fatalf("ghost heartbeat: %d %s, want 401 timestamp_skew", status, code)
	}
	if _, _, ok := rig.guard.Contact("harbor", ghost.id); ok {
		t.Fatal("a made-up deployment id counted as contact")
	}
	res := rig.tick()
	if !rig.deleted(dead) || res.Count(reaper.ActionHeld) != 0 {
		t.Fatalf("tick %+v: want the dead agent's droplet %d destroyed, nothing held", res.Outcomes, dead.droplet)
	}
}

// TestSkewContactHoldsOnlyItsDeployment: a live agent whose clock runs
// 420 s ahead is heard only through skew refusals; they hold its
// deployment (listed with reason contact) and no other: the dead agent
// beside it is reaped after its limit. Once the skewed agent stops, it is
// reaped within 2 minutes of its last request.
func TestSkewContactHoldsOnlyItsDeployment(t *testing.T) {
	rig := newFleetRig(t)
	live := rig.agent("harbor", 1)
	dead := rig.agent("harbor", 1)
	rig.beat()
	dead.alive = false
	live.skew = skewAhead
	rig.run(3 * time.Minute)
	if rig.deleted(live) || !rig.deleted(dead) {
		t.Fatalf("DELETEs %v: want the dead agent's droplet %d and never the skewed live one's %d", rig.fake.Deletes(), dead.droplet, live.droplet)
	}
	if h, ok := rig.held(rig.r, live); !ok || h.Hold.Reason != reaper.HoldContact || h.Hold.Max != clockguard.ContactFresh ||
		!strings.Contains(h.Hold.Evidence, "refused only for its timestamp") {
		t.Fatalf("status lists the skewed deployment as %+v (listed %v), want a contact hold with its evidence", h, ok)
	}
	if st, _ := rig.r.Status(context.Background()); st.Clock.Global != nil {
		t.Fatalf("clock guard %+v: one environment's skew held the fleet", st.Clock)
	}
	if ev := rig.events(reaper.KindHoldReanchored); len(ev) != 0 {
		t.Fatalf("holds written on a right clock were re-anchored: %+v", ev)
	}

	// The agent stops: its last request was just now.
	last := rig.base.Now()
	live.alive = false
	for rig.base.Now().Before(last.Add(3 * time.Minute)) {
		rig.base.Advance(10 * time.Second)
		rig.tick()
		if rig.deleted(live) {
			break
		}
	}
	if !rig.deleted(live) {
		t.Fatal("the skewed agent's droplet was not reaped within 3 minutes of its last request")
	}
	if held := rig.base.Now().Sub(last); held > 2*time.Minute {
		t.Fatalf("held %v after the last skew-refused request, want at most 2 minutes", held)
	}
}

// TestReplayedSkewRequestRenewsNothing: an active deployment's one
// skew-refused heartbeat, captured and replayed byte for byte every 15 s,
// holds it for no more than 2 minutes after the one genuine request.
func TestReplayedSkewRequestRenewsNothing(t *testing.T) {
	rig := newFleetRig(t)
	a := rig.agent("harbor", 1)
	rig.beat()
	a.alive = false
	rig.base.Advance(90 * time.Second)
	// Ten minutes ahead: outside the signing window for the whole test,
	// so every replay is refused for its timestamp.
	replay := rig.signed(a, rig.base.Now().Add(10*time.Minute))
	genuine := rig.base.Now()
	for rig.base.Now().Before(genuine.Add(4 * time.Minute)) {
		if status, code := replay(); status != http.StatusUnauthorized || code != "timestamp_skew" {
			t.Fatalf("replay: %d %s, want 401 timestamp_skew", status, code)
		}
		rig.tick()
		if rig.deleted(a) {
			break
		}
		rig.base.Advance(15 * time.Second)
	}
	if !rig.deleted(a) {
		t.Fatal("replays every 15 s held the deployment for 4 minutes")
	}
	if held := rig.base.Now().Sub(genuine); held > 2*time.Minute || held < clockguard.ContactFresh {
		t.Fatalf("reaped %v after the genuine request, want between %v (its contact) and 2 minutes", held, clockguard.ContactFresh)
	}
}

// TestHoldWrittenUnderAWrongClockEnds: the daemon restarts with its clock
// two hours ahead and holds a dead agent's due deployment for the
// start-up grace, stored as an end two hours too late. Status lists the
// hold with its reason and end. Restarted with the clock right, the hold
// is re-anchored to now + its maximum (the grace) with a
// reaper-hold-reanchored event, and the droplet is reaped within that
// maximum of the clock being right.
func TestHoldWrittenUnderAWrongClockEnds(t *testing.T) {
	rig := newFleetRig(t)
	dead := rig.agent("harbor", 1)
	rig.beat()
	dead.alive = false

	// Restarts get a guard of their own: a new process.
	restart := func() *reaper.Reaper {
		return rig.newReaper(func(c *reaper.Config) { c.Guard = clockguard.New(rig.server) })
	}
	rig.base.Advance(10 * time.Second)
	rig.server.step(2 * time.Hour)
	ahead := restart()
	if res, err := ahead.Tick(context.Background()); err != nil || res.Count(reaper.ActionHeld) != 1 {
		t.Fatalf("tick under +2 h: %+v, %v; want the dead deployment held", res.Outcomes, err)
	}
	h, ok := rig.held(ahead, dead)
	if !ok || h.Hold.Reason != reaper.HoldGrace || h.Hold.Max != reaper.DefaultGrace ||
		!h.Hold.Until.Equal(rig.server.Now().Add(reaper.DefaultGrace)) || !strings.Contains(h.Hold.Evidence, "no heartbeat since") {
		t.Fatalf("status under +2 h lists %+v (listed %v), want the grace hold ending %v", h, ok, rig.server.Now().Add(reaper.DefaultGrace))
	}

	// The clock is set right and the daemon restarted.
	rig.base.Advance(10 * time.Second)
	rig.server.step(-2 * time.Hour)
	right := rig.server.Now()
	fixed := restart()
	if h, ok := rig.held(fixed, dead); !ok || h.Hold.Until.Sub(right) < time.Hour {
		t.Fatalf("before the first look the stored hold is %+v (listed %v), want it listed two hours ahead", h, ok)
	}
	if res, err := fixed.Tick(context.Background()); err != nil || len(res.Outcomes) != 0 {
		t.Fatalf("first tick with the clock right: %+v, %v; want nothing due (re-anchored to the grace)", res.Outcomes, err)
	}
	h, ok = rig.held(fixed, dead)
	if !ok || !h.Hold.Until.Equal(right.Add(reaper.DefaultGrace)) || h.Hold.Reason != reaper.HoldGrace {
		t.Fatalf("after the first look: %+v (listed %v), want re-anchored to %v", h, ok, right.Add(reaper.DefaultGrace))
	}
	ev := rig.events(reaper.KindHoldReanchored)
	if len(ev) != 1 || ev[0].DeploymentID != dead.id || !strings.Contains(ev[0].Message, "grace hold") {
		t.Fatalf("reaper-hold-reanchored events %+v, want one for %s", ev, dead.id)
	}
	// Once: a second look moves nothing and records nothing.
	fixed.Tick(context.Background())
	if ev := rig.events(reaper.KindHoldReanchored); len(ev) != 1 {
		t.Fatalf("%d reaper-hold-reanchored events after a second look, want 1", len(ev))
	}

	rig.base.Advance(reaper.DefaultGrace)
	if res, err := fixed.Tick(context.Background()); err != nil || res.Count(reaper.ActionDestroyed) != 1 || !rig.deleted(dead) {
		t.Fatalf("tick %v after the clock was right: %+v, %v; want the dead droplet destroyed", reaper.DefaultGrace, res.Outcomes, err)
	}
}

// TestHoldsAreStoredWithReasonAndBound: a hold of every kind the reaper
// writes carries its reason, evidence and a maximum no shorter than the
// time it holds.
func TestHoldsAreStoredWithReasonAndBound(t *testing.T) {
	f := newFixture(t)
	env := f.env("harbor")
	// The tag guard refuses a droplet without the environment's tag.
	guarded := f.deployment(env, storage.Deployment{ID: "dep-guard", DropletID: f.droplet([]string{"chalupa"}), IdleDeadlineAt: t0.Add(-time.Minute)})
	f.tick()
	c := f.candidate(env.ID, guarded.ID)
	if c.HoldReason != reaper.HoldGuard || !c.HoldUntil.Equal(t0.Add(reaper.GuardHold)) {
		t.Fatalf("guard hold %q until %v, want %q until %v", c.HoldReason, c.HoldUntil, reaper.HoldGuard, t0.Add(reaper.GuardHold))
	}
	st, err := f.r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Held) != 1 || st.Held[0].Hold.Max != reaper.GuardHold || !strings.Contains(st.Held[0].Hold.Evidence, "lacks the tag") {
		t.Fatalf("held %+v, want the guard hold with its maximum and the guard's words", st.Held)
	}
}
