package ingest

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage"
)

// The fleet's clock offset (docs/operations.md, "Heartbeats and
// deadlines", the offset): the median of receivedAt − sentAt over the
// latest accepted heartbeat of each deployment heard in the last
// OffsetWindow, for the fleet and for each environment. It is shown and
// recorded; it holds nothing (deadlines come from elapsed time, so a
// steady offset misjudges no deadline).
const (
	// OffsetWindow is how recent a deployment's heartbeat must be to count
	// (10 min, on the process's monotonic clock): twenty heartbeats at the
	// agent's 30 s cadence, long enough that a small fleet keeps its
	// estimate, short enough that a corrected clock shows within minutes.
	OffsetWindow = 10 * time.Minute
	// OffsetMinDeployments is how many distinct deployments a scope needs
	// in the window for an estimate (5): one droplet's broken clock, or
	// two, never moves the median of five.
	OffsetMinDeployments = 5
	// OffsetAlarm is how far the fleet's offset may be from zero before a
	// clock-offset event is recorded (30 s); the second one says it is
	// back once it is within OffsetAlarm − OffsetHysteresis.
	OffsetAlarm = 30 * time.Second
	// OffsetHysteresis is how far inside OffsetAlarm the fleet's offset
	// must come back before the second clock-offset event says it is
	// back (5 s, so within 25 s): a clock drifting past the alarm keeps
	// its median within a transit's jitter of 30 s for hours, and without
	// the margin each minute's check would flip and record another event.
	OffsetHysteresis = 5 * time.Second
	// MaxOffsetEnvironments bounds the environments given a scope of their
	// own (16, those with the most deployments in the window, then by
	// slug), so chalupa_clock_offset_seconds has at most 17 series
	// whatever keys send.
	MaxOffsetEnvironments = 16
	// maxOffsetDeployments bounds the deployments kept (16,384, least
	// recently heard evicted; 6.8 MB measured with 128-character ids, an
	// estimate's sort under 1 ms): the median of that many is as good as
	// of more.
	maxOffsetDeployments = 1 << 14
	// offsetCheckEvery is the clock-offset loop's cadence while
	// heartbeats arrive (1 min); with none it waits without a timer.
	offsetCheckEvery = time.Minute
)

// KindClockOffset is the platform event recorded when the fleet's offset
// passes OffsetAlarm, and again when it is back within OffsetAlarm −
// OffsetHysteresis.
const KindClockOffset = "clock-offset"

// offsetKey names one deployment.
type offsetKey struct {
	environment, deployment string
}

// offsetEntry is a deployment's latest offset (milliseconds) and when it
// was heard, on the steady clock.
type offsetEntry struct {
	key    offsetKey
	offset int64
	at     time.Time
	elem   *list.Element
}

// Offsets is the in-memory estimator of the clock offset, fed by each
// accepted heartbeat (one map update, O(1)) and read by /metrics, admin
// status, the console and the clock-offset loop. Safe for concurrent use.
type Offsets struct {
	mu      sync.Mutex
	entries map[offsetKey]*offsetEntry
	order   *list.List // most recently heard at the front
	max     int
	// heard holds a signal after a heartbeat was observed (coalesced).
	heard chan struct{}
}

func newOffsets(max int) *Offsets {
	return &Offsets{entries: map[offsetKey]*offsetEntry{}, order: list.New(), max: max, heard: make(chan struct{}, 1)}
}

// observe records the offset of deployment's accepted heartbeat, heard at
// steady time at, and forgets deployments last heard more than
// OffsetWindow before it.
func (o *Offsets) observe(environment, deployment string, offset time.Duration, at time.Time) {
	k := offsetKey{environment: environment, deployment: deployment}
	o.mu.Lock()
	e, ok := o.entries[k]
	if !ok {
		if len(o.entries) >= o.max {
			o.drop(o.order.Back())
		}
		e = &offsetEntry{key: k}
		e.elem = o.order.PushFront(e)
		o.entries[k] = e
	} else {
		o.order.MoveToFront(e.elem)
	}
	e.offset, e.at = offset.Milliseconds(), at
	for b := o.order.Back(); b != nil && at.Sub(b.Value.(*offsetEntry).at) > OffsetWindow; b = o.order.Back() {
		o.drop(b)
	}
	o.mu.Unlock()
	select {
	case o.heard <- struct{}{}:
	default:
	}
}

func (o *Offsets) drop(el *list.Element) {
	delete(o.entries, el.Value.(*offsetEntry).key)
	o.order.Remove(el)
}

// OffsetScope is one scope's estimate.
type OffsetScope struct {
	// Environment is the environment's slug, "" for the fleet.
	Environment string
	// Offset is the median of receivedAt − sentAt: positive when the
	// server's clock is ahead of the agents'.
	Offset time.Duration
	// Deployments is how many distinct deployments it is the median of.
	Deployments int
}

// OffsetEstimate is the fleet's estimate (Measured false below
// OffsetMinDeployments) and the environments' with enough deployments
// (at most MaxOffsetEnvironments, the most deployments first, then by
// slug).
type OffsetEstimate struct {
	Measured     bool
	Fleet        OffsetScope
	Environments []OffsetScope
}

// Off reports whether the fleet's offset is measured and beyond
// OffsetAlarm.
func (e OffsetEstimate) Off() bool {
	return e.Measured && (e.Fleet.Offset > OffsetAlarm || e.Fleet.Offset < -OffsetAlarm)
}

// back reports whether the fleet's offset is measured and within OffsetAlarm
// − OffsetHysteresis: an offset that was Off is back.
func (e OffsetEstimate) back() bool {
	within := OffsetAlarm - OffsetHysteresis
	return e.Measured && e.Fleet.Offset <= within && e.Fleet.Offset >= -within
}

// estimate is the estimate at steady time now, over deployments heard in
// the OffsetWindow before it.
func (o *Offsets) estimate(now time.Time) OffsetEstimate {
	var fleet []int64
	byEnv := map[string][]int64{}
	o.mu.Lock()
	for el := o.order.Front(); el != nil; el = el.Next() {
		e := el.Value.(*offsetEntry)
		if now.Sub(e.at) > OffsetWindow {
			break
		}
		fleet = append(fleet, e.offset)
		byEnv[e.key.environment] = append(byEnv[e.key.environment], e.offset)
	}
	o.mu.Unlock()
	var out OffsetEstimate
	if len(fleet) < OffsetMinDeployments {
		return out
	}
	out.Measured, out.Fleet = true, OffsetScope{Offset: median(fleet), Deployments: len(fleet)}
	for env, offs := range byEnv {
		if len(offs) >= OffsetMinDeployments {
			out.Environments = append(out.Environments, OffsetScope{Environment: env, Offset: median(offs), Deployments: len(offs)})
		}
	}
	slices.SortFunc(out.Environments, func(a, b OffsetScope) int {
		return cmp.Or(cmp.Compare(b.Deployments, a.Deployments), cmp.Compare(a.Environment, b.Environment))
	})
	if len(out.Environments) > MaxOffsetEnvironments {
		out.Environments = out.Environments[:MaxOffsetEnvironments]
	}
	return out
}

// median is the median of ms (milliseconds; the mean of the middle two
// for an even count); it sorts ms.
func median(ms []int64) time.Duration {
	slices.Sort(ms)
	n := len(ms)
	m := ms[n/2]
	if n%2 == 0 {
		m = (ms[n/2-1] + ms[n/2]) / 2
	}
	return time.Duration(m) * time.Millisecond
}

// ClockOffset is the clock offset's estimate now (docs/operations.md,
// "Heartbeats and deadlines").
func (s *Service) ClockOffset() OffsetEstimate { return s.offsets.estimate(s.steadyNow()) }

// observeOffset feeds the estimator with an accepted heartbeat's offset,
// receivedAt − sentAt from sentAt's milliseconds, when its sentAt is the
// time its age was measured to (within SentAtTolerance of the signed
// timestamp: a retried or spooled body's sentAt is not when it was sent)
// and its transit was not late.
func (s *Service) observeOffset(v Verified, env, deployment string, sentAt time.Time, late bool) {
	if late || !heartbeatReference(sentAt, v.signedAt).Equal(sentAt) {
		return
	}
	s.offsets.observe(env, deployment, v.receivedAt.Sub(sentAt.Truncate(time.Millisecond)), v.steadyAt)
}

// OffsetWatch is the clock-offset loop: while heartbeats arrive it checks
// the fleet's offset once a minute and records a clock-offset platform
// event when it passes OffsetAlarm and again when it is back within
// OffsetAlarm − OffsetHysteresis
// (docs/operations.md, "Background loops"); with none it waits without a
// timer. It holds nothing.
type OffsetWatch struct {
	Service *Service
	DB      *storage.DB
	Clock   clockwork.Clock
	Log     zerolog.Logger
	// off is whether the last event said the fleet is off.
	off bool
}

// Name is "clock-offset".
func (w *OffsetWatch) Name() string { return "clock-offset" }

// Run waits for a heartbeat, then a minute, then checks; until ctx ends.
func (w *OffsetWatch) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Service.offsets.heard:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.Clock.After(offsetCheckEvery):
		}
		if _, err := w.Check(ctx); err != nil {
			w.Log.Error().Err(err).Msg("clock-offset: recording the event failed")
		}
	}
}

// Check reads the estimate and records the event its change calls for,
// returning the event's kind ("" when none). Errors: the write's (the
// event is tried again at the next check).
func (w *OffsetWatch) Check(ctx context.Context) (string, error) {
	est := w.Service.ClockOffset()
	if off := w.off; !est.Measured || (!off && !est.Off()) || (off && !est.back()) {
		return "", nil
	}
	now := w.Clock.Now().UTC()
	msg := fmt.Sprintf("the server clock is %s off the fleet's (median of %d deployments' receivedAt − sentAt; positive: the server is ahead), more than %s: deadlines come from elapsed time and nothing is held, but fix the clock (docs/operations.md, \"Heartbeats and deadlines\")",
		est.Fleet.Offset.Round(time.Millisecond), est.Fleet.Deployments, OffsetAlarm)
	if !est.Off() {
		msg = fmt.Sprintf("the server clock is back within %s of the fleet's: %s off (median of %d deployments)", OffsetAlarm-OffsetHysteresis,
			est.Fleet.Offset.Round(time.Millisecond), est.Fleet.Deployments)
	}
	err := w.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{
			ID: fmt.Sprintf("%s:%t:%d", KindClockOffset, est.Off(), now.UnixMilli()), Kind: KindClockOffset, Message: msg, OccurredAt: now})
		return err
	})
	if err != nil {
		return "", err
	}
	w.off = est.Off()
	return KindClockOffset, nil
}
