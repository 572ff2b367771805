package clockguard

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The wall-clock high-water mark's rules (docs/operations.md, "Signed
// ingest", the high-water mark).
const (
	// ReasonBehindMark: the process started with its wall clock more than
	// MarkTolerance behind the persisted mark, a step back across a
	// restart that the monotonic comparison cannot see.
	ReasonBehindMark = "clock-behind-mark"
	// MarkTolerance is how far behind the mark a start's wall clock may be
	// and not be called a step back: the step threshold, so a slewing
	// clock and a quick restart are not faults.
	MarkTolerance = StepThreshold
	// MarkPersistEvery is how often at most an advancing mark is written:
	// a few seconds, so the write rides along with requests the writer
	// commits anyway and costs the hot path one UPDATE per interval.
	MarkPersistEvery = 5 * time.Second
	// AgreeEnvironments is how many environments' signed times must agree
	// with the current clock, while refused for being older than the mark
	// allows, for that agreement to override the mark: as for the fleet
	// skew rule, one environment key can mint any number of deployment
	// ids but not other environments' signatures.
	AgreeEnvironments = ClusterEnvironments
	// AgreeRecent is how long such an agreement counts: four heartbeat
	// intervals, as for skew refusals.
	AgreeRecent = SkewRecent
	// AgreeJitter is how far an environment's signed times may drift from
	// the monotonic time between their arrivals and still agree: signed
	// times are whole seconds and requests wait in queues and retries for
	// a few more.
	AgreeJitter = 10 * time.Second
)

// agreement is one environment's evidence for MarkAgreed: the first signed
// time of its current run of refusals and the monotonic time it arrived.
type agreement struct {
	firstSigned time.Time
	firstMono   time.Duration
	lastMono    time.Duration
	agreed      bool
}

// noMark is the floor while there is no mark: every signed time is above it.
const noMark = math.MinInt64

// markState is the guard's wall-clock high-water mark.
type markState struct {
	// floor is (mark − SkewWindow) in unix milliseconds, noMark without
	// a mark: read on every signed request without the lock.
	floor atomic.Int64

	mu   sync.Mutex
	at   time.Time     // the mark; zero: none
	mono time.Duration // the guard's monotonic time when at was set or restored
	// dirty: at differs from what the database holds; lastWrite is the
	// monotonic time of the last write handed out (MarkDue).
	dirty     bool
	wrote     bool
	lastWrite time.Duration
	// agree is, per environment, its requests refused by the mark while
	// their signed times agreed with the clock (MarkAgreed).
	agree map[string]*agreement
	// overridden is the mark an override replaced, until the override's
	// write commits (zero: none pending).
	overridden time.Time
}

// RestoreMark gives the guard the mark the database holds (zero: none) at
// the start of the process, before any request. A wall clock more than
// MarkTolerance behind it is a step back: the guard holds the fleet
// (ReasonBehindMark) until the fleet agrees again or AgreeEnvironments
// environments override the mark. It returns how far the clock is behind
// the mark (0: not a step back).
func (g *Guard) RestoreMark(mark time.Time) time.Duration {
	wall, mono := g.clock.Now().Round(0), g.mono()
	m := &g.mark
	m.mu.Lock()
	m.at, m.mono, m.dirty = mark, mono, false
	m.setFloorLocked()
	m.mu.Unlock()
	behind := mark.Sub(wall)
	if mark.IsZero() || behind <= MarkTolerance {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trigger(&g.global, ReasonBehindMark, -behind, wall, mono)
	g.suspect.Store(true)
	return behind
}

func (m *markState) setFloorLocked() {
	if m.at.IsZero() {
		m.floor.Store(noMark)
		return
	}
	m.floor.Store(m.at.Add(-SkewWindow).UnixMilli())
}

// Mark returns the mark (zero: none).
func (g *Guard) Mark() time.Time {
	g.mark.mu.Lock()
	defer g.mark.mu.Unlock()
	return g.mark.at
}

// MarkFloor reports whether a request signed at signedAt is older than
// the mark allows (signed before the mark minus SkewWindow): ingest
// refuses it timestamp_skew, so a nonce pruned below the mark can never
// be replayed, whatever the wall clock says. Lock-free.
func (g *Guard) MarkFloor(signedAt time.Time) (below bool) {
	f := g.mark.floor.Load()
	return f != noMark && signedAt.UnixMilli() < f
}

// MarkAccepted advances the mark to signedAt, the signed time of a request
// ingest accepted, capped at the server's own clock; it does nothing while
// the guard is suspect (a global hold), so a fleet that agrees with a
// wrong clock cannot carry the mark with it.
func (g *Guard) MarkAccepted(signedAt time.Time) {
	if g.suspect.Load() {
		return
	}
	at := signedAt
	if now := g.clock.Now().Round(0); now.Before(at) {
		at = now
	}
	m := &g.mark
	if f := m.floor.Load(); f != noMark && at.UnixMilli() <= f+SkewWindow.Milliseconds() {
		return // the fast path: not newer than the mark
	}
	mono := g.mono()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !at.After(m.at) {
		return
	}
	m.at, m.mono, m.dirty = at, mono, true
	m.setFloorLocked()
}

// MarkAgreed records that environment's request, validly signed at
// signedAt within SkewWindow of the server clock, was refused only because
// the mark is ahead of it. An environment agrees with the clock once its
// signed times have advanced with the monotonic clock over at least a
// heartbeat interval (within AgreeJitter): a replayed capture, whose
// signed time stands still, never agrees. When AgreeEnvironments
// environments agree within AgreeRecent, their agreement overrides the
// mark: it is set back to the server clock (written with a
// clock-mark-override event, MarkDue) and ingest accepts them again. It
// reports whether this call overrode.
func (g *Guard) MarkAgreed(environment string, signedAt time.Time) bool {
	wall, mono := g.clock.Now().Round(0), g.mono()
	if d := wall.Sub(signedAt); d > SkewWindow || d < -SkewWindow {
		return false
	}
	m := &g.mark
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.agree == nil {
		m.agree = map[string]*agreement{}
	}
	a, ok := m.agree[environment]
	if !ok && len(m.agree) >= MaxEnvironments {
		return false
	}
	if !ok || mono-a.lastMono >= AgreeRecent {
		a = &agreement{firstSigned: signedAt, firstMono: mono}
		m.agree[environment] = a
	}
	a.lastMono = mono
	progress, elapsed := signedAt.Sub(a.firstSigned), mono-a.firstMono
	if progress >= HeartbeatInterval && abs(progress-elapsed) <= AgreeJitter {
		a.agreed = true
	}
	n := 0
	for env, e := range m.agree {
		switch {
		case mono-e.lastMono >= AgreeRecent:
			delete(m.agree, env)
		case e.agreed:
			n++
		}
	}
	if n < AgreeEnvironments || !m.at.After(wall) {
		return false
	}
	if m.overridden.IsZero() {
		m.overridden = m.at
	}
	m.at, m.mono, m.dirty = wall, mono, true
	m.agree = nil
	m.setFloorLocked()
	return true
}

// MarkDue returns the mark to write when it changed since the last write
// and MarkPersistEvery passed since then (force: at once; at shutdown and
// before the nonce pruner reads it); ok is false when nothing is due.
// overridden is the mark an override replaced (zero: none), whose write
// records a clock-mark-override event in the same unit. The caller writes
// both in one writer unit and calls MarkPersisted after its commit.
func (g *Guard) MarkDue(force bool) (mark, overridden time.Time, ok bool) {
	mono := g.mono()
	m := &g.mark
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirty || (!force && m.wrote && mono-m.lastWrite < MarkPersistEvery) {
		return time.Time{}, time.Time{}, false
	}
	m.wrote, m.lastWrite = true, mono
	return m.at, m.overridden, true
}

// MarkPersisted records that the write of mark (from MarkDue) committed.
func (g *Guard) MarkPersisted(mark time.Time) {
	m := &g.mark
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at.Equal(mark) {
		m.dirty, m.overridden = false, time.Time{}
	}
}

// Trusted is the time the guard trusts: while it is suspect (a global
// hold), the mark plus the monotonic time elapsed since it was set or
// restored, and suspect true; otherwise the wall clock.
func (g *Guard) Trusted() (now time.Time, suspect bool) {
	wall := g.clock.Now()
	if !g.suspect.Load() {
		return wall, false
	}
	m := &g.mark
	m.mu.Lock()
	at, since := m.at, m.mono
	m.mu.Unlock()
	if at.IsZero() {
		return wall, true
	}
	return at.Add(g.mono() - since), true
}

// EventTime maps at, an event's time on the wall clock, to the time it is
// stored with (storage.Writer.SetEventTime): unchanged while the guard is
// not suspect; while it is, moved by the trusted clock's difference from
// the wall clock, so an event stamped now carries the trusted now
// (docs/operations.md, "Reaper", event times).
func (g *Guard) EventTime(at time.Time) time.Time {
	if !g.suspect.Load() {
		return at
	}
	trusted, _ := g.Trusted()
	return at.Add(trusted.Sub(g.clock.Now())).Round(0)
}
