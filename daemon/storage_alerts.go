package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/storage"
)

// The storage detectors (docs/operations.md, "Alerts"): four conditions of
// the alert table, each about the platform, read from the state the
// console, admin status and /metrics already show, so the banner, the
// metric and the alert come from one condition.
//
//   - storage-unavailable: the writer's commits fail for storage reasons
//     (storage.Writer.Failing, chalupa_storage_failing); ends at the
//     storage-health loop's next probe that commits once the writer no
//     longer fails (a commit that wrote nothing ends the writer's failing
//     state too, so that alone is no evidence).
//   - disk-low: the free-space guard holds (storage.DiskGuard,
//     chalupa_disk_low, the disk-low event); ends when it lifts.
//   - replica-failing: replication lags or fails past its lag limit
//     (storage.DefaultLagLimit, two minutes; chalupa_replication_failing),
//     and the replica is not refused; ends when a sync succeeds again.
//   - replica-refused: the replica path holds another database's history
//     (chalupa_replication_refused, the replica-refused event); ends when a
//     verification of the replica succeeds.
//
// The storage-health loop reports the first two, the replica watch the
// last two; storage-unavailable and disk-low go through the alerter's
// memory path while the database refuses writes.

// replicaRecheck is how often the replica watch reads the replicator's
// health while replica-failing holds, so its end is seen within 10 s of the
// sync that ends it (a sync that succeeds after a run of failures also
// wakes it at once; one that ends a lag without failures does not).
const replicaRecheck = 10 * time.Second

// replicaSlack is added to the moment replication would pass its lag
// limit, so the watch reads the health just after it does.
const replicaSlack = time.Second

// LoopReplicaWatch is the replica watch's name in logs. It has no switch:
// it only reports conditions (docs/operations.md, "Loop switches").
const LoopReplicaWatch = "replica-watch"

// storageAlerts reports the storage detectors' conditions to the alerter,
// each when it differs from what was last reported (nothing is written
// while it stays the same). A report that fails is logged and made again at
// the next look.
type storageAlerts struct {
	set alerts.Setter
	log zerolog.Logger

	mu      sync.Mutex
	alerted map[string]bool
}

// newStorageAlerts returns the storage detectors' reporter over set (nil:
// nothing is reported).
func newStorageAlerts(set alerts.Setter, log zerolog.Logger) *storageAlerts {
	if set == nil {
		return nil
	}
	s := &storageAlerts{set: set, log: log, alerted: map[string]bool{}}
	for _, kind := range initialStorageAlerts {
		s.alerted[kind] = false
	}
	return s
}

// initialStorageAlerts are the conditions known "not holding" when a
// process starts: the writer has not failed yet, the guard and the
// replicator measure afresh, and an alert an earlier process left open is
// resolved by the re-checks (storageAlertChecks). Reporting "not holding"
// at the first look would be a writer transaction that writes nothing, and
// its COMMIT would end the writer's failing state (storage.Writer.Failing)
// on a disk that still refuses every real write.
var initialStorageAlerts = []string{alerts.KindStorageUnavailable, alerts.KindDiskLow, alerts.KindReplicaFailing, alerts.KindReplicaRefused}

// platform is the subject of every storage condition.
var platform = alerts.Subject{Kind: alerts.SubjectPlatform}

// report reports kind's condition when it differs from the last report
// (initialStorageAlerts: nothing holds at start).
func (s *storageAlerts) report(ctx context.Context, kind string, holds bool, detail string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if was, known := s.alerted[kind]; known && was == holds {
		return
	}
	if err := s.set.Set(ctx, kind, platform, holds, detail); err != nil {
		s.log.Error().Err(err).Str("kind", kind).Bool("holds", holds).Msg("reporting a condition to the alerter failed; reported again at the next look")
		return
	}
	s.alerted[kind] = holds
}

// holds reports whether kind was last reported as holding (false for a
// nil reporter).
func (s *storageAlerts) holds(kind string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alerted[kind]
}

// storageWarning is the console's storage banner: storage-unavailable
// while the writer fails or the condition was last reported holding, else
// disk-low while the guard holds; "" otherwise. It names the fault's kind,
// never a path or a figure (the landing page shows it before sign-in).
func storageWarning(w *storage.Writer, disk *storage.DiskGuard, s *storageAlerts) string {
	if h := w.StorageHealth(); h.Failing || s.holds(alerts.KindStorageUnavailable) {
		return fmt.Sprintf("the database refuses writes (%s): writes are answered 503 storage_unavailable until a commit succeeds. See docs/operations.md, \"Storage and the writer\".", h.LastFault)
	}
	if disk != nil && disk.Check().Low {
		return "free space on the data directory's disk is below CHALUPA_MIN_FREE_BYTES: signed ingest other than heartbeats is refused until space returns. See docs/operations.md, \"Quotas\"."
	}
	return ""
}

// storageDetail is storage-unavailable's detail: the fault's kind and
// since when, never a path or SQL.
func storageDetail(h storage.StorageHealth) string {
	since := h.Since
	if since.IsZero() {
		since = h.LastFaultAt
	}
	return fmt.Sprintf("The writer's commits fail (%s) since %s; writes are answered 503 storage_unavailable and /api/ready 503.",
		h.LastFault, since.UTC().Format(time.RFC3339))
}

// diskDetail is disk-low's detail: free space against the floor.
func diskDetail(d storage.DiskState) string {
	return fmt.Sprintf("Free space on the data directory's filesystem is %d bytes, below CHALUPA_MIN_FREE_BYTES (%d bytes); signed ingest other than heartbeats is refused 503 disk_low.",
		d.FreeBytes, d.MinFreeBytes)
}

// replicaDetail is replica-failing's detail: lag, limit and the last
// error's kind (redacted by storage: no URL, bucket or path).
func replicaDetail(h storage.ReplicationHealth) string {
	d := fmt.Sprintf("Replication lags %.0f s (lag limit %.0f s)", h.LagSeconds, h.LagLimitSeconds)
	if !h.FailingSince.IsZero() {
		d += "; attempts fail since " + h.FailingSince.UTC().Format(time.RFC3339)
	}
	if h.LastError != "" {
		d += "; last error: " + h.LastError
	}
	return d + "."
}

// replicaConditions splits the replicator's health into the two replica
// conditions: refused, or failing past the lag limit while not refused.
func replicaConditions(h storage.ReplicationHealth) (failing, refused bool) {
	refused = h.Refused != ""
	return h.Failing && !refused, refused
}

// replicaSource is what the replica watch reads: *storage.Replicator.
type replicaSource interface {
	Health(now time.Time) storage.ReplicationHealth
	Changed() <-chan struct{}
}

// replicaWatch is the replica detector's loop. It reads the replicator's
// health (no I/O) when the replicator signals a change, when replication
// would pass its lag limit, and every replicaRecheck while replica-failing
// holds; with replication caught up it has no timer.
type replicaWatch struct {
	repl   replicaSource
	alerts *storageAlerts
	clock  clockwork.Clock
	// db records the replica-failing and replica-failing-lifted events
	// (nil: none); log hears a failure to record one.
	db  *storage.DB
	log zerolog.Logger
	// recorded is the failing state the last event said (false at
	// start: replication failing at start is recorded when seen).
	recorded bool
}

// Platform event kinds of the replica watch: replica-failing's start and
// end, beside the alert and chalupa_replication_failing
// (docs/operations.md, "Alerts").
const (
	// ReplicaFailingKind is recorded when replication passes its lag
	// limit (not refused).
	ReplicaFailingKind = "replica-failing"
	// ReplicaFailingLiftedKind is recorded when it is back under it.
	ReplicaFailingLiftedKind = "replica-failing-lifted"
)

// recordFailing records the replica-failing event for a change of the
// failing state; a failure is logged and the event tried again at the
// next look.
func (w *replicaWatch) recordFailing(ctx context.Context, failing bool, h storage.ReplicationHealth, now time.Time) {
	if w.db == nil || failing == w.recorded {
		return
	}
	kind, msg := ReplicaFailingKind, replicaDetail(h)
	if !failing {
		kind, msg = ReplicaFailingLiftedKind, fmt.Sprintf("Replication is back under its lag limit (%.0f s): lag %.0f s.", h.LagLimitSeconds, h.LagSeconds)
	}
	err := w.db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{
			ID: fmt.Sprintf("%s:%d", kind, now.UnixMilli()), Kind: kind, Message: msg, OccurredAt: now,
		})
		return err
	})
	if err != nil {
		w.log.Warn().Err(err).Str("kind", kind).Msg("replication event not recorded; tried again at the next look")
		return
	}
	w.recorded = failing
}

// Name implements Loop.
func (w *replicaWatch) Name() string { return LoopReplicaWatch }

// Tick reports the replica conditions as the health reads now and returns
// when to read it again (zero: only at the replicator's next signal).
func (w *replicaWatch) Tick(ctx context.Context) time.Time {
	now := w.clock.Now()
	h := w.repl.Health(now)
	failing, refused := replicaConditions(h)
	detail := ""
	if refused {
		detail = h.Refused
	}
	w.alerts.report(ctx, alerts.KindReplicaRefused, refused, detail)
	detail = ""
	if failing {
		detail = replicaDetail(h)
	}
	w.alerts.report(ctx, alerts.KindReplicaFailing, failing, detail)
	w.recordFailing(ctx, failing, h, now)
	limit := time.Duration(h.LagLimitSeconds * float64(time.Second))
	switch {
	case refused:
		return time.Time{}
	case failing || failing != w.recorded:
		return now.Add(replicaRecheck)
	case !h.FailingSince.IsZero():
		return h.FailingSince.Add(limit + replicaSlack)
	case h.LagSeconds > 0:
		return now.Add(limit - time.Duration(h.LagSeconds*float64(time.Second)) + replicaSlack)
	}
	return time.Time{}
}

// Run ticks until ctx ends, then returns nil.
func (w *replicaWatch) Run(ctx context.Context) error {
	for {
		next := w.Tick(ctx)
		var timer clockwork.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = w.clock.NewTimer(max(next.Sub(w.clock.Now()), 0))
			fire = timer.Chan()
		}
		select {
		case <-ctx.Done():
		case <-w.repl.Changed():
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// storageAlertChecks are the storage conditions' re-checks, by kind, for
// the alerter to run at start on every open alert of those kinds, so an
// alert whose end was lost in a crash or a restore resolves
// (docs/operations.md, "Alerts"). Each reads the state as it is now: the
// writer has not failed in a new process until a commit fails, and
// replication's failure and refusal are measured afresh; a fault still
// there is raised again when its detector finds it. repl nil: the replica
// conditions do not hold.
func storageAlertChecks(db *storage.DB, disk *storage.DiskGuard, repl replicaSource, clock clockwork.Clock) map[string]alerter.Check {
	replica := func(refusedKind bool) alerter.Check {
		return func(context.Context, alerts.Subject) (bool, string, error) {
			if repl == nil {
				return false, "", nil
			}
			h := repl.Health(clock.Now())
			failing, refused := replicaConditions(h)
			if refusedKind {
				return refused, h.Refused, nil
			}
			if failing {
				return true, replicaDetail(h), nil
			}
			return false, "", nil
		}
	}
	return map[string]alerter.Check{
		alerts.KindStorageUnavailable: func(context.Context, alerts.Subject) (bool, string, error) {
			h := db.Writer.StorageHealth()
			if !h.Failing {
				return false, "", nil
			}
			return true, storageDetail(h), nil
		},
		alerts.KindDiskLow: func(context.Context, alerts.Subject) (bool, string, error) {
			if disk == nil {
				return false, "", nil
			}
			d := disk.Refresh()
			if !d.Low {
				return false, "", nil
			}
			return true, diskDetail(d), nil
		},
		alerts.KindReplicaFailing: replica(false),
		alerts.KindReplicaRefused: replica(true),
	}
}

// registerStorageChecks registers storageAlertChecks on al.
func registerStorageChecks(al *alerter.Alerter, db *storage.DB, disk *storage.DiskGuard, repl replicaSource, clock clockwork.Clock) error {
	for kind, check := range storageAlertChecks(db, disk, repl, clock) {
		if err := al.RegisterCheck(kind, check); err != nil {
			return err
		}
	}
	return nil
}
