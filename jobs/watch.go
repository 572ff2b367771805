package jobs

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// Watch records one platform event (kind reaper-warning, reason provider,
// "managed worker offline", no environment) when jobs have waited queued for OfflineAfter with no
// worker seen for as long, repeats suppressed for OfflineRepeat
// (docs/operations.md, "Jobs"). It runs with or without an executor: jobs
// left queued by an earlier configuration are exactly what it reports.
type Watch struct {
	db    *storage.DB
	clock clockwork.Clock
	log   zerolog.Logger
	wake  chan struct{}

	// alerts receives worker-offline (nil: none); offline is what was
	// last reported (alerts.go).
	alerts  alerts.Setter
	offline reported

	// idleWaits counts waits without a timer (tests synchronise on it).
	idleWaits atomic.Int64
}

// SetAlerts makes the watch report worker-offline to s when it starts and
// when it ends (docs/operations.md, "Alerts"); call it before Run.
func (w *Watch) SetAlerts(s alerts.Setter) { w.alerts = s }

// NewWatch returns a Watch; a nil clock is the real one.
func NewWatch(db *storage.DB, clock clockwork.Clock, log zerolog.Logger) *Watch {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Watch{db: db, clock: clock, log: log.With().Str("loop", "jobs-watch").Logger(), wake: make(chan struct{}, 1)}
}

// Name implements daemon.Loop.
func (w *Watch) Name() string { return "jobs-watch" }

// Notify wakes the watch (a job was enqueued). Signals coalesce.
func (w *Watch) Notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// IdleWaits counts the times Run waited with no timer (no queued job).
func (w *Watch) IdleWaits() int64 { return w.idleWaits.Load() }

// WatchResult is what one watch tick did.
type WatchResult struct {
	// Queued counts the queued jobs seen.
	Queued int
	// Warned is set when the tick recorded the warning; Suppressed when one
	// was due but an earlier one is younger than OfflineRepeat.
	Warned, Suppressed bool
	// NextCheck is when the warning could next be due (zero: no job
	// queued, nothing to watch).
	NextCheck time.Time
}

// Tick checks the queue once and records the warning when it is due.
// Errors: a database fault.
func (w *Watch) Tick(ctx context.Context) (WatchResult, error) {
	var res WatchResult
	var st storage.QueueState
	var now time.Time
	err := w.db.Writer.Do(ctx, func(tx storage.Tx) error {
		// Read and write in one unit: two ticks cannot both warn.
		res = WatchResult{}
		now = w.clock.Now()
		var err error
		st, err = storage.ReadQueueState(ctx, tx)
		if err != nil {
			return err
		}
		res.Queued = st.Queued
		if st.Queued == 0 {
			return nil
		}
		last, err := storage.LatestLifecycleEventAt(ctx, tx, OfflineIDPrefix)
		if err != nil {
			return err
		}
		since := st.OldestQueuedAt
		if st.LastWorkerSeen.After(since) {
			since = st.LastWorkerSeen
		}
		due := since.Add(OfflineAfter)
		if now.Before(due) {
			res.NextCheck = due
			return nil
		}
		if !last.IsZero() && now.Before(last.Add(OfflineRepeat)) {
			res.Suppressed, res.NextCheck = true, last.Add(OfflineRepeat)
			return nil
		}
		if _, err := storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{
			ID:   fmt.Sprintf("%s%d", OfflineIDPrefix, now.UnixMilli()),
			Kind: OfflineKind, Reason: OfflineReason, Message: OfflineMessage, OccurredAt: now,
		}); err != nil {
			return err
		}
		res.Warned, res.NextCheck = true, now.Add(OfflineRepeat)
		return nil
	})
	if err == nil && res.Warned {
		w.log.Warn().Int("queued", res.Queued).Msg(OfflineMessage)
	}
	if err == nil && w.alerts != nil {
		w.offlineAlert(ctx, st, now, &res)
	}
	return res, err
}

// offlineAlert reports worker-offline's state at now to the alerter when
// it changed, and while it holds makes the next look no later than
// WatchRecheck (alerts.go).
func (w *Watch) offlineAlert(ctx context.Context, st storage.QueueState, now time.Time, res *WatchResult) {
	holds, detail := offline(st, now), ""
	if holds {
		detail = offlineDetail(st)
	}
	if err := w.offline.set(ctx, w.alerts, alerts.KindWorkerOffline, platform, holds, detail); err != nil {
		w.log.Error().Err(err).Msg("reporting worker-offline to the alerter failed; reported again at the next look")
		holds = true // look again soon
	}
	if holds || w.offline.holding("") {
		if t := now.Add(WatchRecheck); res.NextCheck.IsZero() || t.Before(res.NextCheck) {
			res.NextCheck = t
		}
	}
}

// Run watches until ctx ends, then returns nil. With no queued job it waits
// for Notify without any timer; otherwise it sleeps until the warning could
// next be due.
func (w *Watch) Run(ctx context.Context) error {
	for {
		res, err := w.Tick(ctx)
		if ctx.Err() != nil {
			return nil
		}
		next := res.NextCheck
		if err != nil {
			w.log.Error().Err(err).Msg("jobs watch tick failed")
			next = w.clock.Now().Add(RecoverRetry)
		}
		if next.IsZero() {
			w.idleWaits.Add(1)
			select {
			case <-ctx.Done():
				return nil
			case <-w.wake:
			}
			continue
		}
		t := w.clock.NewTimer(next.Sub(w.clock.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.Chan():
		case <-w.wake:
			t.Stop()
		}
	}
}
