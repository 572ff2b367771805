package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// Switchable loops (docs/operations.md, "Loop switches"): the loops that
// write on their own schedule and can therefore write bad data after a bad
// release. Ingest and the loops that serve it (nonce-prune, quota-events)
// are never paused, nor is the offline watch, which only reports.
const (
	LoopReaper    = "reaper"
	LoopRetention = "retention"
	LoopCosts     = "costs"
	LoopJobs      = "jobs"
)

// SwitchableLoops lists the switch names in the order status shows them.
var SwitchableLoops = []string{LoopReaper, LoopRetention, LoopCosts, LoopJobs}

// ErrUnknownLoop is returned for a switch name not in SwitchableLoops.
var ErrUnknownLoop = errors.New("loop must be one of reaper, retention, costs, jobs (ingest and its loops are never paused)")

// Lifecycle events of a loop switch (platform organization, no
// environment): kind, reason and the stable id prefix (prefix + name + ":"
// + unix milliseconds).
const (
	LoopPausedKind    = "loop-paused"
	LoopResumedKind   = "loop-resumed"
	loopSwitchReason  = "manual"
	loopSwitchIDStart = "loop-switch:"
)

// ParseLoopNames splits a comma-separated list of switch names (the value
// of serve --pause-loops), dropping blanks and repeats. Errors:
// ErrUnknownLoop, naming the first unknown entry.
func ParseLoopNames(list string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" || slices.Contains(out, n) {
			continue
		}
		if !slices.Contains(SwitchableLoops, n) {
			return nil, fmt.Errorf("%w: %q", ErrUnknownLoop, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// loopSwitches holds the paused state of the switchable loops: loaded from
// loop_switches at start, changed only through set (database first, then
// memory), and watched by each switched loop's pausable wrapper.
type loopSwitches struct {
	db    *storage.DB
	clock clockwork.Clock
	log   zerolog.Logger
	gauge *prometheus.GaugeVec

	mu      sync.Mutex
	state   map[string]storage.LoopSwitch
	changed chan struct{} // closed and replaced on every change
}

// newLoopSwitches loads the persisted switches and registers
// chalupa_loop_paused{loop} on reg. Errors: the read, or a registration.
func newLoopSwitches(ctx context.Context, db *storage.DB, clock clockwork.Clock, log zerolog.Logger, reg prometheus.Registerer) (*loopSwitches, error) {
	rows, err := storage.ListLoopSwitches(ctx, db.Read)
	if err != nil {
		return nil, err
	}
	s := &loopSwitches{db: db, clock: clock, log: log, state: map[string]storage.LoopSwitch{}, changed: make(chan struct{})}
	for _, r := range rows {
		s.state[r.Name] = r
	}
	s.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chalupa_loop_paused",
		Help: "1 while the operator has the background loop paused (docs/operations.md, \"Loop switches\"), else 0.",
	}, []string{"loop"})
	if err := reg.Register(s.gauge); err != nil {
		return nil, err
	}
	for _, n := range SwitchableLoops {
		s.gauge.WithLabelValues(n).Set(b2f(s.state[n].Paused))
	}
	return s, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// paused reports whether name is paused, and a channel closed at the next
// change of any switch.
func (s *loopSwitches) paused(name string) (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state[name].Paused, s.changed
}

// get returns name's switch (zero ChangedAt when never switched).
func (s *loopSwitches) get(name string) storage.LoopSwitch {
	s.mu.Lock()
	defer s.mu.Unlock()
	sw := s.state[name]
	sw.Name = name
	return sw
}

// set pauses or resumes name, by whom ("admin", "serve --pause-loops"): in
// one writer unit the switch row and, when the state changes, a
// loop-paused or loop-resumed lifecycle event. It reports whether anything
// changed. Errors: ErrUnknownLoop (nothing written), the write's.
func (s *loopSwitches) set(ctx context.Context, name string, pause bool, by string) (storage.LoopSwitch, bool, error) {
	if !slices.Contains(SwitchableLoops, name) {
		return storage.LoopSwitch{}, false, ErrUnknownLoop
	}
	now := s.clock.Now()
	var changed bool
	err := s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		if changed, err = storage.SetLoopPaused(ctx, tx, name, pause, now); err != nil || !changed {
			return err
		}
		kind, verb := LoopResumedKind, "resumed"
		if pause {
			kind, verb = LoopPausedKind, "paused"
		}
		_, err = storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{
			ID:   fmt.Sprintf("%s%s:%d", loopSwitchIDStart, name, now.UnixMilli()),
			Kind: kind, Reason: loopSwitchReason, Message: fmt.Sprintf("loop %s %s (%s)", name, verb, by), OccurredAt: now,
		})
		return err
	})
	if err != nil {
		return storage.LoopSwitch{}, false, err
	}
	if changed {
		s.mu.Lock()
		s.state[name] = storage.LoopSwitch{Name: name, Paused: pause, ChangedAt: now.UTC().Truncate(time.Millisecond)}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		s.gauge.WithLabelValues(name).Set(b2f(pause))
		s.log.Warn().Str("loop", name).Bool("paused", pause).Str("by", by).Msg("loop switch changed")
	}
	return s.get(name), changed, nil
}

// pausable runs a switchable loop only while its switch is not paused:
// pausing cancels the running loop's context (it stops as at shutdown) and
// the wrapper then waits, without a timer, for the switch to change.
type pausable struct {
	Loop
	name string
	sw   *loopSwitches
	log  zerolog.Logger
}

// Run runs the wrapped loop while resumed; it returns nil when ctx ends, or
// the wrapped loop's own failure while it was not paused.
func (p *pausable) Run(ctx context.Context) error {
	for {
		paused, changed := p.sw.paused(p.name)
		if paused {
			p.log.Info().Str("loop", p.Name()).Msg("loop paused; waiting to be resumed")
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				continue
			}
		}
		runCtx, cancel := context.WithCancel(ctx)
		go func() {
			ch := changed
			for {
				select {
				case <-runCtx.Done():
					return
				case <-ch:
					var now bool
					if now, ch = p.sw.paused(p.name); now {
						cancel()
						return
					}
				}
			}
		}()
		err := p.Loop.Run(runCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if now, _ := p.sw.paused(p.name); now {
			continue // stopped by the pause, not failed
		}
		return err
	}
}

// loopHandlers serve the loop switches; they hold the switches and which
// loops this daemon runs.
type loopHandlers struct {
	sw         *loopSwitches
	configured func(name string) bool
}

func (h *loopHandlers) register(o *operations) {
	handleOp(o, adminapi.OpListLoops, h.list)
	handleOp(o, adminapi.OpPauseLoop, func(ctx context.Context, r adminapi.LoopRequest) (adminapi.LoopSwitch, error) {
		return h.set(ctx, r.Name, true)
	})
	handleOp(o, adminapi.OpResumeLoop, func(ctx context.Context, r adminapi.LoopRequest) (adminapi.LoopSwitch, error) {
		return h.set(ctx, r.Name, false)
	})
}

func (h *loopHandlers) list(context.Context, none) (adminapi.LoopList, error) {
	return adminapi.LoopList{Loops: h.wire()}, nil
}

// wire is every switchable loop's state in SwitchableLoops order.
func (h *loopHandlers) wire() []adminapi.LoopSwitch {
	out := make([]adminapi.LoopSwitch, 0, len(SwitchableLoops))
	for _, n := range SwitchableLoops {
		out = append(out, h.toAPI(h.sw.get(n), false))
	}
	return out
}

func (h *loopHandlers) toAPI(s storage.LoopSwitch, changed bool) adminapi.LoopSwitch {
	return adminapi.LoopSwitch{Name: s.Name, Paused: s.Paused, ChangedAt: s.ChangedAt, Configured: h.configured(s.Name), Changed: changed}
}

func (h *loopHandlers) set(ctx context.Context, name string, pause bool) (adminapi.LoopSwitch, error) {
	s, changed, err := h.sw.set(ctx, name, pause, "admin")
	if errors.Is(err, ErrUnknownLoop) {
		return adminapi.LoopSwitch{}, fail(http.StatusNotFound, "unknown_loop", ErrUnknownLoop.Error())
	}
	if err != nil {
		return adminapi.LoopSwitch{}, err
	}
	return h.toAPI(s, changed), nil
}
