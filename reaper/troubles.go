package reaper

import (
	"context"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// The reaper's own troubles, recorded as platform events (organization
// platform, no environment) at most once an hour each, beside the log line
// (docs/operations.md, "Reaper").
const (
	// KindTokenRefused: DigitalOcean refused the write token (401) or
	// found it lacking a scope (403) on a droplet call.
	KindTokenRefused = "reaper-token-refused"
	// KindRateLimited: the write token is rate-limited; the reaper holds
	// every platform deployment until the provider's retry time.
	KindRateLimited = "reaper-rate-limited"
	// KindOverdue: active deployments whose deadline passed more than
	// OverdueAfter ago were not destroyed.
	KindOverdue = "reaper-overdue"
)

// TroubleKinds lists the trouble events' kinds, in the order /metrics
// shows them.
var TroubleKinds = []string{KindTokenRefused, KindRateLimited, KindOverdue}

// TroubleEvery is how often at most each trouble is recorded: once per
// clock hour, so a token refused all day makes 24 events, not one per
// tick.
const TroubleEvery = time.Hour

// OverdueAfter is how long past its deadline an active deployment counts
// as overdue: an hour, many ticks and back-offs (BackoffMax) past any
// single failure.
const OverdueAfter = time.Hour

// troubleID is the event id of kind in the TroubleEvery window holding at
// (the clock guard's trusted time: EventTime): the same window gives the
// same id, so INSERT OR IGNORE keeps one even across restarts.
func troubleID(kind string, at time.Time) string {
	return fmt.Sprintf("%s:%d", kind, at.Unix()/int64(TroubleEvery/time.Second))
}

// troubleLateSuffix marks the second id of a window, taken when its first
// id is held by an event written under a wall clock that was ahead
// (storage.PlatformEventFromAhead), whose id would otherwise silently drop
// this window's genuine event (docs/operations.md, "Reaper", event times).
const troubleLateSuffix = ":after-future"

// troubleOrderTolerance is how far platform events' times may run against
// their insertion order before the earlier-inserted one counts as written
// under a clock that was ahead: their writers stamp them before they wait
// for the single writer, which takes well under a minute, and a clock step
// is at least clockguard.StepThreshold.
const troubleOrderTolerance = clockguard.StepThreshold

// trouble records kind's platform event with message at now unless this
// window already has one; it reports whether it recorded one. The window
// and the stored time come from the clock guard's trusted time, so an
// event written while the guard suspects the wall clock is where it
// belongs. Faults are logged: the log line stays the fallback.
func (r *Reaper) trouble(ctx context.Context, kind, message string, now time.Time) bool {
	at := r.clockGuard.EventTime(now)
	id := troubleID(kind, at)
	r.mu.Lock()
	done := r.troubled[kind] == id
	r.mu.Unlock()
	if done {
		return false
	}
	var inserted bool
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		inserted, err = storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{ID: id, Kind: kind, Message: message, OccurredAt: now})
		if err != nil || inserted {
			return err
		}
		ahead, err := storage.PlatformEventFromAhead(ctx, tx, id, at, troubleOrderTolerance)
		if err != nil || !ahead {
			return err
		}
		inserted, err = storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{ID: id + troubleLateSuffix, Kind: kind, Message: message, OccurredAt: now})
		return err
	}); err != nil {
		r.log.Error().Err(err).Str("kind", kind).Msg("recording the reaper's trouble event failed")
		return false
	}
	r.mu.Lock()
	r.troubled[kind] = id
	r.mu.Unlock()
	if inserted && r.metrics != nil {
		r.metrics.Troubles.WithLabelValues(kind).Inc()
	}
	return inserted
}

// checkOverdue records KindOverdue when active platform deployments'
// deadlines passed more than OverdueAfter before now and they are still
// not destroyed (whatever held them: rate limit, refused token, guard),
// and reports the condition's start and end to the alerter (alerts.go).
func (r *Reaper) checkOverdue(ctx context.Context, now time.Time) {
	n, err := storage.ReaperOverdue(ctx, r.db.Read, now.Add(-OverdueAfter), r.fresh)
	if err != nil {
		r.log.Error().Err(err).Msg("counting overdue deployments failed")
		return
	}
	if n == 0 {
		r.setAlert(ctx, KindOverdue, false, "")
		return
	}
	msg := fmt.Sprintf("%d active deployments are more than %s past their deadline and not destroyed: read the reaper's events and `chalupa admin reaper status` (docs/operations.md, \"Reaper\")",
		n, OverdueAfter)
	r.trouble(ctx, KindOverdue, msg, now)
	r.setAlert(ctx, KindOverdue, true, msg)
}
