package daemon

import (
	"context"
	"errors"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/digest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// workers are what the daemon runs behind its routes: the services the
// handlers call and the loops StartLoops runs. App.open builds them, each
// beside its configuration section (config_<section>.go), and hands them to
// newServer, which only registers the routes that reach them
// (docs/architecture.md).
type workers struct {
	// guard is the one clock guard: ingest feeds it contact, the reaper
	// holds on it (docs/operations.md, "Reaper"); ingest never imports the
	// reaper.
	guard *clockguard.Guard
	// disk is the free-space guard on the data directory's filesystem
	// (docs/operations.md, "Quotas").
	disk *storage.DiskGuard
	// customers opens customer organizations' own tokens (nil without the
	// provider-token store).
	customers *reaper.CustomerTokens
	// logs is the log broker (nil without CHALUPA_LOGS_URL).
	logs *logs.Broker
	// ingest is the signed-ingest service.
	ingest *ingest.Service
	// costs is the cost reconciler (nil without DIGITALOCEAN_READ_TOKEN or
	// with costs off).
	costs *cost.Reconciler
	// reaper is the reaper; it alone holds the DigitalOcean write token.
	reaper *reaper.Reaper
	// alerter records the detectors' conditions and delivers their
	// alerts to the configured sinks, none included (docs/operations.md,
	// "Alerts").
	alerter *alerter.Alerter
	// digest is the daily alert digest (nil when CHALUPA_ALERT_DIGEST is
	// unset: not run).
	digest *digest.Digest
	// tokens checks each DigitalOcean token through the worker that
	// holds it, at start and hourly (docs/operations.md, "Alerts").
	tokens *tokenChecks
	// storageAlerts reports storage-unavailable, disk-low, replica-failing
	// and replica-refused to the alerter (docs/operations.md, "Alerts").
	storageAlerts *storageAlerts
	// switches are the loop switches (docs/operations.md, "Loop switches").
	switches *loopSwitches
	// retention is the telemetry retention worker.
	retention *telemetry.Retention
	// jobRunner is the converge job lane (nil without an executor);
	// jobWatch the offline watch; jobs what the admin API calls.
	jobRunner *jobs.Runner
	jobWatch  *jobs.Watch
	jobs      *jobs.Service
	// rollouts runs agent upgrades and rollouts in the daemon's lifetime
	// (docs/operations.md, "Agent install", under Upgrade).
	rollouts *agentrollout.Manager
	// collectors are the workers' metrics, registered on the server's
	// registry by newServer.
	collectors *pendingCollectors
}

// buildWorkers builds every worker from d's configuration. Errors: a
// DigitalOcean client that cannot be built, the loop switches' read, a
// worker's metrics refused.
func buildWorkers(ctx context.Context, d serverDeps) (*workers, error) {
	cfg, clock, log := d.Config, d.Clock, d.Log
	w := &workers{guard: clockguard.New(clock), collectors: &pendingCollectors{reg: prometheus.NewRegistry()},
		disk: cfg.Disk.guard(cfg.DataDir, d.Statfs), logs: newLogBroker(cfg, clock),
		retention: &telemetry.Retention{DB: d.DB, Clock: clock, Log: log}}
	read, err := newReadClient(cfg, clock, log)
	if err != nil {
		return nil, err
	}
	w.customers = newCustomerTokens(d)
	if err := openClockMark(d.DB, w.guard, log); err != nil {
		return nil, err
	}
	w.ingest = newIngestService(d, dropletLookupFor(d.DB, read, w.customers), w.logs, w.guard)
	if w.costs, err = newCostReconciler(cfg, read, d.DB, clock, log, w.customers); err != nil {
		return nil, err
	}
	if w.alerter, err = newAlerter(cfg, d.DB, clock, log, w.collectors); err != nil {
		return nil, err
	}
	// The storage detectors: storage-health reports the writer's and the
	// disk's conditions, the replica watch the replicator's; an alert open
	// across a restart resolves at start when its condition no longer
	// holds (docs/operations.md, "Alerts").
	w.storageAlerts = newStorageAlerts(w.alerter, log)
	var repl replicaSource
	if d.Replicator != nil {
		repl = d.Replicator
	}
	if err := registerStorageChecks(w.alerter, d.DB, w.disk, repl, clock); err != nil {
		return nil, err
	}
	if w.reaper, err = newReaper(cfg, d.DB, w.ingest, w.guard, clock, log, w.collectors, w.customers, w.alerter); err != nil {
		return nil, err
	}
	if w.digest, err = newNotify(cfg, d.DB, clock, log, w); err != nil {
		return nil, err
	}
	if w.switches, err = newLoopSwitches(ctx, d.DB, clock, log, w.collectors); err != nil {
		return nil, err
	}
	w.jobRunner, w.jobWatch, w.jobs = newJobLane(d, w.alerter, w.boxChanged)
	if w.tokens, err = newTokenChecks(cfg, read, w.reaper, d.Executor, w.alerter, clock, log); err != nil {
		return nil, err
	}
	if w.rollouts, err = newRolloutManager(ctx, d, sshdeliver.New(d.DB, d.Sealer, clock), ulid.Make().String(), w.alerter); err != nil {
		return nil, err
	}
	if err := registerFleetChecks(w, d.DB, clock); err != nil {
		return nil, err
	}
	return w, nil
}

// pendingCollectors is the prometheus.Registerer workers register their
// metrics on while they are built, before the server's registry exists:
// each collector is checked on a registry of its own (so a duplicate is
// refused at once, as on the real one) and kept until register moves them
// all onto the server's.
type pendingCollectors struct {
	reg *prometheus.Registry
	cs  []prometheus.Collector
}

// Register checks c and keeps it. Errors: the check's.
func (p *pendingCollectors) Register(c prometheus.Collector) error {
	if err := p.reg.Register(c); err != nil {
		return err
	}
	p.cs = append(p.cs, c)
	return nil
}

// MustRegister is Register, panicking on an error.
func (p *pendingCollectors) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := p.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister forgets c.
func (p *pendingCollectors) Unregister(c prometheus.Collector) bool {
	for i, k := range p.cs {
		if k == c {
			p.cs = append(p.cs[:i], p.cs[i+1:]...)
			return p.reg.Unregister(c)
		}
	}
	return false
}

// register moves every kept collector onto reg. Errors: reg's, joined.
func (p *pendingCollectors) register(reg prometheus.Registerer) error {
	var errs []error
	for _, c := range p.cs {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}
