package reaper

import (
	"context"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/alerts"
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
	// ReanchorPerPass bounds the holds one look re-anchors (one writer
	// unit, an event each): a fleet held under a wrong clock is
	// re-anchored in passes at each wake-up (at most MaxSleep apart).
	ReanchorPerPass = 500
	// maxStatusHeld bounds the held deployments listed in Status (the
	// total is counted).
	maxStatusHeld = 500
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
	// KindHoldReanchored: a stored hold ended further ahead than its own
	// maximum (it was written under a wrong clock) and was re-anchored to
	// now + maximum; one per deployment and stored end.
	KindHoldReanchored = "reaper-hold-reanchored"
	// ActionHeld: due, but held (Outcome.Detail says which hold and why).
	ActionHeld = "held"
)

// Holds of a due deployment (Outcome.Detail starts with one; the label of
// chalupa_reaper_held_total; the reason stored with the hold).
const (
	// HoldClock: the clock guard holds the fleet.
	HoldClock = "clock-suspect"
	// HoldGrace: no heartbeat since the start or the last clock step,
	// within DefaultGrace of it.
	HoldGrace = "grace"
	// HoldContact: the agent's heartbeats arrive, refused only for their
	// timestamp (clockguard.ContactFresh); it holds that deployment alone.
	HoldContact = "contact"
	// HoldStorage: chalupa's commits fail, or failed within StorageGrace.
	HoldStorage = "storage"
	// HoldEnvironmentAhead: the environment's live agents are refused
	// because the server's clock runs ahead of theirs
	// (clockguard.Guard.EnvironmentAhead); a deployment of it is judged on
	// their time, and held until its deadline passes there.
	HoldEnvironmentAhead = "environment-ahead"
)

// Reasons of the reaper's other stored holds: a due deployment it acted on
// and must not look at again at once (never a spin).
const (
	// HoldGuard: the tag guard refused its droplet (GuardHold).
	HoldGuard = "guard"
	// HoldDryRun: dry run recorded reaper-would-destroy (GuardHold).
	HoldDryRun = "dry-run"
	// HoldBackoff: a destroy failed; retried after Backoff.
	HoldBackoff = "backoff"
	// HoldRateLimited: a customer organization's token is rate-limited
	// until the provider's retry time.
	HoldRateLimited = "rate-limited"
)

// HoldUpgrading is the hold an agent upgrade puts on its box's deployment
// while the new agent has not reported (docs/operations.md, "Agent
// install", under Upgrade): stored like the reaper's own holds, with its
// evidence and maximum (the report bound plus the restore), listed by
// Status; it puts off the idle deadline alone, never the session expiry
// (storage's decision time), and the upgrade, not a heartbeat, ends it.
const HoldUpgrading = storage.HoldUpgrading

// gate is what one tick judges every due deployment by.
type gate struct {
	now        time.Time
	clock      clockguard.State
	graceFrom  time.Time
	graceUntil time.Time
	storage    time.Time // idle destruction held until (zero: not)
}

// held is a deployment held by one tick, and its hold.
type held struct {
	c    storage.ReaperCandidate
	hold storage.ReaperHold
}

// openGate evaluates the clock guard (a detected step restarts the
// grace), records clock-suspect events, reports the guard's hold, the
// rate limit's end and the overdue condition's end to the alerter
// (alerts.go), lifts settled holds, re-anchors
// stored holds that end beyond their maximum and reads the storage hook:
// the tick's judgement.
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
	r.clockAlerts(ctx, g.clock.Global)
	if !now.Before(r.limitedUntil()) {
		// The rate-limit hold has lifted (alerts.go).
		r.setAlert(ctx, alerts.KindReaperRateLimited, false, "")
	}
	if r.alerting(alerts.KindReaperOverdue) {
		// Looked at every wake-up while it holds: the last overdue
		// deployment may end with no tick after it.
		r.checkOverdue(ctx, now)
	}
	r.reanchor(ctx)
	if r.metrics != nil {
		r.metrics.ClockSuspect.Set(0)
		if g.clock.Global != nil {
			r.metrics.ClockSuspect.Set(1)
		}
	}
	return g
}

// settle lifts the fleet's agreed hold once every active deployment
// heartbeated since the agreement (the guard lifts it by itself after
// clockguard.SettleMax).
func (r *Reaper) settle(ctx context.Context, g *gate) {
	h := g.clock.Global
	if h == nil || !h.Agreed {
		return
	}
	n, err := storage.ActiveWithoutHeartbeatSince(ctx, r.db.Read, "", h.AgreedAt)
	if err != nil {
		r.log.Error().Err(err).Msg("reading heartbeats since the clock agreed failed")
		return
	}
	if n > 0 {
		return
	}
	r.clockGuard.Lift()
	r.log.Info().Str("reason", h.Reason).Msg("clock guard lifted: the fleet agrees and every active deployment heartbeated since")
	g.clock.Global = nil
}

// raise records clock-suspect when the fleet's hold begins and every hour
// it lasts (once: stable ids, remembered so a tick writes nothing new).
func (r *Reaper) raise(ctx context.Context, g gate) {
	if g.clock.Global == nil {
		return
	}
	h := *g.clock.Global
	const scope = "fleet"
	id := fmt.Sprintf("%s:%s:%d:%d", KindClockSuspect, scope, h.Since.UnixMilli(), h.Raise())
	r.mu.Lock()
	done := r.raised[scope] == id
	r.mu.Unlock()
	if done {
		return
	}
	msg := suspectMessage(h)
	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.InsertOrgEvent(ctx, tx, storage.OrgEvent{ID: id, OrgID: storage.PlatformOrgID, Kind: KindClockSuspect,
			Message: msg, OccurredAt: g.now})
		return err
	})
	if err != nil {
		r.log.Error().Err(err).Msg("recording clock-suspect failed")
		return
	}
	r.mu.Lock()
	r.raised[scope] = id
	r.mu.Unlock()
	r.log.Warn().Str("reason", h.Reason).Dur("offset", h.Offset).Msg(msg)
}

// reanchor re-anchors the stored holds that end further ahead of now than
// their own maximum — written under a wrong clock — to now + maximum, at
// most ReanchorPerPass of them, each with a reaper-hold-reanchored event,
// so a hold ends within its maximum of the clock being right
// (docs/operations.md, "Reaper", holds that end). A read on the pool
// first: the usual look finds none and takes no writer unit. Now is read
// inside the unit, after every hold committed before it was written, so a
// hold written just before is never taken for one from a wrong clock.
func (r *Reaper) reanchor(ctx context.Context) {
	n, err := storage.ReaperHoldsBeyondMax(ctx, r.db.Read, r.clock.Now())
	if err != nil {
		r.log.Error().Err(err).Msg("reading the reaper's holds failed")
		return
	}
	if n == 0 {
		return
	}
	var moved []storage.Reanchored
	var now time.Time
	err = r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		now = r.clock.Now()
		if moved, err = storage.ReanchorReaperHolds(ctx, tx, now, ReanchorPerPass); err != nil {
			return err
		}
		for _, m := range moved {
			if _, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
				ID:            fmt.Sprintf("%s:%s:%s:%d", KindHoldReanchored, m.EnvironmentSlug, m.DeploymentID, m.Was.UnixMilli()),
				EnvironmentID: m.EnvironmentID, DeploymentID: m.DeploymentID, Kind: KindHoldReanchored,
				Message: reanchorMessage(m, now), OccurredAt: now,
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.log.Error().Err(err).Int("holds", n).Msg("re-anchoring the reaper's holds failed")
		return
	}
	for _, m := range moved {
		r.log.Warn().Str("environment", m.EnvironmentSlug).Str("deployment", m.DeploymentID).Str("hold", m.Hold.Reason).
			Time("was", m.Was).Time("until", m.Hold.Until).Msg("a reaper hold ended beyond its maximum (a wrong clock wrote it): re-anchored")
	}
}

// reanchorMessage is a reaper-hold-reanchored event's message.
func reanchorMessage(m storage.Reanchored, now time.Time) string {
	reason := m.Hold.Reason
	if reason == "" {
		reason = "unrecorded"
	}
	return fmt.Sprintf("the reaper's %s hold ended at %s, %s ahead, beyond its maximum of %s: it was written under a clock that was wrong, and now ends at %s (docs/operations.md, \"Reaper\")",
		reason, m.Was.UTC().Format(time.RFC3339), m.Was.Sub(now).Round(time.Second), m.Hold.Max, m.Hold.Until.UTC().Format(time.RFC3339))
}

// suspectMessage is a clock-suspect event's message: what triggered the
// hold, what it holds, and the session-expiry cap.
func suspectMessage(h clockguard.Hold) string {
	what := "the server clock disagrees with the fleet"
	switch h.Reason {
	case clockguard.ReasonStep:
		what = fmt.Sprintf("the server's wall clock stepped %s against its monotonic clock", h.Offset.Round(time.Second))
	case clockguard.ReasonBehindMark:
		what = fmt.Sprintf("the server started with its wall clock %s behind the newest signed request it had accepted (the high-water mark)", (-h.Offset).Round(time.Second))
	case clockguard.ReasonFleetSkew:
		what = fmt.Sprintf("heartbeats of %d or more environments were refused for timestamps %s off the server clock", clockguard.ClusterEnvironments, h.Offset.Round(time.Second))
	}
	scope := "the reaper destroys nothing"
	sessions := fmt.Sprintf("session expiry is held for at most %s", clockguard.SessionHoldMax)
	if !h.HoldsSessions() {
		sessions = fmt.Sprintf("session expiry is enforced again (held %s, the cap)", clockguard.SessionHoldMax)
	}
	return fmt.Sprintf("%s: %s until the fleet agrees again and every active deployment heartbeats (or %s pass); %s (docs/operations.md, \"Reaper\")",
		what, scope, clockguard.SettleMax, sessions)
}

// holdOf says whether c, due at g.now, is held: by which hold, the
// outcome's detail, and the hold to store (its end, evidence and own
// maximum); hold is "" when it is not held.
func (r *Reaper) holdOf(g gate, c storage.ReaperCandidate) (hold, detail string, h storage.ReaperHold) {
	reason := reasonAt(c, g.now)
	if ch := g.clock.Global; ch != nil && (reason == ReasonIdle || ch.HoldsSessions()) {
		return HoldClock, fmt.Sprintf("%s: the clock guard holds (%s)", HoldClock, ch.Reason), storage.ReaperHold{
			Until: g.now.Add(holdRecheck), Reason: HoldClock, Max: holdRecheck,
			Evidence: fmt.Sprintf("the clock guard holds the fleet (%s, server clock %+.0f s off the fleet, since %s)",
				ch.Reason, ch.Offset.Seconds(), ch.Since.UTC().Format(time.RFC3339))}
	}
	if reason != ReasonIdle {
		return "", "", storage.ReaperHold{}
	}
	if g.now.Before(g.graceUntil) && c.LastHeartbeatAt.Before(g.graceFrom) {
		return HoldGrace, HoldGrace + ": no heartbeat since the start or clock step; live agents report first", storage.ReaperHold{
			Until: g.graceUntil, Reason: HoldGrace, Max: max(r.grace, time.Millisecond),
			Evidence: fmt.Sprintf("no heartbeat since %s (the start or the last clock step); the last one arrived %s",
				g.graceFrom.UTC().Format(time.RFC3339), timeOrNever(c.LastHeartbeatAt))}
	}
	if g.now.Before(g.storage) {
		return HoldStorage, HoldStorage + ": chalupa could not store heartbeats; the deadline is not evidence", storage.ReaperHold{
			Until: g.storage, Reason: HoldStorage, Max: max(StorageGrace, holdRecheck),
			Evidence: "chalupa's commits failed for a storage fault within " + StorageGrace.String()}
	}
	if age, ok := r.contact(c, g.now); ok {
		return HoldContact, HoldContact + ": its agent's heartbeats arrive, refused only for their timestamp", storage.ReaperHold{
			Until: g.now.Add(clockguard.ContactFresh - age), Reason: HoldContact, Max: clockguard.ContactFresh,
			Evidence: fmt.Sprintf("a heartbeat of this deployment refused only for its timestamp arrived %s ago", age.Round(time.Second))}
	}
	if off, ok := r.clockGuard.EnvironmentAhead(c.EnvironmentSlug); ok && c.IdleDeadlineAt.After(g.now.Add(-off)) {
		return HoldEnvironmentAhead, fmt.Sprintf("%s: its environment's agents say the server clock is %s ahead; on their time the idle deadline has not passed", HoldEnvironmentAhead, off.Round(time.Second)), storage.ReaperHold{
			Until: minTime(c.IdleDeadlineAt.Add(off), g.now.Add(clockguard.ContactFresh)), Reason: HoldEnvironmentAhead, Max: clockguard.ContactFresh,
			Evidence: fmt.Sprintf("heartbeats of this environment's active deployments, refused only for their timestamps in the last %s, were signed a median %s behind the server clock; the idle deadline is %s away on their time",
				clockguard.ContactFresh, off.Round(time.Second), c.IdleDeadlineAt.Sub(g.now.Add(-off)).Round(time.Second))}
	}
	return "", "", storage.ReaperHold{}
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// contact reports whether c's agent was heard, refused only for its
// timestamp, less than clockguard.ContactFresh ago and after c's last
// stored heartbeat (both on the server's clock), and how long ago. It
// holds c alone; a replay renews nothing (clockguard.Guard.SkewRefused).
func (r *Reaper) contact(c storage.ReaperCandidate, now time.Time) (time.Duration, bool) {
	_, age, ok := r.clockGuard.Contact(c.EnvironmentSlug, c.DeploymentID)
	if !ok || age >= clockguard.ContactFresh || !now.Add(-age).After(c.LastHeartbeatAt) {
		return 0, false
	}
	return age, true
}

// timeOrNever formats t for evidence ("never" when zero).
func timeOrNever(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// admit decides whether the tick handles c now: held (an outcome and a
// hold to write), paced (the tick stops), or go.
func (r *Reaper) admit(g gate, c storage.ReaperCandidate, res *TickResult, holds *[]held) (proceed, stop bool) {
	if hold, detail, h := r.holdOf(g, c); hold != "" {
		res.Outcomes = append(res.Outcomes, Outcome{Environment: c.EnvironmentSlug, Deployment: c.DeploymentID, DropletID: c.DropletID,
			Action: ActionHeld, Reason: reasonAt(c, g.now), Detail: detail})
		*holds = append(*holds, held{c: c, hold: h})
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
			if err := storage.SetReaperHold(ctx, tx, h.c.EnvironmentID, h.c.DeploymentID, h.hold); err != nil {
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
// once per environment and hour. Nothing is held for it. It reports the
// condition to the alerter for each such environment, and its end for
// each environment reported before that is not one any more (alerts.go).
func (r *Reaper) massDue(ctx context.Context, now time.Time) {
	envs, err := storage.ReaperMassDue(ctx, r.db.Read, now, r.fresh, MassDueMin)
	if err != nil {
		r.log.Error().Err(err).Msg("reading the due counts failed")
		return
	}
	r.massAlerts(ctx, envs)
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
