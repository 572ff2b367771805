package daemon

import (
	"context"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/digest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// Loop is a background worker (Coder's workers are the model): Run blocks
// until ctx ends, doing one bounded tick of work at each run time of its
// schedule (internal/schedule) on its injected clock. Tests call a loop's
// tick method directly, or drive Run with a fake clock.
type Loop interface {
	// Name identifies the loop in logs.
	Name() string
	// Run works until ctx is done; it returns nil then, or an error that
	// the supervisor logs before restarting the loop after a back-off.
	Run(ctx context.Context) error
}

// LoopDeps is what every background loop is built from.
type LoopDeps struct {
	// DB is the opened, migrated database.
	DB *storage.DB
	// Clock is the daemon's one clock: every loop schedules and measures
	// its ticks on it.
	Clock clockwork.Clock
	// Log is the daemon's logger.
	Log zerolog.Logger
	// Metrics is where each loop registers its own series (the registry
	// behind GET /metrics).
	Metrics prometheus.Registerer
	// NonceActivity signals stored nonces (ingest.Service.NonceActivity);
	// the pruner sleeps on it while there is nothing to prune.
	NonceActivity <-chan struct{}
	// NonceLedger is ingest's record of claimed nonces
	// (ingest.Service.NonceLedger), which the pruner holds.
	NonceLedger *ingest.NonceLedger
	// Ingest is the ingest service whose clock offset the clock-offset
	// loop watches (nil: the loop is not run).
	Ingest *ingest.Service
	// QuotaEvents are the quota warnings the ingest service queued
	// (ingest.Service.QuotaEvents), recorded by the quota-events loop.
	QuotaEvents <-chan ingest.QuotaEvent
	// Costs is the cost reconciler the admin API also runs (nil without
	// DIGITALOCEAN_READ_TOKEN: the loop is then not run).
	Costs *cost.Reconciler
	// Retention is the retention worker the admin API also runs
	// (adminRunRetention), so both share one pass at a time; nil builds
	// one.
	Retention *telemetry.Retention
	// Reaper is the reaper loop (built with the server, whose admin
	// operations share it); it runs only with the platform write token
	// set, and nil adds no loop.
	Reaper *reaper.Reaper
	// Jobs is the converge job lane (nil without an executor: not run);
	// JobWatch warns when queued jobs find no worker (nil: not run).
	Jobs     *jobs.Runner
	JobWatch *jobs.Watch
	// Switches, when set, wrap the switchable loops so that a paused one
	// does no work (docs/operations.md, "Loop switches"); nil runs them
	// unswitched.
	Switches *loopSwitches
	// LogRetention removes old log chunks, objects and rows (nil without
	// CHALUPA_LOGS_URL: not run; docs/operations.md, "Logs").
	LogRetention *logs.Retention
	// Disk is the free-space guard the storage-health loop measures and
	// records events for (nil: the loop is not run).
	Disk *storage.DiskGuard
	// Alerter delivers the detectors' alerts (nil: not run); it runs with
	// no sink configured too, recording alerts and sending nothing
	// (docs/operations.md, "Alerts").
	Alerter *alerter.Alerter
	// Digest sends the daily alert digest (nil: not run; only with
	// CHALUPA_ALERT_DIGEST set, so no timer runs without it).
	Digest *digest.Digest
	// Tokens checks the DigitalOcean tokens at start and hourly (nil: not
	// run; docs/operations.md, "Alerts").
	Tokens *tokenChecks
	// StorageAlerts reports the storage detectors' conditions
	// (storage-unavailable, disk-low from the storage-health loop;
	// replica-failing, replica-refused from the replica watch); nil
	// reports nothing (docs/operations.md, "Alerts").
	StorageAlerts *storageAlerts
	// Replication is the replicator the replica watch reads (nil, or
	// StorageAlerts nil: no watch).
	Replication *storage.Replicator
}

// registeredLoops is the one list of the background loops the daemon runs,
// built from d with their metrics registered on d.Metrics. A new loop is
// added here and nowhere else: it gets the supervisor's restarts and the
// shutdown order with the others. Errors: a metric registration failure
// (registering the same loops twice on one registry).
func registeredLoops(d LoopDeps) ([]Loop, error) {
	prune, err := ingest.NewPruneMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	retentionMetrics, err := telemetry.NewRetentionMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	retention := d.Retention
	if retention == nil {
		retention = &telemetry.Retention{DB: d.DB, Clock: d.Clock, Log: d.Log}
	}
	retention.SetMetrics(retentionMetrics)
	costMetrics, err := cost.NewMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	// Ingest's loops are never switched: pausing a loop must not stop
	// ingest (docs/operations.md, "Loop switches").
	switched := func(name string, l Loop) Loop {
		if d.Switches == nil {
			return l
		}
		return &pausable{Loop: l, name: name, sw: d.Switches, log: d.Log}
	}
	quotaEvents := &ingest.QuotaEventWriter{DB: d.DB, Events: d.QuotaEvents, Log: d.Log}
	if d.Ingest != nil && d.Alerter != nil {
		// It also reports quota-exceeded (docs/operations.md, "Alerts").
		quotaEvents.Service, quotaEvents.Alerts = d.Ingest, d.Alerter
	}
	loops := []Loop{
		&ingest.NoncePruner{DB: d.DB, Clock: d.Clock, Log: d.Log, Metrics: prune, Activity: d.NonceActivity, Ledger: d.NonceLedger},
		quotaEvents,
		switched(LoopRetention, retention),
	}
	if d.Ingest != nil {
		// Never switched: it only records events, and holds nothing
		// (docs/operations.md, "Heartbeats and deadlines").
		loops = append(loops, &ingest.OffsetWatch{Service: d.Ingest, DB: d.DB, Clock: d.Clock, Log: d.Log})
	}
	if d.Costs != nil {
		// Only with DIGITALOCEAN_READ_TOKEN set: without it there is no
		// inventory to reconcile (docs/operations.md, "Cost reconciliation").
		d.Costs.SetMetrics(costMetrics)
		loops = append(loops, switched(LoopCosts, d.Costs))
	}
	if d.Reaper != nil && d.Reaper.Configured() {
		loops = append(loops, switched(LoopReaper, d.Reaper))
	}
	if d.Jobs != nil {
		// Event-driven: woken on enqueue; it recovers a previous
		// instance's dead jobs before claiming (docs/operations.md, "Jobs").
		loops = append(loops, switched(LoopJobs, d.Jobs))
	}
	if d.JobWatch != nil {
		loops = append(loops, d.JobWatch)
	}
	if d.Disk != nil {
		// Never switched: it keeps readiness and the disk_low guard
		// honest (docs/operations.md, "Storage and the writer").
		loops = append(loops, &storageHealth{db: d.DB, disk: d.Disk, clock: d.Clock, log: d.Log, alerts: d.StorageAlerts})
	}
	loops = append(loops, alertLoops(d)...)
	if d.LogRetention != nil {
		// Under the retention switch with telemetry's: both delete on
		// their own schedule (docs/operations.md, "Loop switches").
		loops = append(loops, switched(LoopRetention, d.LogRetention))
	}
	return loops, nil
}

// alertLoops are the loops that only report or deliver alerts, in
// registration order: the replica watch, the alerter, the digest and the
// token checks. None is switched: pausing a loop must not silence the
// operator (docs/operations.md, "Alerts").
func alertLoops(d LoopDeps) []Loop {
	var loops []Loop
	if d.Replication != nil && d.StorageAlerts != nil {
		// Never switched: it only reports conditions
		// (docs/operations.md, "Alerts").
		loops = append(loops, &replicaWatch{repl: d.Replication, alerts: d.StorageAlerts, clock: d.Clock, db: d.DB, log: d.Log})
	}
	if d.Alerter != nil {
		// Never switched: pausing a loop must not silence the operator
		// (docs/operations.md, "Alerts").
		loops = append(loops, alerterLoop{d.Alerter})
	}
	if d.Digest != nil {
		// Never switched, like the alerter (docs/operations.md, "Alerts").
		loops = append(loops, d.Digest)
	}
	if d.Tokens != nil && len(d.Tokens.checkers) > 0 {
		// Never switched: it writes nothing at DigitalOcean, and finds a
		// refused token before a destroy needs it (docs/operations.md,
		// "Alerts").
		loops = append(loops, d.Tokens)
	}
	return loops
}
