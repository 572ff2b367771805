package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// QuotaEventKind is the lifecycle_events kind of a quota warning.
const QuotaEventKind = "quota-exceeded"

// Quota warning bounds (docs/operations.md, "Quotas").
const (
	// quotaEventQueue is how many warnings may wait for the writer; one
	// more is dropped (and may be noted again by a later refusal), so a
	// refused request never waits for a write.
	quotaEventQueue = 64
	// maxQuotaEventsPerHour bounds the warnings noted in one clock hour
	// across all environments: deployment warnings are per deployment id,
	// and a leaked key can name many; past it, only the refusal counters
	// grow. Lifecycle events are never pruned.
	maxQuotaEventsPerHour = 256
)

// QuotaEvent is one quota-exceeded warning waiting to be recorded.
type QuotaEvent struct {
	// ID is stable for (quota, environment, deployment, clock hour):
	// quota:<quota>:<environment>:<deployment>:<YYYY-MM-DDTHH>, the
	// deployment empty for an environment quota.
	ID string
	// Quota is the quota's name (QuotaNames).
	Quota string
	// EnvironmentSlug is the environment that met it.
	EnvironmentSlug string
	// DeploymentID is the deployment that met it, "" for an environment
	// quota.
	DeploymentID string
	// Message names the quota and its value; ids at most.
	Message string
	// At is when the first refusal of the hour happened.
	At time.Time
}

// quotaEventID is the stable id of a warning (once per hour per quota and
// deployment or environment, across restarts).
func quotaEventID(quota, env, dep string, at time.Time) string {
	return "quota:" + quota + ":" + env + ":" + dep + ":" + at.UTC().Format("2006-01-02T15")
}

// quotaNotes dedups warnings in memory for the current clock hour, so a
// flood of refusals queues one write, not one per request. The stable id
// and INSERT OR IGNORE keep it once across restarts.
type quotaNotes struct {
	ch chan QuotaEvent

	mu   sync.Mutex
	hour time.Time
	seen map[string]bool
	// refusing is quota-exceeded's state per environment slug, and
	// alertWake wakes the quota-events loop at an environment's first
	// refusal (quota_alerts.go).
	refusing  map[string]*refusing
	alertWake chan struct{}
}

func newQuotaNotes() *quotaNotes {
	return &quotaNotes{ch: make(chan QuotaEvent, quotaEventQueue), seen: map[string]bool{},
		refusing: map[string]*refusing{}, alertWake: make(chan struct{}, 1)}
}

// note queues the warning for (quota, env, dep) unless it was queued this
// hour already. It never blocks.
func (n *quotaNotes) note(at time.Time, quota, env, dep, message string) {
	hour := at.UTC().Truncate(time.Hour)
	id := quotaEventID(quota, env, dep, at)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.refused(at, env, message)
	if !hour.Equal(n.hour) {
		n.hour, n.seen = hour, map[string]bool{}
	}
	if n.seen[id] || len(n.seen) >= maxQuotaEventsPerHour {
		return
	}
	select {
	case n.ch <- QuotaEvent{ID: id, Quota: quota, EnvironmentSlug: env, DeploymentID: dep, Message: message, At: at.UTC()}:
		n.seen[id] = true
	default: // queue full: dropped, and free to be noted again
	}
}

// QuotaEvents is where the service queues quota-exceeded warnings; the
// QuotaEventWriter loop records them.
func (s *Service) QuotaEvents() <-chan QuotaEvent { return s.notes.ch }

// noteQuota queues the warning for a refusal by quota rf.Quota.
func (s *Service) noteQuota(rf *Refusal, env, dep string) {
	if rf == nil || rf.Quota == "" {
		return
	}
	if environmentQuotas[rf.Quota] {
		dep = ""
	}
	s.notes.note(s.clock.Now(), rf.Quota, env, dep, quotaMessage(rf.Quota, s.quotas, dep))
}

// quotaMessage names the quota, its setting and (for a deployment quota)
// the deployment id.
func quotaMessage(quota string, q Quotas, dep string) string {
	switch quota {
	case QuotaDeploymentHeartbeats:
		return fmt.Sprintf("deployment %s exceeded the heartbeat quota (CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE=%d, CHALUPA_QUOTA_HEARTBEAT_BURST=%d); refusals answered 429 rate_limited; later ones this hour are counted, not recorded",
			dep, q.HeartbeatsPerMinute, q.HeartbeatBurst)
	case QuotaEnvironmentHeartbeats:
		return fmt.Sprintf("environment exceeded its heartbeat quota (CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE=%d); refusals answered 429 rate_limited; later ones this hour are counted, not recorded",
			q.EnvironmentHeartbeatsPerMinute)
	case QuotaActiveDeployments:
		return fmt.Sprintf("environment reached its active deployment quota (CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS=%d); new deployments answered 429 deployment_quota; later ones this hour are counted, not recorded",
			q.ActiveDeployments)
	case QuotaOpenSessions:
		return fmt.Sprintf("deployment %s reached its telemetry session quota (CHALUPA_QUOTA_OPEN_SESSIONS=%d open, or opened in the last hour); later refusals this hour are counted, not recorded",
			dep, q.OpenSessions)
	case QuotaTelemetryReceipts:
		return fmt.Sprintf("deployment %s holds the maximum of telemetry windows (20,160 receipts) and can write no more telemetry; end it and start a new deployment id, or erase the environment's telemetry; later refusals this hour are counted, not recorded",
			dep)
	case QuotaEnvironmentStorage:
		return fmt.Sprintf("environment reached its storage budget (CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES=%d); runs, telemetry and producer events answered 429 storage_quota, heartbeats still accepted; retention or an erase frees it; later refusals this hour are counted, not recorded",
			q.EnvironmentStorageBytes)
	case QuotaDeploymentTelemetry, QuotaDeploymentLifecycle, QuotaDeploymentRuns, QuotaDeploymentArtifactBytes, QuotaDeploymentLogRequests:
		v := rateVariables[quota]
		return fmt.Sprintf("deployment %s exceeded the %s quota (%s=%d, %s=%d); refusals answered 429 rate_limited; later ones this hour are counted, not recorded",
			dep, strings.ReplaceAll(strings.TrimPrefix(quota, "deployment_"), "_", " "), v.rate, v.r(q), v.burst, v.b(q))
	case QuotaEnvironmentTelemetry, QuotaEnvironmentLifecycle, QuotaEnvironmentRuns, QuotaEnvironmentArtifactBytes, QuotaEnvironmentLogRequests:
		v := rateVariables[quota]
		return fmt.Sprintf("environment exceeded its %s quota (%s=%d); refusals answered 429 rate_limited; later ones this hour are counted, not recorded",
			strings.ReplaceAll(strings.TrimPrefix(quota, "environment_"), "_", " "), v.rate, v.r(q))
	case QuotaLogSessions, QuotaLogChunks, QuotaLogBytes:
		return fmt.Sprintf("deployment %s reached its %s quota (docs/operations.md, \"Logs\"); later refusals this hour are counted, not recorded",
			dep, strings.ReplaceAll(quota, "_", " "))
	}
	return strings.ReplaceAll(quota, "_", " ") + " quota exceeded"
}

// rateVar is a rate quota's variables and their values: the rate (and,
// for a deployment quota, the burst).
type rateVar struct {
	rate, burst string
	r, b        func(Quotas) int
}

// rateVariables maps each rate quota of the routes other than heartbeats to
// its variables (docs/operations.md, "Quotas").
var rateVariables = map[string]rateVar{
	QuotaDeploymentTelemetry: {"CHALUPA_QUOTA_TELEMETRY_PER_MINUTE", "CHALUPA_QUOTA_TELEMETRY_BURST",
		func(q Quotas) int { return q.TelemetryPerMinute }, func(q Quotas) int { return q.TelemetryBurst }},
	QuotaEnvironmentTelemetry: {"CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE", "", func(q Quotas) int { return q.EnvironmentTelemetryPerMinute }, nil},
	QuotaDeploymentLifecycle: {"CHALUPA_QUOTA_LIFECYCLE_PER_MINUTE", "CHALUPA_QUOTA_LIFECYCLE_BURST",
		func(q Quotas) int { return q.LifecyclePerMinute }, func(q Quotas) int { return q.LifecycleBurst }},
	QuotaEnvironmentLifecycle: {"CHALUPA_QUOTA_ENVIRONMENT_LIFECYCLE_PER_MINUTE", "", func(q Quotas) int { return q.EnvironmentLifecyclePerMinute }, nil},
	QuotaDeploymentRuns: {"CHALUPA_QUOTA_RUNS_PER_MINUTE", "CHALUPA_QUOTA_RUN_BURST",
		func(q Quotas) int { return q.RunsPerMinute }, func(q Quotas) int { return q.RunBurst }},
	QuotaEnvironmentRuns: {"CHALUPA_QUOTA_ENVIRONMENT_RUNS_PER_MINUTE", "", func(q Quotas) int { return q.EnvironmentRunsPerMinute }, nil},
	QuotaDeploymentArtifactBytes: {"CHALUPA_QUOTA_ARTIFACT_KIB_PER_MINUTE", "CHALUPA_QUOTA_ARTIFACT_KIB_BURST",
		func(q Quotas) int { return q.ArtifactKiBPerMinute }, func(q Quotas) int { return q.ArtifactKiBBurst }},
	QuotaEnvironmentArtifactBytes: {"CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE", "", func(q Quotas) int { return q.EnvironmentArtifactKiBPerMinute }, nil},
	QuotaDeploymentLogRequests: {"CHALUPA_QUOTA_LOG_REQUESTS_PER_MINUTE", "CHALUPA_QUOTA_LOG_BURST",
		func(q Quotas) int { return q.LogRequestsPerMinute }, func(q Quotas) int { return q.LogBurst }},
	QuotaEnvironmentLogRequests: {"CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE", "", func(q Quotas) int { return q.EnvironmentLogRequestsPerMinute }, nil},
}

// QuotaEventWriter is the background loop that records queued quota
// warnings as lifecycle events (kind quota-exceeded), each in a writer unit
// of its own, off the refused requests' path (docs/operations.md, "Quotas").
// With Service and Alerts set it also reports the quota-exceeded
// condition (quota_alerts.go; docs/operations.md, "Alerts"). It wakes only
// when a warning is queued or an environment starts refusing, and, while
// an environment refuses, when its QuotaQuiet may have passed.
type QuotaEventWriter struct {
	// DB is the migrated database; events go through its writer.
	DB *storage.DB
	// Events is Service.QuotaEvents.
	Events <-chan QuotaEvent
	// Log receives write faults.
	Log zerolog.Logger
	// Service is the ingest service whose refusals raise quota-exceeded,
	// reported to Alerts; either nil: no alert is reported.
	Service *Service
	Alerts  alerts.Setter
}

// Name implements daemon.Loop.
func (w *QuotaEventWriter) Name() string { return "quota-events" }

// Run records each queued warning until ctx ends; it then returns nil. A
// failed write is logged and the warning dropped (the next hour notes it
// again).
func (w *QuotaEventWriter) Run(ctx context.Context) error {
	var wake <-chan struct{}
	alerting := w.Service != nil && w.Alerts != nil
	if alerting {
		wake = w.Service.notes.alertWake
	}
	var next time.Time
	for {
		if alerting {
			next = w.quotaAlerts(ctx)
		}
		var timer clockwork.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = w.Service.clock.NewTimer(max(next.Sub(w.Service.clock.Now()), 0))
			fire = timer.Chan()
		}
		select {
		case <-ctx.Done():
		case ev := <-w.Events:
			if _, err := w.Record(ctx, ev); err != nil && ctx.Err() == nil {
				w.Log.Error().Err(err).Str("loop", w.Name()).Msg("record quota warning")
			}
		case <-wake:
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

// Record writes ev as a lifecycle event unless its id exists, and reports
// whether it inserted one. The deployment column is set only when the
// deployment exists in the environment (a refused first heartbeat has none;
// the message names it); an environment that does not exist (a deprecated
// shared-key request naming an unknown slug) records nothing.
func (w *QuotaEventWriter) Record(ctx context.Context, ev QuotaEvent) (bool, error) {
	var inserted bool
	err := w.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		env, err := storage.EnvironmentBySlug(ctx, tx, ev.EnvironmentSlug)
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		dep := ev.DeploymentID
		if dep != "" {
			if _, err := storage.DeploymentStatus(ctx, tx, env.ID, dep); errors.Is(err, storage.ErrNotFound) {
				dep = ""
			} else if err != nil {
				return err
			}
		}
		inserted, err = storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID: ev.ID, EnvironmentID: env.ID, DeploymentID: dep, Kind: QuotaEventKind, Message: ev.Message, OccurredAt: ev.At,
		})
		return err
	})
	return inserted, err
}
