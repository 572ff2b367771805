// Package reaper destroys the droplets of deployments whose session expired
// or whose idle deadline passed without live CI, and ends those deployments
// (docs/operations.md, "Reaper"). It is event-driven: it sleeps until the
// earliest decision time among active deployments, and a heartbeat that
// brings a deadline forward wakes it (ingest.Service.DeadlineActivity).
//
// Every provider call goes through digitalocean; the reaper is the only
// holder of the platform write token, reached
// through a Credentials source so that customer organizations' sweeps plug
// in with their own tokens.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/tokencheck"
	"github.com/chalupa-run/chalupa/internal/wake"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// The reaper's bounds (docs/operations.md, "Reaper").
const (
	// DefaultCIFreshness is how long a heartbeat's ciActive=true counts
	// as live CI (CHALUPA_REAPER_CI_FRESHNESS): a droplet whose agent died
	// mid-CI must not live forever, and ten minutes is twenty missed
	// heartbeats at the agent's 30 s interval.
	DefaultCIFreshness = 10 * time.Minute
	// MaxSleep is the longest the reaper sleeps while any deployment is
	// active: a safety net under the event-driven wake-ups (a clock step,
	// a write that bypassed ingest), and the 5-minute sweep interval of docs/operations.md, "Reaper".
	MaxSleep = 5 * time.Minute
	// MaxPerTick caps the deployments one tick handles (each is up to
	// three provider calls and one writer unit); the loop runs the next
	// tick at once while more are due.
	MaxPerTick = 20
	// TickBudget bounds one tick's provider work: no new deployment is
	// started after it, so an API that answers at its 10 s request
	// deadline cannot hold one tick for minutes.
	TickBudget = 30 * time.Second
	// GuardHold is how long a deployment is left alone after the tag
	// guard refused its droplet, or after dry run recorded what it would
	// do, unless a heartbeat changes its state first: the operator needs
	// time to act, and warnings are not repeated every tick.
	GuardHold = time.Hour
	// BackoffMin and BackoffMax bound the pause before a failed destroy
	// (5xx, timeout, 401/403 on the write token) is retried: doubling
	// from 30 s, so a provider blip costs a minute and an outage never
	// costs more than one attempt per deployment every 15 minutes.
	BackoffMin = 30 * time.Second
	BackoffMax = 15 * time.Minute
	// stuckPause is the wait before the schedule is read again when due
	// deployments remain but a tick could make no progress (a database
	// fault): never a spin.
	stuckPause = 5 * time.Second
	// maxStatusDue bounds the due deployments listed in Status.
	maxStatusDue = 50
)

// Lifecycle event kinds the reaper records.
const (
	// KindDestroyed: the droplet was destroyed (or already gone) and the
	// deployment ended; id "reaper:<env>:<deployment>".
	KindDestroyed = "reaper-destroyed"
	// KindWouldDestroy: dry run; once per deployment per deadline.
	KindWouldDestroy = "reaper-would-destroy"
	// KindWarning: the guard refused; the deployment stays active.
	KindWarning = "reaper-warning"
)

// Reasons of the reaper's events.
const (
	ReasonIdle           = "idle"
	ReasonSessionExpired = "session-expired"
	ReasonProvider       = "provider"
)

// Outcome actions: what one tick did with one due deployment.
const (
	// ActionDestroyed: DELETE accepted, deployment ended.
	ActionDestroyed = "destroyed"
	// ActionAlreadyGone: the provider said 404; deployment ended.
	ActionAlreadyGone = "already-gone"
	// ActionWouldDestroy: dry run recorded it.
	ActionWouldDestroy = "would-destroy"
	// ActionWarned: the guard refused; a warning was recorded.
	ActionWarned = "warned"
	// ActionFailed: a provider call failed; retried after a back-off.
	ActionFailed = "failed"
	// ActionRateLimited: the token is rate-limited; the tick stopped.
	ActionRateLimited = "rate-limited"
	// ActionLost: another tick ended the deployment first; nothing
	// recorded.
	ActionLost = "lost-claim"
	// ActionNotDue: a heartbeat made it not due before anything was done.
	ActionNotDue = "not-due"
	// ActionSkipped: no credential for its organization.
	ActionSkipped = "skipped"
)

// ErrNotConfigured is returned by Tick when no write token is configured:
// the reaper does not run.
var ErrNotConfigured = errors.New("reaper: no platform write token is configured; the reaper does not run")

// Credentials gives the client a deployment is reaped with: the platform
// write token for platform-organization and managed deployments; a
// customer organization's deployments are never given to it: they are the
// customer sweep's (CustomerCredentials; docs/operations.md, "Customer
// organizations"). ok is false when there is none, and the deployment is
// skipped — never reaped with another organization's token.
type Credentials interface {
	DropletClient(c storage.ReaperCandidate) (client digitalocean.DropletAPI, ok bool)
}

// Platform is the platform organization's credentials: one client built on
// the platform write token, for platform-organization and managed
// deployments only.
type Platform struct {
	// Write is the client with the write token.
	Write digitalocean.DropletAPI
}

// DropletClient implements Credentials.
func (p Platform) DropletClient(c storage.ReaperCandidate) (digitalocean.DropletAPI, bool) {
	if p.Write == nil || (c.OrgID != storage.PlatformOrgID && !c.Managed) {
		return nil, false
	}
	return p.Write, true
}

// Config is a Reaper's dependencies.
type Config struct {
	// DB is the migrated database.
	DB *storage.DB
	// Clock schedules and stamps everything.
	Clock clockwork.Clock
	// Log receives one line per action and per failure.
	Log zerolog.Logger
	// Credentials is nil when the platform write token is not set.
	Credentials Credentials
	// Customers gives customer organizations' own clients; nil: no
	// customer sweep.
	Customers CustomerCredentials
	// DryRun records reaper-would-destroy events and destroys nothing.
	DryRun bool
	// CIFreshness is how long CI counts as live (DefaultCIFreshness when
	// zero).
	CIFreshness time.Duration
	// Wake is the heartbeats' deadline signal; nil wakes on timers only.
	Wake *wake.Threshold
	// Metrics records what the reaper does; nil records nothing.
	Metrics *Metrics
	// Guard is the clock guard, shared with ingest's skew-refusal hook
	// (the daemon wires both); nil makes one on Clock that sees only
	// steps of the wall clock.
	Guard *clockguard.Guard
	// Grace is how long idle destruction waits after the start and after
	// a clock step for deployments that have not heartbeated since:
	// DefaultGrace when zero, none when negative (tests of rules that are
	// not about it).
	Grace time.Duration
	// MaxDestroy is CHALUPA_REAPER_MAX_DESTROY: at most this many DELETEs
	// in any PaceWindow (DefaultMaxDestroy when zero). Dry run is not
	// paced.
	MaxDestroy int
	// StorageFault reports whether chalupa's commits are failing now, and
	// when the last one failed (zero: never). While they fail, and for
	// StorageGrace after, idle destruction is held: a deadline that could
	// not move is not evidence. nil: no storage signal.
	StorageFault func() (failing bool, lastFailure time.Time)
	// Alerts receives the reaper's conditions as they start and end
	// (alerts.go; docs/operations.md, "Alerts"); nil reports none.
	Alerts alerts.Setter
	// TokenVariable is the variable the platform write token was read
	// from, named (never the value) by the do-token-refused condition
	// when the token check (TokenCheck) finds DigitalOcean refusing it;
	// "" checks nothing. The wiring sets it: only the daemon's
	// configuration names that variable (docs/operations.md,
	// "Configuration").
	TokenVariable string
}

// Reaper is the reaper loop. Create it with New.
type Reaper struct {
	db         *storage.DB
	clock      clockwork.Clock
	log        zerolog.Logger
	creds      Credentials
	customers  CustomerCredentials
	dryRun     bool
	fresh      time.Duration
	wake       *wake.Threshold
	metrics    *Metrics
	clockGuard *clockguard.Guard
	grace      time.Duration
	// maxDestroy is the pace: DELETEs in any PaceWindow.
	maxDestroy   int
	storageFault func() (bool, time.Time)

	// tickMu serialises ticks of this reaper (the loop's and the admin
	// API's); ticks of two reapers are safe through the claim.
	tickMu sync.Mutex

	mu        sync.Mutex
	attempts  map[string]int // failed destroys in a row, per deployment
	notBefore time.Time      // the write token is rate-limited until then
	nextWake  time.Time
	lastTick  *TickResult
	// graceFrom is when the grace began: the start, or the last step;
	// stepSeen is the guard's LastStep at the last tick.
	graceFrom, stepSeen time.Time
	// destroys are the monotonic times of the DELETEs in the last
	// PaceWindow.
	destroys []time.Duration
	// raised is the last clock-suspect event id per scope ("fleet" or an
	// environment slug); massRaised the last reaper-mass-due id per
	// environment.
	raised     map[string]string
	massRaised map[string]string
	// troubled is the last trouble event id per kind (troubles.go).
	troubled map[string]string

	// alerts receives the conditions (nil: none); alerted is what was
	// last reported per kind (absent: nothing yet), under alertMu, held
	// across the report so two reports of one kind never cross.
	alerts  alerts.Setter
	alertMu sync.Mutex
	alerted map[string]bool
	// massAlerted is what was last reported of reaper-mass-due per
	// environment slug (absent: nothing, or its end), under alertMu.
	massAlerted map[string]bool
	// tokenCheck checks the write token with a read-only call through
	// the reaper's own client (nil without a write token or
	// Config.TokenVariable): the token stays with the code that holds it.
	tokenCheck *tokencheck.Checker

	// idleWaits counts waits without a timer (tests synchronise on it).
	idleWaits atomic.Int64
}

// New returns a Reaper.
func New(c Config) *Reaper {
	r := &Reaper{db: c.DB, clock: c.Clock, log: c.Log.With().Str("loop", "reaper").Logger(), creds: c.Credentials, customers: c.Customers,
		dryRun: c.DryRun, fresh: c.CIFreshness, wake: c.Wake, metrics: c.Metrics, attempts: map[string]int{},
		clockGuard: c.Guard, grace: c.Grace, maxDestroy: c.MaxDestroy, storageFault: c.StorageFault,
		raised: map[string]string{}, massRaised: map[string]string{}, troubled: map[string]string{},
		alerts: c.Alerts, alerted: map[string]bool{}, massAlerted: map[string]bool{}}
	for _, kind := range initialAlerts {
		r.alerted[kind] = false
	}
	if r.clock == nil {
		r.clock = clockwork.NewRealClock()
	}
	if r.clockGuard == nil {
		r.clockGuard = clockguard.New(r.clock)
	}
	switch {
	case r.grace == 0:
		r.grace = DefaultGrace
	case r.grace < 0:
		r.grace = 0
	}
	if r.maxDestroy <= 0 {
		r.maxDestroy = DefaultMaxDestroy
	}
	if p, ok := c.Credentials.(Platform); ok && c.TokenVariable != "" {
		if a, ok := p.Write.(interface {
			Account(ctx context.Context) (digitalocean.Account, error)
		}); ok {
			r.tokenCheck = tokencheck.New(c.TokenVariable, tokencheck.AccountProbe(a), c.Alerts, r.clock, r.log)
		}
	}
	r.graceFrom = r.clock.Now()
	// The guard's first look at the clocks is the start.
	r.clockGuard.Evaluate()
	if r.fresh <= 0 {
		r.fresh = DefaultCIFreshness
	}
	if r.wake == nil {
		r.wake = wake.New()
	}
	return r
}

// Name implements daemon.Loop.
func (r *Reaper) Name() string { return "reaper" }

// Configured reports whether a write token is configured.
func (r *Reaper) Configured() bool { return r.creds != nil }

// Run reaps until ctx ends, then returns nil. It sleeps until the earliest
// decision time among active deployments, never longer than MaxSleep while
// any is active, and with none active waits for a heartbeat without any
// timer. Without credentials it logs that once and waits for ctx.
func (r *Reaper) Run(ctx context.Context) error {
	if r.creds == nil {
		r.log.Warn().Msg("no platform write token is configured: the reaper does not run")
		<-ctx.Done()
		return nil
	}
	for {
		// Publish "signal everything" before reading: a deadline committed
		// after this read is then never missed.
		r.wake.SleepUntil(time.Time{})
		now := r.clock.Now()
		// The clock guard is looked at every wake-up (at most MaxSleep
		// apart while a deployment is active), so a hold is recorded and
		// shown even when nothing is due.
		r.openGate(ctx, now)
		sched, err := storage.ReaperNext(ctx, r.db.Read, now, r.fresh)
		if ctx.Err() != nil {
			return nil
		}
		var at time.Time
		switch {
		case err != nil:
			r.log.Error().Err(err).Msg("reading the reaper schedule failed")
			at = now.Add(stuckPause)
		case sched.Due > 0 && !now.Before(r.limitedUntil()):
			res, err := r.Tick(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				r.log.Error().Err(err).Msg("tick failed")
			}
			if res.progress() {
				continue
			}
			at = now.Add(stuckPause)
			if !res.PacedUntil.IsZero() {
				at = res.PacedUntil
			}
		default:
			at = r.wakeAt(now, sched)
		}
		r.setNextWake(at)
		r.wake.SleepUntil(at)
		if at.IsZero() {
			// No active deployment: no timer at all until a heartbeat.
			r.idleWaits.Add(1)
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake.C():
			}
			continue
		}
		t := r.clock.NewTimer(r.clock.Until(at))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.Chan():
		case <-r.wake.C():
			t.Stop()
		}
	}
}

// wakeAt is when the loop wakes on its own given sched at now: the next
// decision time, at most MaxSleep ahead while any deployment is active,
// the end of a rate limit while deployments are due; zero (no timer) when
// none is active.
func (r *Reaper) wakeAt(now time.Time, sched storage.ReaperSchedule) time.Time {
	if sched.Active == 0 {
		return time.Time{}
	}
	at := now.Add(MaxSleep)
	if !sched.Next.IsZero() && sched.Next.Before(at) {
		at = sched.Next
	}
	if until := r.limitedUntil(); sched.Due > 0 && until.Before(at) {
		at = until
	}
	return at
}

func (r *Reaper) limitedUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notBefore
}

func (r *Reaper) setNextWake(at time.Time) {
	r.mu.Lock()
	r.nextWake = at
	r.mu.Unlock()
	if r.metrics != nil {
		if at.IsZero() {
			r.metrics.NextWakeup.Set(0)
		} else {
			r.metrics.NextWakeup.Set(float64(at.UnixMilli()) / 1000)
		}
	}
}

// Outcome is what a tick did with one due deployment.
type Outcome struct {
	// Organization is the customer organization's slug ("" for the
	// platform token's deployments).
	Organization string
	// Environment and Deployment name it.
	Environment, Deployment string
	// DropletID is the droplet acted on (0 when none was found).
	DropletID int64
	// Action is one of the Action* constants.
	Action string
	// Reason is idle or session-expired.
	Reason string
	// Detail says why for warned, failed and rate-limited outcomes (a
	// digitalocean client error's text: never a token or URL).
	Detail string
}

// TickResult is what one tick did.
type TickResult struct {
	// At is when the tick started.
	At time.Time
	// DryRun is set when the tick ran in dry-run mode.
	DryRun bool
	// Outcomes lists every deployment handled, in order.
	Outcomes []Outcome
	// More is set when more deployments were due than MaxPerTick or the
	// TickBudget allowed.
	More bool
	// RateLimitedUntil is set when the write token is held back; the tick
	// stopped there.
	RateLimitedUntil time.Time
	// PacedUntil is set when the tick stopped at the destroy pace
	// (CHALUPA_REAPER_MAX_DESTROY per PaceWindow): the next DELETE may go
	// then.
	PacedUntil time.Time
	// CustomerOrgs lists the customer organizations swept, in sweep order
	// (at most MaxCustomerOrgsPerTick).
	CustomerOrgs []string
	// CustomerBudgetSpent is set when the customer sweep stopped at
	// CustomerBudget.
	CustomerBudgetSpent bool

	// unwritten counts held outcomes whose holds could not be stored: no
	// progress.
	unwritten int
}

// Count returns how many outcomes have action.
func (t TickResult) Count(action string) int {
	n := 0
	for _, o := range t.Outcomes {
		if o.Action == action {
			n++
		}
	}
	return n
}

// progress reports whether the tick changed anything that moves the
// schedule on (every action but skipped does: it ends the deployment,
// holds it, or blocks the token until a time).
func (t TickResult) progress() bool {
	return len(t.Outcomes) > t.Count(ActionSkipped)+t.unwritten || !t.RateLimitedUntil.IsZero()
}

// Tick handles the due deployments, at most MaxPerTick within TickBudget,
// oldest decision time first, and returns what it did. A due deployment
// the clock guard, the grace, a storage fault or a skew-refused contact
// holds is not destroyed (ActionHeld, held in the database until it may
// be judged again); at most MaxDestroy DELETEs go in any PaceWindow, the
// rest on later ticks (docs/operations.md, "Reaper"). Errors: ErrNotConfigured; a database fault
// reading the due list (faults while handling one deployment are logged
// and reported in its outcome).
func (r *Reaper) Tick(ctx context.Context) (TickResult, error) {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()
	var err error
	start := r.clock.Now()
	res := TickResult{At: start, DryRun: r.dryRun, Outcomes: []Outcome{}}
	if r.creds == nil {
		return res, ErrNotConfigured
	}
	var due []storage.ReaperCandidate
	if until := r.limitedUntil(); start.Before(until) {
		res.RateLimitedUntil = until
		if r.customers == nil {
			r.checkOverdue(ctx, start)
			r.finish(res, "rate-limited")
			return res, nil
		}
	} else if due, err = storage.ReaperDue(ctx, r.db.Read, start, r.fresh, MaxPerTick+1); err != nil {
		r.checkOverdue(ctx, start)
		r.finish(res, "error")
		return res, err
	}
	if len(due) > MaxPerTick {
		due, res.More = due[:MaxPerTick], true
	}
	g := r.openGate(ctx, start)
	// Whatever holds them, deployments an hour past their deadline are
	// the reaper's trouble, said as an event (troubles.go); after the
	// gate, so a step it detects already sets the event's time.
	r.checkOverdue(ctx, start)
	if len(due) > 0 || r.massAlerting() {
		// While reaper-mass-due holds somewhere, every look checks
		// whether it ended (alerts.go).
		r.massDue(ctx, start)
	}
	var holds []held
	for i, c := range due {
		if r.clock.Since(start) >= TickBudget {
			res.More = true
			break
		}
		proceed, stop := r.admit(g, c, &res, &holds)
		if stop {
			break
		}
		if !proceed {
			continue
		}
		o := r.handle(ctx, c)
		res.Outcomes = append(res.Outcomes, o)
		if o.Action == ActionRateLimited {
			res.RateLimitedUntil = r.limitedUntil()
			res.More = i < len(due)-1 || res.More
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	// The customer sweep has its own tokens and budget: the write token's
	// rate limit or budget does not hold it back.
	var sweepErr error
	if ctx.Err() == nil {
		sweepErr = r.sweepCustomers(ctx, g, &res, &holds)
	}
	if !r.writeHolds(ctx, holds) {
		res.unwritten = len(holds)
	}
	if sweepErr != nil {
		r.finish(res, "error")
		return res, sweepErr
	}
	r.finish(res, "ok")
	return res, nil
}

// finish records a tick as the last one, in the metrics and the log.
func (r *Reaper) finish(res TickResult, result string) {
	r.mu.Lock()
	r.lastTick = &res
	r.mu.Unlock()
	if r.metrics != nil {
		r.metrics.Ticks.WithLabelValues(result).Inc()
	}
}

// key identifies a deployment in the reaper's memory.
func key(c storage.ReaperCandidate) string {
	return strconv.FormatInt(c.EnvironmentID, 10) + "/" + c.DeploymentID
}

// reasonAt is why c is due at now: its session expiry passed, or else its
// idle deadline (without live CI).
func reasonAt(c storage.ReaperCandidate, now time.Time) string {
	if !c.SessionExpiresAt.IsZero() && !c.SessionExpiresAt.After(now) {
		return ReasonSessionExpired
	}
	return ReasonIdle
}

// deadlineOf is the deadline that reason refers to, for stable event ids
// (once per deployment per deadline) and messages.
func deadlineOf(c storage.ReaperCandidate, reason string) time.Time {
	if reason == ReasonSessionExpired {
		return c.SessionExpiresAt
	}
	return c.IdleDeadlineAt
}

// handle runs the per-deployment steps: guard, destroy, claim, event,
// sunk environment.
func (r *Reaper) handle(ctx context.Context, c storage.ReaperCandidate) Outcome {
	now := r.clock.Now()
	reason := reasonAt(c, now)
	o := Outcome{Environment: c.EnvironmentSlug, Deployment: c.DeploymentID, DropletID: c.DropletID, Reason: reason}
	client, ok := r.creds.DropletClient(c)
	if !ok {
		o.Action = ActionSkipped
		return o
	}
	return r.process(ctx, c, client, nil)
}

// process runs the per-deployment steps with client: the platform write
// token's (scope nil) or, in the customer sweep, the deployment's own
// organization's token (scope set).
func (r *Reaper) process(ctx context.Context, c storage.ReaperCandidate, client digitalocean.DropletAPI, scope *customerScope) Outcome {
	now := r.clock.Now()
	reason := reasonAt(c, now)
	o := Outcome{Environment: c.EnvironmentSlug, Deployment: c.DeploymentID, DropletID: c.DropletID, Reason: reason}
	if scope != nil {
		o.Organization = scope.org.Slug
	}
	// (1) The guard: the droplet must exist with both tags.
	id, gone, warning, err := r.guard(ctx, client, c)
	if err != nil {
		return r.failed(ctx, c, o, err, scope)
	}
	o.DropletID = id
	if warning != "" {
		return r.warn(ctx, c, o, warning)
	}
	if r.dryRun {
		if scope == nil {
			// Dry run makes no destroy call: the write token's
			// successful look is the end of its refusal (alerts.go).
			r.setAlert(ctx, alerts.KindReaperTokenRefused, false, "")
		}
		return r.wouldDestroy(ctx, c, o)
	}
	// (2) Destroy; 404 is success. The due list was read when the tick
	// began: re-read the deployment first, so a heartbeat (or a
	// skew-refused contact) that came while the tick worked through the
	// earlier ones saves its droplet.
	result := digitalocean.DeleteAlreadyGone
	if !gone {
		if action, err := r.recheck(ctx, c, now); err != nil {
			return r.dbFault(o, err)
		} else if action != "" {
			o.Action = action
			return o
		}
		r.notePace()
		if result, err = client.DeleteDroplet(ctx, int(id)); err != nil {
			return r.failed(ctx, c, o, err, scope)
		}
		if scope == nil {
			// The write token works again (alerts.go).
			r.setAlert(ctx, alerts.KindReaperTokenRefused, false, "")
		}
	}
	// (3)-(5) Claim, record, sink.
	return r.claim(ctx, c, o, result)
}

// recheck re-reads c just before its DELETE: ActionLost when it is no
// longer active, ActionNotDue when a heartbeat since the tick's read made
// it not due or its agent's skew-refused contact is fresh; "" to destroy.
// Errors: a database fault reading it.
func (r *Reaper) recheck(ctx context.Context, c storage.ReaperCandidate, now time.Time) (string, error) {
	cur, err := storage.ReaperCandidateByID(ctx, r.db.Read, c.EnvironmentID, c.DeploymentID, r.fresh)
	if err != nil {
		return "", err
	}
	switch {
	case cur.Status != storage.DeploymentActive:
		return ActionLost, nil
	case !cur.Due(now):
		return ActionNotDue, nil
	}
	if reasonAt(cur, now) == ReasonIdle {
		if _, ok := r.contact(cur, now); ok {
			return ActionNotDue, nil
		}
	}
	return "", nil
}

// guard finds and checks the droplet of c. It returns the droplet id, or
// gone when the provider says it no longer exists; a warning when the
// guard refuses; err for a provider fault.
func (r *Reaper) guard(ctx context.Context, client digitalocean.DropletAPI, c storage.ReaperCandidate) (id int64, gone bool, warning string, err error) {
	envTag := digitalocean.EnvTag(c.EnvironmentSlug)
	if c.DropletID > 0 {
		d, err := client.GetDroplet(ctx, int(c.DropletID))
		if errors.Is(err, digitalocean.ErrNotFound) {
			return c.DropletID, true, "", nil
		}
		if err != nil {
			return c.DropletID, false, "", err
		}
		var missing []string
		for _, t := range []string{digitalocean.TagChalupa, envTag} {
			if !d.HasTag(t) {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			return c.DropletID, false, fmt.Sprintf("droplet %d lacks the tag(s) %q: not destroyed (docs/operations.md, \"Reaper\")", c.DropletID, missing), nil
		}
		return c.DropletID, false, "", nil
	}
	// No droplet id reported: the droplet is found by its tags, and only
	// an unambiguous match is taken.
	ds, err := client.ListDropletsByTag(ctx, envTag)
	if err != nil {
		return 0, false, "", err
	}
	// Every droplet id a deployment reported, in any environment (this
	// deployment has none).
	known, err := storage.KnownDropletIDs(ctx, r.db.Read)
	if err != nil {
		return 0, false, "", err
	}
	var match []int64
	for _, d := range ds {
		// Both tags; not another deployment's droplet; created before this
		// deployment's first heartbeat (its agent ran on it), so a droplet
		// launched since for another deployment is never taken.
		if !d.HasTag(digitalocean.TagChalupa) || !d.HasTag(envTag) || known[int64(d.ID)] ||
			(!d.CreatedAt.IsZero() && d.CreatedAt.After(c.LaunchedAt)) {
			continue
		}
		match = append(match, int64(d.ID))
	}
	if len(match) != 1 {
		return 0, false, fmt.Sprintf("no droplet id reported, and %d droplets tagged %s and %s, unclaimed and created before the deployment, match: not destroyed", len(match), digitalocean.TagChalupa, envTag), nil
	}
	return match[0], false, "", nil
}

// failed handles a provider fault: a rate limit stops the tick until the
// retry time; anything else holds the deployment for a back-off. For a
// customer's token (scope set), 401/403 invalidates that token
// (customerRefused) and a rate limit holds that deployment only.
func (r *Reaper) failed(ctx context.Context, c storage.ReaperCandidate, o Outcome, err error, scope *customerScope) Outcome {
	if scope != nil {
		switch {
		case errors.Is(err, digitalocean.ErrUnauthorized) || errors.Is(err, digitalocean.ErrForbidden):
			return r.customerRefused(ctx, c, o, scope, err)
		case errors.Is(err, digitalocean.ErrRateLimited):
			return r.customerRateLimited(ctx, c, o, err)
		}
	}
	o.Detail = err.Error()
	now := r.clock.Now()
	if errors.Is(err, digitalocean.ErrRateLimited) {
		at, ok := digitalocean.RetryAt(err)
		if !ok || !at.After(now) {
			at = now.Add(digitalocean.MinBackoff)
		}
		r.mu.Lock()
		r.notBefore = at
		r.mu.Unlock()
		if r.metrics != nil {
			r.metrics.RateLimited.Inc()
		}
		r.log.Warn().Str("environment", c.EnvironmentSlug).Str("deployment", c.DeploymentID).Time("retry_at", at).Msg("write token rate-limited; the reaper waits")
		msg := fmt.Sprintf("DigitalOcean rate-limited the write token: the reaper destroys nothing before %s, the provider's retry time (docs/operations.md, \"Reaper\")",
			at.UTC().Format(time.RFC3339))
		r.trouble(ctx, KindRateLimited, msg, now)
		r.setAlert(ctx, alerts.KindReaperRateLimited, true, msg)
		o.Action = ActionRateLimited
		return o
	}
	if errors.Is(err, digitalocean.ErrUnauthorized) || errors.Is(err, digitalocean.ErrForbidden) {
		// Retried with the back-off below, but said as an event: no
		// retry fixes a revoked or under-scoped token (docs/operations.md,
		// "Reaper").
		msg := fmt.Sprintf("DigitalOcean refused the platform write token (%s) on a droplet call: nothing is destroyed until the token is replaced with a valid one holding the droplet scopes (docs/operations.md, \"Reaper\")",
			statusOf(err))
		r.trouble(ctx, KindTokenRefused, msg, now)
		r.setAlert(ctx, alerts.KindReaperTokenRefused, true, msg)
	}
	k := key(c)
	r.mu.Lock()
	r.attempts[k]++
	n := r.attempts[k]
	r.mu.Unlock()
	delay := Backoff(n)
	if r.metrics != nil {
		r.metrics.DestroyFailures.Inc()
	}
	r.log.Error().Str("environment", c.EnvironmentSlug).Str("deployment", c.DeploymentID).Int64("droplet", o.DropletID).
		Int("attempt", n).Dur("retry_in", delay).Str("error", o.Detail).Msg("destroy failed; retrying after a back-off")
	if herr := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.SetReaperHold(ctx, tx, c.EnvironmentID, c.DeploymentID, storage.ReaperHold{Until: now.Add(delay), Reason: HoldBackoff, Max: delay,
			Evidence: fmt.Sprintf("destroy attempt %d in a row failed: %s", n, o.Detail)})
	}); herr != nil {
		r.log.Error().Err(herr).Msg("recording the back-off failed")
	}
	o.Action = ActionFailed
	return o
}

// Backoff is the pause before attempt n+1 after n failed destroys in a
// row: BackoffMin doubling, at most BackoffMax.
func Backoff(n int) time.Duration {
	d := BackoffMin
	for i := 1; i < n && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// warn records a reaper-warning (reason provider) once per deployment per
// deadline and holds the deployment for GuardHold; it stays active.
func (r *Reaper) warn(ctx context.Context, c storage.ReaperCandidate, o Outcome, message string) Outcome {
	now := r.clock.Now()
	o.Action, o.Detail = ActionWarned, message
	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		cur, err := storage.ReaperCandidateByID(ctx, tx, c.EnvironmentID, c.DeploymentID, r.fresh)
		if err != nil {
			return err
		}
		if cur.Status != storage.DeploymentActive {
			o.Action = ActionLost
			return nil
		}
		inserted, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID:            eventID(KindWarning, c, deadlineOf(c, o.Reason)),
			EnvironmentID: c.EnvironmentID, DeploymentID: c.DeploymentID,
			Kind: KindWarning, Reason: ReasonProvider, Message: message, OccurredAt: now,
		})
		if err != nil {
			return err
		}
		if inserted && r.metrics != nil {
			r.metrics.Warnings.Inc()
		}
		return storage.SetReaperHold(ctx, tx, c.EnvironmentID, c.DeploymentID, storage.ReaperHold{Until: now.Add(GuardHold), Reason: HoldGuard,
			Max: GuardHold, Evidence: message})
	})
	if err != nil {
		return r.dbFault(o, err)
	}
	if o.Action == ActionWarned {
		r.log.Warn().Str("environment", c.EnvironmentSlug).Str("deployment", c.DeploymentID).Str("reason", o.Reason).Msg(message)
	}
	return o
}

// wouldDestroy is dry run's claim: it records reaper-would-destroy once per
// deployment per deadline, destroys nothing, ends nothing, and holds the
// deployment for GuardHold.
func (r *Reaper) wouldDestroy(ctx context.Context, c storage.ReaperCandidate, o Outcome) Outcome {
	now := r.clock.Now()
	o.Action = ActionWouldDestroy
	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		cur, err := storage.ReaperCandidateByID(ctx, tx, c.EnvironmentID, c.DeploymentID, r.fresh)
		if err != nil {
			return err
		}
		if !cur.Due(now) {
			o.Action = ActionNotDue
			if cur.Status != storage.DeploymentActive {
				o.Action = ActionLost
			}
			return nil
		}
		if _, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID:            eventID(KindWouldDestroy, c, deadlineOf(c, o.Reason)),
			EnvironmentID: c.EnvironmentID, DeploymentID: c.DeploymentID,
			Kind: KindWouldDestroy, Reason: o.Reason, OccurredAt: now,
			Message: fmt.Sprintf("dry run: would destroy droplet %d (%s)", o.DropletID, describe(c, o.Reason)),
		}); err != nil {
			return err
		}
		return storage.SetReaperHold(ctx, tx, c.EnvironmentID, c.DeploymentID, storage.ReaperHold{Until: now.Add(GuardHold), Reason: HoldDryRun,
			Max: GuardHold, Evidence: "dry run recorded reaper-would-destroy (" + describe(c, o.Reason) + ")"})
	})
	if err != nil {
		return r.dbFault(o, err)
	}
	if o.Action == ActionWouldDestroy {
		r.log.Info().Str("environment", c.EnvironmentSlug).Str("deployment", c.DeploymentID).Int64("droplet", o.DropletID).
			Str("reason", o.Reason).Msg("dry run: would destroy")
	}
	return o
}

// claim ends the deployment with one atomic active → ended transition,
// records reaper-destroyed under a stable id and sinks the environment
// when no active deployment is left, all in one writer unit. A tick that
// finds the deployment no longer active lost the claim and records
// nothing.
func (r *Reaper) claim(ctx context.Context, c storage.ReaperCandidate, o Outcome, result digitalocean.DeleteResult) Outcome {
	now := r.clock.Now()
	o.Action = ActionDestroyed
	if result == digitalocean.DeleteAlreadyGone {
		o.Action = ActionAlreadyGone
	}
	var sunk bool
	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		cur, err := storage.ReaperCandidateByID(ctx, tx, c.EnvironmentID, c.DeploymentID, r.fresh)
		if err != nil {
			return err
		}
		if cur.Status != storage.DeploymentActive {
			o.Action = ActionLost
			return nil
		}
		if c.DropletID == 0 {
			if err := storage.SetDropletIDIfUnknown(ctx, tx, c.EnvironmentID, c.DeploymentID, o.DropletID); err != nil {
				return err
			}
		}
		ended, err := storage.EndDeployment(ctx, tx, c.EnvironmentID, c.DeploymentID, now)
		if err != nil {
			return err
		}
		if !ended {
			o.Action = ActionLost
			return nil
		}
		msg := fmt.Sprintf("droplet %d destroyed (%s)", o.DropletID, describe(c, o.Reason))
		if result == digitalocean.DeleteAlreadyGone {
			msg = fmt.Sprintf("droplet %d was already gone (%s)", o.DropletID, describe(c, o.Reason))
		}
		if !cur.Due(now) {
			// The droplet is destroyed whatever came since: a heartbeat
			// that arrived during the destroy cannot bring it back.
			msg += "; a heartbeat arrived while it was being destroyed"
		}
		if _, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID:            "reaper:" + c.EnvironmentSlug + ":" + c.DeploymentID,
			EnvironmentID: c.EnvironmentID, DeploymentID: c.DeploymentID,
			Kind: KindDestroyed, Reason: o.Reason, Message: msg, OccurredAt: now,
		}); err != nil {
			return err
		}
		sunk, err = storage.SinkEnvironmentIfIdle(ctx, tx, c.EnvironmentID, now)
		return err
	})
	if err != nil {
		return r.dbFault(o, err)
	}
	r.mu.Lock()
	delete(r.attempts, key(c))
	r.mu.Unlock()
	if o.Action == ActionLost {
		return o
	}
	if r.metrics != nil {
		r.metrics.Destroyed.WithLabelValues(o.Reason).Inc()
	}
	r.log.Info().Str("environment", c.EnvironmentSlug).Str("deployment", c.DeploymentID).Int64("droplet", o.DropletID).
		Str("reason", o.Reason).Str("result", result.String()).Bool("environment_sunk", sunk).Msg("reaped")
	return o
}

// dbFault turns a failed writer unit into a failed outcome; the deployment
// is due again at the next tick.
func (r *Reaper) dbFault(o Outcome, err error) Outcome {
	r.log.Error().Err(err).Str("environment", o.Environment).Str("deployment", o.Deployment).Msg("reaper write failed")
	o.Action, o.Detail = ActionFailed, "database write failed"
	return o
}

// eventID is a stable id: once per kind, deployment and deadline.
func eventID(kind string, c storage.ReaperCandidate, deadline time.Time) string {
	return kind + ":" + c.EnvironmentSlug + ":" + c.DeploymentID + ":" + strconv.FormatInt(deadline.UnixMilli(), 10)
}

// describe is the event message's why: the reason and its deadline.
func describe(c storage.ReaperCandidate, reason string) string {
	if reason == ReasonSessionExpired {
		return "session expired at " + c.SessionExpiresAt.Format(time.RFC3339)
	}
	if c.IdleDeadlineAt.IsZero() {
		return "idle"
	}
	return "idle since the deadline " + c.IdleDeadlineAt.Format(time.RFC3339)
}

// Status is the reaper's state for `chalupa admin reaper status`.
type Status struct {
	// Configured is false when the platform write token is not set.
	Configured bool
	// DryRun is CHALUPA_REAPER_DRY_RUN.
	DryRun bool
	// CIFreshness is how long CI counts as live.
	CIFreshness time.Duration
	// NextWake is when the loop wakes on its own (zero: no timer).
	NextWake time.Time
	// RateLimitedUntil is set while the write token is held back.
	RateLimitedUntil time.Time
	// Active counts active deployments; Due lists up to 50 due ones.
	Active int
	Due    []storage.ReaperCandidate
	// LastTick is the last tick's result (nil before the first).
	LastTick *TickResult
	// Clock is the clock guard's judgement now: the fleet or single
	// environments held, and why.
	Clock clockguard.State
	// GraceUntil is when the start-up (or clock-step) grace ends for
	// deployments that have not heartbeated since it began (zero: over).
	GraceUntil time.Time
	// StorageHeldUntil is set while a storage fault holds idle
	// destruction.
	StorageHeldUntil time.Time
	// MaxDestroy is the destroy pace: DELETEs per PaceWindow.
	MaxDestroy int
	// Held lists the active deployments under a stored hold, the earliest
	// end first (at most 500); HeldTotal counts them all.
	Held      []storage.HeldDeployment
	HeldTotal int
}

// Status reads the reaper's state. Errors: database faults.
func (r *Reaper) Status(ctx context.Context) (Status, error) {
	now := r.clock.Now()
	r.mu.Lock()
	st := Status{Configured: r.creds != nil, DryRun: r.dryRun, CIFreshness: r.fresh, NextWake: r.nextWake, LastTick: r.lastTick,
		MaxDestroy: r.maxDestroy}
	if now.Before(r.notBefore) {
		st.RateLimitedUntil = r.notBefore
	}
	if until := r.graceFrom.Add(r.grace); now.Before(until) {
		st.GraceUntil = until
	}
	r.mu.Unlock()
	st.Clock = r.clockGuard.Evaluate()
	if r.storageFault != nil {
		if failing, last := r.storageFault(); failing {
			st.StorageHeldUntil = now.Add(holdRecheck)
		} else if !last.IsZero() && now.Before(last.Add(StorageGrace)) {
			st.StorageHeldUntil = last.Add(StorageGrace)
		}
	}
	sched, err := storage.ReaperNext(ctx, r.db.Read, now, r.fresh)
	if err != nil {
		return Status{}, err
	}
	st.Active = sched.Active
	if st.Due, err = storage.ReaperDue(ctx, r.db.Read, now, r.fresh, maxStatusDue); err != nil {
		return Status{}, err
	}
	if st.Held, st.HeldTotal, err = storage.ReaperHeld(ctx, r.db.Read, now, maxStatusHeld); err != nil {
		return Status{}, err
	}
	return st, nil
}
