package daemon

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/wake"
	"github.com/chalupa-run/chalupa/storage"
)

// SetIngestInFlightLimit lowers the signed-ingest in-flight bound of s, so a
// test can fill it with a handful of requests.
func SetIngestInFlightLimit(s *Server, n int64) { s.ingestLimit = n }

// IngestInFlight is the number of signed-ingest requests s is serving.
func IngestInFlight(s *Server) int64 { return s.ingestInFlight.Load() }

// QuotaEvents is the queue of quota warnings s's ingest service noted (the
// quota-events loop drains it; a test records them itself).
func QuotaEvents(s *Server) <-chan ingest.QuotaEvent { return s.ingest.QuotaEvents() }

// DeadlineActivity is s's heartbeat → reaper wake-up signal.
func DeadlineActivity(s *Server) *wake.Threshold { return s.ingest.DeadlineActivity() }

// ObserveRequest counts one request in s's hourly request statistics as
// the request path does (group, status code, latency).
func ObserveRequest(s *Server, group string, code int, d time.Duration) {
	s.stats.observe(group, code, d)
}

// WaitRequestStats waits for s's request statistics hand-offs to the writer.
func WaitRequestStats(s *Server) { s.stats.writes.Wait() }

// SetProcessCPU replaces how s's request statistics read the process's CPU
// time, starting the current interval at cpu()'s value.
func SetProcessCPU(s *Server, cpu func() time.Duration) {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	s.stats.cpu, s.stats.sinceCPU = cpu, cpu()
}

// StorageHealth is the storage-health loop, for tests that tick it.
type StorageHealth = storageHealth

// NewStorageHealth returns a storage-health loop over a's database and
// free-space guard (the one StartLoops runs, built apart so a test ticks it).
func NewStorageHealth(a *App) *StorageHealth {
	return &storageHealth{db: a.DB, disk: a.Server.disk, clock: a.Clock, log: a.Log}
}

// Alerter is s's alerter, as the detectors see it.
func Alerter(s *Server) alerts.Setter { return s.alerter }

// NewStorageHealthAlerting is NewStorageHealth reporting storage-unavailable
// and disk-low to set.
func NewStorageHealthAlerting(a *App, set alerts.Setter) *StorageHealth {
	l := NewStorageHealth(a)
	l.alerts = newStorageAlerts(set, a.Log)
	return l
}

// ReplicaWatch is the replica detector's loop, for tests that tick it.
type ReplicaWatch = replicaWatch

// NewReplicaWatch returns a replica watch over r reporting to set and
// recording its events in db.
func NewReplicaWatch(r *storage.Replicator, db *storage.DB, set alerts.Setter, clock clockwork.Clock) *ReplicaWatch {
	return &replicaWatch{repl: r, alerts: newStorageAlerts(set, zerolog.Nop()), clock: clock, db: db, log: zerolog.Nop()}
}

// StorageAlertChecks are the storage conditions' re-checks over a's
// database, free-space guard and replicator, as the alerter runs them at
// start.
func StorageAlertChecks(a *App) map[string]alerter.Check {
	return storageAlertChecks(a.DB, a.Server.disk, a.Replicator, a.Clock)
}

// ReplicaAlertChecks are the replica conditions' re-checks over r.
func ReplicaAlertChecks(r *storage.Replicator, clock clockwork.Clock) map[string]alerter.Check {
	return storageAlertChecks(nil, nil, r, clock)
}

// RecheckAlerts runs s's alerter's re-check of the open alerts, as its
// loop does at start, and returns how many it resolved.
func RecheckAlerts(ctx context.Context, s *Server) (int, error) { return s.alerter.Recheck(ctx) }
