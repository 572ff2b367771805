// Package clockguard tells the reaper when chalupa's own clock cannot be
// trusted to judge the fleet's deadlines, and keeps the fleet's contact that
// the clock made ingest refuse (docs/operations.md, "Reaper",
// the clock guard). It is the server's evidence only: a wall-clock step against the
// monotonic clock while running, and heartbeats refused for their
// timestamp alone (signature valid, quotas admitted, deployment active) in
// several environments all off by about the same amount. The reaper asks
// it before every tick and destroys nothing while it holds. A skew
// refusal in one environment holds nothing beyond its own deployment's
// contact (Contact; the reaper's contact hold).
//
// Every duration is measured on the monotonic clock, so a step of the wall
// clock cannot shorten or lengthen a hold.
package clockguard

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// The guard's rules and bounds (docs/operations.md, "Reaper", the clock guard).
const (
	// HeartbeatInterval is the agent's heartbeat cadence
	// (agent.HeartbeatInterval; a test keeps them equal): every
	// wait below is counted in it.
	HeartbeatInterval = 30 * time.Second
	// StepThreshold is the wall-clock step, against the monotonic clock
	// between two checks, that triggers the guard: NTP slews far less, and
	// a minute is two heartbeats of deadline error.
	StepThreshold = 60 * time.Second
	// slewPerMille is the drift between two checks that is never called a
	// step, per mille of the monotonic time between them: NTP slews at
	// most 0.5 ‰, so an idle reaper that checks once a day does not
	// mistake a day's slew for a step.
	slewPerMille = 1
	// SkewWindow is ingest's timestamp window (ingest.SkewWindow): a skew
	// refusal is always off by more than this.
	SkewWindow = 300 * time.Second
	// SkewRecent is how long a skew refusal counts toward the fleet rule:
	// four heartbeat intervals, so every live agent of an environment has
	// reported several times within it.
	SkewRecent = 4 * HeartbeatInterval
	// ClusterTolerance is how far from a common offset an environment's
	// skew may lie and still count toward the fleet rule: agents' own
	// clocks disagree by seconds, a server step moves them all alike.
	ClusterTolerance = 30 * time.Second
	// ClusterEnvironments is how many environments must be skew-refused,
	// each within ClusterTolerance of a common offset, for the guard to
	// hold the whole fleet: one environment key can mint any number of
	// deployment ids, but not other environments' signatures.
	ClusterEnvironments = 3
	// ContactFresh is how long a skew-refused heartbeat keeps its
	// deployment (and no other) from idle destruction: one heartbeat
	// interval, and one more for the next beat's way, so a steady 30 s
	// cadence never leaves a gap; a replay is no skew-refused heartbeat
	// and renews nothing.
	ContactFresh = 2 * HeartbeatInterval
	// SettleMax is how long after the fleet agrees again the guard waits
	// for deployments that send no fresh heartbeat: one idle interval, the
	// agent's default 30-minute limit (agent.DefaultLimitMinutes).
	SettleMax = 30 * time.Minute
	// SessionHoldMax caps the hold on session expiry: an expiry is the
	// operator's cost bound, so a clock fault may hold it for an hour at
	// most; idle destruction stays held as long as the guard does.
	SessionHoldMax = time.Hour
	// RaiseEvery is how often a lasting hold records clock-suspect again.
	RaiseEvery = time.Hour
	// MaxEnvironments bounds the environments whose skew and contacts are
	// kept; beyond it the one heard from least recently is forgotten.
	MaxEnvironments = 1024
	// MaxContactsPerEnvironment bounds one environment's contacts (2.5 ×
	// the default active-deployment quota of 100): a leaked key minting
	// deployment ids evicts only its own environment's oldest contact.
	// With MaxEnvironments the table holds at most 262,144 contacts,
	// about 40 MB.
	MaxContactsPerEnvironment = 256
)

// Reasons a Hold gives.
const (
	// ReasonStep: the wall clock stepped against the monotonic clock.
	ReasonStep = "clock-step"
	// ReasonFleetSkew: ClusterEnvironments environments were skew-refused
	// by about the same offset.
	ReasonFleetSkew = "fleet-skew"
)

// Monotonic is implemented by a clock that has its own monotonic time (a
// test's clock that steps its wall time apart from its timers); any other
// clock gets the process's monotonic clock.
type Monotonic interface {
	// Monotonic is the time elapsed on the clock's monotonic reading
	// since an arbitrary origin.
	Monotonic() time.Duration
}

// Hold is one hold of the guard.
type Hold struct {
	// Reason is one of the Reason* constants.
	Reason string
	// Since is when it began (wall clock at that moment); Held is how
	// long it has lasted (monotonic).
	Since time.Time
	Held  time.Duration
	// Offset is the server clock minus the fleet's (the step, or the
	// skew's common offset).
	Offset time.Duration
	// Agreed is set once the fleet agrees with the clock again: no
	// trigger since, and a heartbeat accepted after the last one.
	// AgreedAt is then the wall time of the agreement, SinceAgreed how
	// long ago it was (monotonic).
	Agreed      bool
	AgreedAt    time.Time
	SinceAgreed time.Duration
}

// HoldsSessions reports whether the hold still holds session expiry (for
// SessionHoldMax).
func (h Hold) HoldsSessions() bool { return h.Held < SessionHoldMax }

// Raise is the number of the hourly clock-suspect event the hold is due
// for: 0 at its start, 1 an hour later, …
func (h Hold) Raise() int64 { return int64(h.Held / RaiseEvery) }

// State is the guard's judgement at one moment.
type State struct {
	// Global holds the whole fleet (nil: the clock agrees with it).
	Global *Hold
	// Step is the wall-clock step this evaluation detected (0: none).
	Step time.Duration
	// LastStep is the wall time (after the step) when the last step was
	// detected, by this evaluation or an earlier one (zero: never).
	LastStep time.Time
}

type hold struct {
	reason      string
	sinceMono   time.Duration
	sinceWall   time.Time
	triggerMono time.Duration // the last moment the trigger was seen
	offset      time.Duration
	agreed      bool
	agreedMono  time.Duration
	agreedWall  time.Time
}

func (h *hold) public(mono time.Duration) Hold {
	out := Hold{Reason: h.reason, Since: h.sinceWall, Held: mono - h.sinceMono, Offset: h.offset, Agreed: h.agreed}
	if h.agreed {
		out.AgreedAt, out.SinceAgreed = h.agreedWall, mono-h.agreedMono
	}
	return out
}

type contact struct {
	signedAt     time.Time
	receivedMono time.Duration
	// offset is the server's wall clock at receipt minus signedAt.
	offset time.Duration
}

type envState struct {
	contacts map[string]contact
	skewed   bool
	skewMono time.Duration
	offset   time.Duration
	lastMono time.Duration // the last time anything was heard
}

// Guard is the clock guard. Create it with New; safe for concurrent use.
type Guard struct {
	clock clockwork.Clock
	mono  func() time.Duration
	// suspect is whether a global hold stands, as last decided under mu:
	// read without the lock on ingest's path (MarkAccepted, EventTime).
	suspect atomic.Bool
	// mark is the wall-clock high-water mark (mark.go).
	mark markState

	mu           sync.Mutex
	checked      bool
	lastWall     time.Time
	lastMono     time.Duration
	accepted     bool
	acceptedMono time.Duration
	lastStep     time.Time
	global       *hold
	envs         map[string]*envState
}

// New returns a guard on clock (nil: the real clock). Its monotonic time
// is the clock's own when it implements Monotonic, the process's when the
// clock's times carry a monotonic reading, and else the clock's own time
// (a plain fake clock, which then never steps).
func New(clock clockwork.Clock) *Guard {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	g := &Guard{clock: clock, envs: map[string]*envState{}}
	g.mark.floor.Store(noMark)
	start := clock.Now()
	switch m, ok := clock.(Monotonic); {
	case ok:
		g.mono = m.Monotonic
	case start != start.Round(0):
		// The clock's times carry the process's monotonic reading (the
		// real clock, or one shifted by a constant).
		g.mono = func() time.Duration { return time.Since(start) }
	default:
		// A fake clock without a monotonic reading: its own time is the
		// only time there is, and it never steps.
		g.mono = func() time.Duration { return clock.Since(start) }
	}
	return g
}

// Mono is the guard's monotonic time: pacing and holds are measured on it.
func (g *Guard) Mono() time.Duration { return g.mono() }

// SkewRefused records a heartbeat of deployment in environment env that
// was refused only for its signed timestamp signedAt (known usable key,
// valid signature, admitted by the rate quotas, naming a deployment that
// exists and is active in env: ingest checks): it is contact for that
// deployment alone, and it feeds the fleet rule, only when signedAt is
// later than the deployment's last one (a replay proves nothing new, so
// it neither renews a contact nor keeps a hold).
func (g *Guard) SkewRefused(env, deployment string, signedAt time.Time) {
	wall, mono := g.clock.Now(), g.mono()
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.env(env, mono)
	e.lastMono = mono
	c, ok := e.contacts[deployment]
	if ok && !signedAt.After(c.signedAt) {
		// A replay (or a reordered beat) is no new evidence: it renews
		// neither the contact nor the skew rules, so one captured
		// request replayed forever holds nothing.
		return
	}
	e.skewed, e.skewMono, e.offset = true, mono, wall.Round(0).Sub(signedAt)
	if !ok && len(e.contacts) >= MaxContactsPerEnvironment {
		oldest, first := "", true
		for id, c := range e.contacts {
			if first || c.receivedMono < e.contacts[oldest].receivedMono {
				oldest, first = id, false
			}
		}
		delete(e.contacts, oldest)
	}
	e.contacts[deployment] = contact{signedAt: signedAt, receivedMono: mono, offset: wall.Round(0).Sub(signedAt)}
}

// env returns env's state, making room for it (callers hold mu).
func (g *Guard) env(slug string, mono time.Duration) *envState {
	if e, ok := g.envs[slug]; ok {
		return e
	}
	if len(g.envs) >= MaxEnvironments {
		oldest, first := "", true
		for s, e := range g.envs {
			if first || e.lastMono < g.envs[oldest].lastMono {
				oldest, first = s, false
			}
		}
		delete(g.envs, oldest)
	}
	e := &envState{contacts: map[string]contact{}, lastMono: mono}
	g.envs[slug] = e
	return e
}

// HeartbeatAccepted records that a heartbeat of environment env was
// accepted: the fleet agrees with the clock (and env was heard from, for
// the table's eviction order).
func (g *Guard) HeartbeatAccepted(env string) {
	mono := g.mono()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.accepted, g.acceptedMono = true, mono
	if e, ok := g.envs[env]; ok {
		e.lastMono = mono
	}
}

// Contact returns the latest skew-refused contact of a deployment: its
// signed time and how long ago it arrived (monotonic); ok is false when
// there is none.
func (g *Guard) Contact(env, deployment string) (signedAt time.Time, age time.Duration, ok bool) {
	mono := g.mono()
	g.mu.Lock()
	defer g.mu.Unlock()
	e, found := g.envs[env]
	if !found {
		return time.Time{}, 0, false
	}
	c, found := e.contacts[deployment]
	if !found {
		return time.Time{}, 0, false
	}
	return c.signedAt, mono - c.receivedMono, true
}

// EnvironmentAhead is how far the server's clock runs ahead of environment
// env's agents, as their own signed times say: the median offset of the
// contacts (skew-refused heartbeats of active deployments, no replays)
// that arrived less than ContactFresh ago, when that median says the
// server is ahead and no heartbeat anywhere in the fleet was accepted in
// that time (one accepted heartbeat means the server's clock agrees with
// an agent's, and the refused agents' clocks are the ones off). ok is
// false otherwise. The reaper judges that environment's idle deadlines on the server's
// clock less this offset (docs/operations.md, "Reaper", the clock guard):
// a server clock that stepped ahead cannot shorten the idle limit of a
// silent droplet beside live ones, and a bad agent clock or a leaked key
// delays its own environment's reaping by its own offset at most.
func (g *Guard) EnvironmentAhead(env string) (offset time.Duration, ok bool) {
	mono := g.mono()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.accepted && mono-g.acceptedMono < ContactFresh {
		// Someone's heartbeat agrees with the server clock: the refused
		// agents' clocks are off, not the server's.
		return 0, false
	}
	e, found := g.envs[env]
	if !found {
		return 0, false
	}
	var offsets []time.Duration
	for _, c := range e.contacts {
		if mono-c.receivedMono < ContactFresh {
			offsets = append(offsets, c.offset)
		}
	}
	if len(offsets) == 0 {
		return 0, false
	}
	slices.Sort(offsets)
	if m := offsets[len(offsets)/2]; m > 0 {
		return m, true
	}
	return 0, false
}

// Lift ends the fleet's hold once the reaper saw every active deployment
// heartbeat since the agreement (Hold.AgreedAt). A hold not yet agreed is
// kept.
func (g *Guard) Lift() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.global != nil && g.global.agreed {
		g.global = nil
		g.suspect.Store(false)
	}
}

// Evaluate checks the wall clock against the monotonic clock since the
// last evaluation, applies the fleet's skew rule, notes agreement, lifts holds
// whose SettleMax passed since the agreement, and returns the state.
func (g *Guard) Evaluate() State {
	wall, mono := g.clock.Now().Round(0), g.mono()
	g.mu.Lock()
	defer g.mu.Unlock()
	var st State
	if g.checked {
		dm := mono - g.lastMono
		diff := wall.Sub(g.lastWall) - dm
		if abs(diff) > StepThreshold+dm*slewPerMille/1000 {
			st.Step, g.lastStep = diff, wall
			g.trigger(&g.global, ReasonStep, diff, wall, mono)
		}
	}
	g.checked, g.lastWall, g.lastMono = true, wall, mono
	st.LastStep = g.lastStep

	// The fleet rule: the largest group of recently skew-refused
	// environments whose offsets lie within ±ClusterTolerance of a common
	// offset (a window 2 × ClusterTolerance wide).
	type off struct {
		slug   string
		offset time.Duration
	}
	var recent []off
	for slug, e := range g.envs {
		if e.skewed && mono-e.skewMono < SkewRecent {
			recent = append(recent, off{slug, e.offset})
		}
	}
	slices.SortFunc(recent, func(a, b off) int { return int((a.offset - b.offset) / time.Millisecond) })
	best, bestAt := 0, 0
	for i, j := 0, 0; i < len(recent); i++ {
		for recent[i].offset-recent[j].offset > 2*ClusterTolerance {
			j++
		}
		if n := i - j + 1; n > best {
			best, bestAt = n, j
		}
	}
	if best >= ClusterEnvironments {
		g.trigger(&g.global, ReasonFleetSkew, recent[bestAt+best/2].offset, wall, mono)
	}
	if h := g.global; h != nil {
		if !h.agreed && g.accepted && g.acceptedMono > h.triggerMono {
			h.agreed, h.agreedMono, h.agreedWall = true, g.acceptedMono, wall.Add(g.acceptedMono-mono)
		}
		if h.agreed && mono-h.agreedMono >= SettleMax {
			g.global = nil
		}
	}
	g.suspect.Store(g.global != nil)
	if g.global != nil {
		p := g.global.public(mono)
		st.Global = &p
	}
	return st
}

// trigger starts *h, or renews it: the trigger is seen again, so any
// agreement is void (callers hold mu).
func (g *Guard) trigger(h **hold, reason string, offset time.Duration, wall time.Time, mono time.Duration) {
	if *h == nil {
		*h = &hold{reason: reason, sinceMono: mono, sinceWall: wall}
	}
	(*h).triggerMono, (*h).offset, (*h).agreed = mono, offset, false
	if reason == ReasonStep || (*h).reason != ReasonStep {
		(*h).reason = reason
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
