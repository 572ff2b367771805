package reaper

import (
	"context"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// The reaper's holds and pace: a droplet is destroyed only when its own
// agent's evidence says it is idle (or its session expired), judged by a
// clock that agrees with the fleet (docs/operations.md, "Reaper",
// only on the fleet's evidence).
const (
	// DefaultGrace is how long idle destruction waits after the process
	// starts, and after a detected clock step, for a deployment that has
	// not heartbeated since: two heartbeat intervals, so every live agent
	// reports at least once. Every start gets it, which covers a restore
	// (a restored database's deadlines are stale evidence; no detection
	// is needed) and chalupa's own downtime.
	DefaultGrace = 2 * clockguard.HeartbeatInterval
	// DefaultMaxDestroy is CHALUPA_REAPER_MAX_DESTROY's default: at most
	// ten DELETEs in any PaceWindow (so per tick). A fleet of 100 due at
	// once drains in ten minutes; a fault that made the whole fleet due
	// costs at most ten droplets a minute while heartbeats (every 30 s)
	// move the live ones' deadlines and reaper-mass-due alerts the
	// operator.
	DefaultMaxDestroy = 10
	// PaceWindow is the pace's window: at most the maximum DELETEs in any
	// minute, measured on the monotonic clock.
	PaceWindow = time.Minute
	// StorageGrace is how long idle destruction stays held after chalupa
	// could store heartbeats again: two heartbeat intervals, for the
	// deadlines that could not move to move.
	StorageGrace = 2 * clockguard.HeartbeatInterval
	// holdRecheck is how long a deployment held by the clock guard or a
	// storage fault waits before it is looked at again (unless a
	// heartbeat changes its state first).
	holdRecheck = clockguard.HeartbeatInterval
	// MassDueMin is the fewest due deployments that make a
	// reaper-mass-due event, besides more than half of the environment's
	// active ones: one of one is not a mass.
	MassDueMin = 3
)

// Event kinds and the outcome of a held deployment.
const (
	// KindClockSuspect: the clock guard holds the fleet (organization-level
	// event) or one environment; recorded when the hold begins and every
	// hour it lasts. Its reason is empty (the schema's reasons are the
	// destroy reasons); the message names the trigger.
	KindClockSuspect = "clock-suspect"
	// KindMassDue: more than half of an environment's active deployments
	// (and at least MassDueMin) fell due in one tick. Nothing is held for it.
	KindMassDue = "reaper-mass-due"
	// ActionHeld: due, but held (Outcome.Detail says which hold and why).
	ActionHeld = "held"
)

// Holds of a due deployment (Outcome.Detail starts with one; the label of
// chalupa_reaper_held_total).
const (
	// HoldClock: the clock guard holds the fleet or the environment.
	HoldClock = "clock-suspect"
	// HoldGrace: no heartbeat since the start or the last clock step,
	// within DefaultGrace of it.
	HoldGrace = "grace"
	// HoldContact: the agent's heartbeats arrive, refused only for their
	// timestamp (clockguard.ContactFresh).
	HoldContact = "contact"
	// HoldStorage: chalupa's commits fail, or failed within StorageGrace.
	HoldStorage = "storage"
)

// gate is what one tick judges every due deployment by.
type gate struct {
	now        time.Time
	clock      clockguard.State
	graceFrom  time.Time
	graceUntil time.Time
	storage    time.Time // idle destruction held until (zero: not)
}

// held is a deployment held by one tick, and until when.
type held struct {
	c     storage.ReaperCandidate
	until time.Time
}

// openGate evaluates the clock guard (a detected step restarts the
// grace), records clock-suspect events, lifts settled holds and reads the
// storage hook: the tick's judgement.
func (r *Reaper) openGate(ctx context.Context, now time.Time) gate {
	st := r.clockGuard.Evaluate()
	if st.Step != 0 {
		r.log.Warn().Dur("step", st.Step).Msg("the wall clock stepped against the monotonic clock: the reaper holds until the fleet agrees again")
	}
	r.mu.Lock()
	if st.LastStep.After(r.graceFrom) || (!st.LastStep.IsZero() && st.LastStep.Before(r.stepSeen)) {
		// A step (either way) restarts the grace.
		r.graceFrom = st.LastStep
	}
	r.stepSeen = st.LastStep
	g := gate{now: now, clock: st, graceFrom: r.graceFrom, graceUntil: r.graceFrom.Add(r.grace)}
	r.mu.Unlock()
	if r.storageFault != nil {
		if failing, last := r.storageFault(); failing {
			g.storage = now.Add(holdRecheck)
		} else if !last.IsZero() && now.Before(last.Add(StorageGrace)) {
			g.storage = last.Add(StorageGrace)
		}
	}
	r.settle(ctx, &g)
	r.raise(ctx, g)
	if r.metrics != nil {
		r.metrics.ClockSuspect.Set(0)
		if g.clock.Global != nil {
			r.metrics.ClockSuspect.Set(1)
		}
		r.metrics.HeldEnvironments.Set(float64(len(g.clock.Environments)))
	}
	return g
}

// settle lifts each agreed hold once every active deployment it covers
// heartbeated since the agreement (the guard lifts it by itself after
// clockguard.SettleMax).
func (r *Reaper) settle(ctx context.Context, g *gate) {
	lift := func(env string, h clockguard.Hold) bool {
		if !h.Agreed {
			return false
		}
		n, err := storage.ActiveWithoutHeartbeatSince(ctx, r.db.Read, env, h.AgreedAt)
		if err != nil {
			r.log.Error().Err(err).Msg("reading heartbeats since the clock agreed failed")
			return false
		}
		if n > 0 {
			return false
		}
		r.clockGuard.Lift(env)
		r.log.Info().Str("environment", env).Str("reason", h.Reason).Msg("clock guard lifted: the fleet agrees and every active deployment heartbeated since")
		return true
	}
	if g.clock.Global != nil && lift("", *g.clock.Global) {
		g.clock.Global = nil
	}
	for env, h := range g.clock.Environments {
		if lift(env, h) {
			delete(g.clock.Environments, env)
		}
	}
}

// raise records clock-suspect when a hold begins and every hour it lasts
// (once: stable ids, remembered so a tick writes nothing new). While the
// fleet is held, its one event stands for every environment's.
func (r *Reaper) raise(ctx context.Context, g gate) {
	one := func(env string, h clockguard.Hold) {
		scope := "fleet"
		if env != "" {
			scope = env
		}
		id := fmt.Sprintf("%s:%s:%d:%d", KindClockSuspect, scope, h.Since.UnixMilli(), h.Raise())
		r.mu.Lock()
		done := r.raised[scope] == id
		r.mu.Unlock()
		if done {
			return
		}
		msg := suspectMessage(env, h)
		err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			if env == "" {
				_, err := storage.InsertOrgEvent(ctx, tx, storage.OrgEvent{ID: id, OrgID: storage.PlatformOrgID, Kind: KindClockSuspect,
					Message: msg, OccurredAt: g.now})
				return err
			}
			e, err := storage.EnvironmentBySlug(ctx, tx, env)
			if err != nil {
				return err
			}
			_, err = storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: id, EnvironmentID: e.ID, Kind: KindClockSuspect,
				Message: msg, OccurredAt: g.now})
			return err
		})
		if err != nil {
			r.log.Error().Err(err).Str("environment", env).Msg("recording clock-suspect failed")
			return
		}
		r.mu.Lock()
		r.raised[scope] = id
		r.mu.Unlock()
		r.log.Warn().Str("environment", env).Str("reason", h.Reason).Dur("offset", h.Offset).Msg(msg)
	}
	if g.clock.Global != nil {
		// One event for the fleet: it covers every environment's hold.
		one("", *g.clock.Global)
		return
	}
	for env, h := range g.clock.Environments {
		one(env, h)
	}
}

// suspectMessage is a clock-suspect event's message: what triggered the
// hold, what it holds, and the session-expiry cap.
func suspectMessage(env string, h clockguard.Hold) string {
	what := "the server clock disagrees with the fleet"
	switch h.Reason {
	case clockguard.ReasonStep:
		what = fmt.Sprintf("the server's wall clock stepped %s against its monotonic clock", h.Offset.Round(time.Second))
	case clockguard.ReasonFleetSkew:
		what = fmt.Sprintf("heartbeats of %d or more environments were refused for timestamps %s off the server clock", clockguard.ClusterEnvironments, h.Offset.Round(time.Second))
	case clockguard.ReasonEnvironmentSkew:
		what = fmt.Sprintf("heartbeats of environment %s were refused for timestamps %s off the server clock", env, h.Offset.Round(time.Second))
	}
	scope := "the reaper destroys nothing"
	if env != "" {
		scope = "the reaper destroys nothing in this environment"
	}
	sessions := fmt.Sprintf("session expiry is held for at most %s", clockguard.SessionHoldMax)
	if !h.HoldsSessions() {
		sessions = fmt.Sprintf("session expiry is enforced again (held %s, the cap)", clockguard.SessionHoldMax)
	}
	return fmt.Sprintf("%s: %s until the fleet agrees again and every active deployment heartbeats (or %s pass); %s (docs/operations.md, \"Reaper\")",
		what, scope, clockguard.SettleMax, sessions)
}

// holdOf says whether c, due at g.now, is held, by which hold, why and
// until when (zero: not held).
func (r *Reaper) holdOf(g gate, c storage.ReaperCandidate) (hold, detail string, until time.Time) {
	reason := reasonAt(c, g.now)
	if h, ok := g.clock.Held(c.EnvironmentSlug); ok && (reason == ReasonIdle || h.HoldsSessions()) {
		return HoldClock, fmt.Sprintf("%s: the clock guard holds (%s)", HoldClock, h.Reason), g.now.Add(holdRecheck)
	}
	if reason != ReasonIdle {
		return "", "", time.Time{}
	}
	if g.now.Before(g.graceUntil) && c.LastHeartbeatAt.Before(g.graceFrom) {
		return HoldGrace, HoldGrace + ": no heartbeat since the start or clock step; live agents report first", g.graceUntil
	}
	if g.now.Before(g.storage) {
		return HoldStorage, HoldStorage + ": chalupa could not store heartbeats; the deadline is not evidence", g.storage
	}
	if signed, age, ok := r.clockGuard.Contact(c.EnvironmentSlug, c.DeploymentID); ok && signed.After(c.LastHeartbeatAt) && age < clockguard.ContactFresh {
		return HoldContact, HoldContact + ": its agent's heartbeats arrive, refused only for their timestamp", g.now.Add(clockguard.ContactFresh - age)
	}
	return "", "", time.Time{}
}

// admit decides whether the tick handles c now: held (an outcome and a
// hold to write), paced (the tick stops), or go.
func (r *Reaper) admit(g gate, c storage.ReaperCandidate, res *TickResult, holds *[]held) (proceed, stop bool) {
	if hold, detail, until := r.holdOf(g, c); hold != "" {
		res.Outcomes = append(res.Outcomes, Outcome{Environment: c.EnvironmentSlug, Deployment: c.DeploymentID, DropletID: c.DropletID,
			Action: ActionHeld, Reason: reasonAt(c, g.now), Detail: detail})
		*holds = append(*holds, held{c: c, until: until})
		if r.metrics != nil {
			r.metrics.Held.WithLabelValues(hold).Inc()
		}
		return false, false
	}
	if r.dryRun {
		return true, false
	}
	if until, ok := r.paced(g.now); ok {
		res.PacedUntil, res.More = until, true
		if r.metrics != nil {
			r.metrics.Paced.Inc()
		}
		return false, true
	}
	return true, false
}

// paced reports whether the pace is spent, and when the next DELETE may
// go.
func (r *Reaper) paced(now time.Time) (time.Time, bool) {
	mono := r.clockGuard.Mono()
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.destroys[:0]
	for _, at := range r.destroys {
		if mono-at < PaceWindow {
			keep = append(keep, at)
		}
	}
	r.destroys = keep
	if len(r.destroys) < r.maxDestroy {
		return time.Time{}, false
	}
	return now.Add(r.destroys[0] + PaceWindow - mono), true
}

// notePace counts one DELETE against the pace.
func (r *Reaper) notePace() {
	mono := r.clockGuard.Mono()
	r.mu.Lock()
	r.destroys = append(r.destroys, mono)
	r.mu.Unlock()
}

// writeHolds stores the holds of one tick in one writer unit. It reports
// whether they were written (a tick that could not is no progress).
func (r *Reaper) writeHolds(ctx context.Context, holds []held) bool {
	if len(holds) == 0 {
		return true
	}
	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		for _, h := range holds {
			if err := storage.SetReaperHold(ctx, tx, h.c.EnvironmentID, h.c.DeploymentID, h.until); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.log.Error().Err(err).Int("deployments", len(holds)).Msg("recording the reaper's holds failed")
		return false
	}
	return true
}

// massDue records reaper-mass-due for each environment where more than
// half of the active deployments (and at least MassDueMin) are due at now:
// once per environment and hour. Nothing is held for it.
func (r *Reaper) massDue(ctx context.Context, now time.Time) {
	envs, err := storage.ReaperMassDue(ctx, r.db.Read, now, r.fresh, MassDueMin)
	if err != nil {
		r.log.Error().Err(err).Msg("reading the due counts failed")
		return
	}
	for _, e := range envs {
		id := fmt.Sprintf("%s:%s:%d", KindMassDue, e.EnvironmentSlug, now.Unix()/3600)
		r.mu.Lock()
		done := r.massRaised[e.EnvironmentSlug] == id
		r.mu.Unlock()
		if done {
			continue
		}
		msg := fmt.Sprintf("%d of %d active deployments fell due at once; destroyed at most %d a minute, oldest deadline first (docs/operations.md, \"Reaper\")",
			e.Due, e.Active, r.maxDestroy)
		var inserted bool
		if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			inserted, err = storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: id, EnvironmentID: e.EnvironmentID,
				Kind: KindMassDue, Message: msg, OccurredAt: now})
			return err
		}); err != nil {
			r.log.Error().Err(err).Msg("recording reaper-mass-due failed")
			continue
		}
		r.mu.Lock()
		r.massRaised[e.EnvironmentSlug] = id
		r.mu.Unlock()
		if inserted {
			r.log.Warn().Str("environment", e.EnvironmentSlug).Int("due", e.Due).Int("active", e.Active).Msg(msg)
		}
	}
}
