// Package daemon wires chalupa's process: configuration, the assembled App
// (open → migrate → master-key check → replication → services), the HTTP
// route groups with their authentication, the admin operations' domain
// handler sets, the loop registry and supervisor, and the shutdown order
// (docs/architecture.md).
package daemon

import (
	"cmp"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/jonboulle/clockwork"
	"github.com/julienschmidt/httprouter"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/digest"
	"github.com/chalupa-run/chalupa/console"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/pulumiexec/doctor"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// Server is the HTTP side of a running daemon: the router, its route groups
// and the handler sets behind them.
type Server struct {
	cfg    *Config
	db     *storage.DB
	repl   *storage.Replicator
	ingest *ingest.Service
	log    zerolog.Logger
	clock  clockwork.Clock
	m      *metrics
	router *httprouter.Router
	routes []Route
	ops    *operations
	// retention is the retention worker, shared by adminRunRetention and
	// the retention loop (StartLoops) so their passes never overlap.
	retention *telemetry.Retention
	// costs is the cost reconciler (nil without DIGITALOCEAN_READ_TOKEN),
	// shared by adminReconcileCosts and its loop.
	costs *cost.Reconciler
	// reaper is the reaper loop, shared by its admin operations and the
	// loop registry; it alone holds the DigitalOcean write token.
	reaper *reaper.Reaper
	// alerter records and delivers alerts; its loop runs it.
	alerter *alerter.Alerter
	// digest is the daily alert digest (nil: off); its loop runs it.
	digest *digest.Digest
	// tokens checks the DigitalOcean tokens; its loop runs it.
	tokens *tokenChecks
	// storageAlerts reports the storage detectors' conditions; the
	// storage-health loop and the replica watch share it.
	storageAlerts *storageAlerts
	// jobRunner is the converge job lane (nil without an executor: not
	// run); jobWatch the offline watch; jobs what the admin API calls.
	jobRunner *jobs.Runner
	jobWatch  *jobs.Watch
	jobs      *jobs.Service
	// rollouts runs agent upgrades and rollouts; App.Close closes it
	// before the database.
	rollouts *agentrollout.Manager
	// switches are the loop switches (docs/operations.md, "Loop
	// switches"), shared by their admin operations and the loop registry.
	switches *loopSwitches
	// stats are the hourly request statistics (docs/operations.md,
	// "Operations report"), written by App.Close at shutdown.
	stats *requestStats
	// console answers the router's 404s and 405s for console paths (and
	// for unknown paths a browser asks for) as HTML pages
	// (docs/operations.md, "Console").
	console *console.Console

	// ingestInFlight counts signed-ingest requests being served;
	// ingestLimit is maxIngestInFlight (lowered only by tests).
	// logs is the log broker (nil without CHALUPA_LOGS_URL).
	logs *logs.Broker

	ingestInFlight atomic.Int64
	ingestLimit    int64

	// disk is the free-space guard on the data directory's filesystem
	// (docs/operations.md, "Quotas"): signed ingest other than heartbeats
	// is refused 503 disk_low while it holds.
	disk *storage.DiskGuard
}

// serverDeps are what a Server serves: an opened, migrated database, its running
// replicator, and the ingest key ring (proven against the master key).
type serverDeps struct {
	Config     *Config
	DB         *storage.DB
	Replicator *storage.Replicator
	Keys       *ingest.Keyring
	// ProviderTokens stores and opens customer provider tokens (the same
	// master-key sealer as Keys).
	ProviderTokens *ingest.ProviderTokens
	// Sealer is the master-key sealer; the SSH identity of key delivery
	// is sealed with it.
	Sealer *envelope.Sealer
	Log    zerolog.Logger
	// Clock judges X-Chalupa-Timestamp skew, stamps writes and measures
	// uptime (the App's; never nil).
	Clock clockwork.Clock
	// Executor runs converge jobs; nil: converge is not configured.
	Executor jobs.Executor
	// Statfs measures the data directory's filesystem for the free-space
	// guard; nil means storage.Statfs.
	Statfs storage.StatfsFunc
}

// newServer builds the server over the workers App.open built (workers.go):
// every route group with its authentication, and every admin operation's
// handler from the domain handler sets; it builds no worker. Errors: a
// worker's metrics refused by the server's registry, or an operation of
// adminapi.Operations without a handler (the daemon refuses to start rather
// than answer 404 for it).
func newServer(d serverDeps, w *workers) (*Server, error) {
	s := &Server{cfg: d.Config, db: d.DB, repl: d.Replicator, log: d.Log, clock: d.Clock, ingestLimit: maxIngestInFlight,
		disk: w.disk, logs: w.logs, ingest: w.ingest, retention: w.retention, costs: w.costs, reaper: w.reaper, alerter: w.alerter, digest: w.digest,
		tokens:    w.tokens,
		jobRunner: w.jobRunner, jobWatch: w.jobWatch, jobs: w.jobs, switches: w.switches, rollouts: w.rollouts, storageAlerts: w.storageAlerts}
	s.m = newMetrics(s)
	if err := w.collectors.register(s.m.reg); err != nil {
		return nil, err
	}
	s.stats = newRequestStats(d.DB, d.Clock, d.Log, processCPU)
	s.router = newRouter(s)

	// Public and probe routes.
	s.public("GET", "/api/health", s.handleHealth)
	s.probe("GET", "/api/ready", s.handleReady)
	s.probe("GET", "/metrics", s.m.handler().ServeHTTP)

	// Signed ingest: ingest's route table, each route behind the group.
	for _, rt := range ingest.Routes {
		s.signed(rt)
	}

	if err := s.registerAdmin(d, w); err != nil {
		return nil, err
	}
	s.registerConsole(d, w)
	return s, nil
}

// billingRule is the configured billing rule (cost.DefaultRule for a
// Config built without LoadConfig).
func (s *Server) billingRule() cost.Rule {
	if s.cfg.Costs.BillingRule == (cost.Rule{}) {
		return cost.DefaultRule
	}
	return s.cfg.Costs.BillingRule
}

// registerAdmin registers the admin operations, one handler set per
// domain, each holding only its own dependencies, and the OpenAPI
// document. Errors: an operation without a handler; the document.
func (s *Server) registerAdmin(d serverDeps, w *workers) error {
	clock := d.Clock
	loopsH := &loopHandlers{sw: s.switches, configured: s.loopConfigured}
	s.ops = newOperations()
	(&statusHandlers{db: d.DB, repl: d.Replicator, clock: clock, started: clock.Now(), loops: loopsH.wire, disk: s.disk, guard: w.guard,
		offset: w.ingest.ClockOffset, cfg: d.Config, tokens: w.tokens, alerter: s.alerter}).register(s.ops)
	loopsH.register(s.ops)
	(&environmentHandlers{db: d.DB, clock: clock, deadlines: s.ingest.DeadlineActivity(),
		storageBudget: s.ingest.Quotas().EnvironmentStorageBytes}).register(s.ops)
	(&organizationHandlers{db: d.DB, tokens: d.ProviderTokens, clock: clock}).register(s.ops)
	(&ingestKeyHandlers{keys: d.Keys, db: d.DB, delivery: &pulumiexec.KeyDelivery{DB: d.DB, Keys: d.Keys, Sealer: d.Sealer, Clock: clock,
		Port: cmp.Or(d.Config.Converge.SSHPort, DefaultSSHPort), Log: d.Log.With().Str("component", "key-rotation").Logger()}}).register(s.ops)
	(&fleetHandlers{db: d.DB}).register(s.ops)
	(&sshKeyHandlers{db: d.DB, sealer: d.Sealer, clock: clock}).register(s.ops)
	(&deploymentHandlers{db: d.DB, clock: clock}).register(s.ops)
	(&retentionHandlers{db: d.DB, retention: s.retention}).register(s.ops)
	(&telemetryHandlers{
		eraser: &telemetry.Eraser{DB: d.DB, Clock: clock},
		perf:   &telemetry.PerformanceReader{DB: d.DB, Clock: clock},
	}).register(s.ops)
	(&costHandlers{db: d.DB, clock: clock, rec: s.costs, rule: s.billingRule()}).register(s.ops)
	(&reaperHandlers{reaper: s.reaper, mode: d.Config.Reaper.Mode, tokenSet: d.Config.Reaper.token() != ""}).register(s.ops)
	(&eventHandlers{db: d.DB}).register(s.ops)
	(&runHandlers{db: d.DB}).register(s.ops)
	(&boxHandlers{db: d.DB, clock: clock}).register(s.ops)
	(&agentUpgradeHandlers{db: d.DB, release: d.Config.Converge.AgentRelease, rollouts: w.rollouts, log: d.Log}).register(s.ops)
	(&jobHandlers{db: d.DB, svc: s.jobs, log: d.Log}).register(s.ops)
	dr := &doctor.Doctor{DB: d.DB, Clock: clock, Log: d.Log,
		LanePaused: func() bool { p, _ := s.switches.paused(LoopJobs); return p }}
	if insp, ok := d.Executor.(doctor.Inspector); ok && s.jobRunner != nil {
		dr.Inspector, dr.Instance = insp, s.jobRunner.InstanceID()
	}
	(&doctorHandlers{doc: dr}).register(s.ops)
	(&consoleHandlers{db: d.DB, clock: clock}).register(s.ops)
	(&logHandlers{db: d.DB, broker: s.logs, clock: clock}).register(s.ops)
	(&reportHandlers{db: d.DB, clock: clock, stats: s.stats, repl: d.Replicator}).register(s.ops)
	(&alertHandlers{al: s.alerter}).register(s.ops)
	if err := s.ops.complete(); err != nil {
		return err
	}
	for _, rt := range s.ops.routes() {
		s.admin(rt.method, rt.path, s.ops.serve(s, rt))
	}
	// The document is a pure function of the table: built once.
	doc, err := OpenAPI(buildinfo.Version)
	if err != nil {
		return err
	}
	s.admin(http.MethodGet, OpenAPIPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	})
	return nil
}

// registerConsole mounts the console on the same listener, reading through
// the same services (docs/operations.md, "Console").
func (s *Server) registerConsole(d serverDeps, w *workers) {
	rule := s.billingRule()
	if s.costs != nil {
		rule = s.costs.Rule()
	}
	var logStore logs.Store
	if s.logs != nil {
		logStore = s.logs.Store()
	}
	cfg := d.Config
	s.console = console.New(console.Deps{DB: d.DB, Logs: logStore, Perf: &telemetry.PerformanceReader{DB: d.DB, Clock: d.Clock}, Jobs: s.jobs,
		Replication: d.Replicator.Health, CostRule: rule, StorageBudget: s.ingest.Quotas().EnvironmentStorageBytes, AgentRelease: cfg.Converge.AgentRelease,
		Version: buildinfo.Version, Origin: cfg.HTTP.Origin, TrustedProxies: cfg.HTTP.TrustedProxies, Clock: d.Clock, Log: d.Log,
		ClockWarning:  func() string { return clockWarning(w.guard.Evaluate()) },
		OffsetWarning: func() string { return offsetWarning(w.ingest.ClockOffset()) }, ModeWarning: strings.Join(cfg.ModeNotes(), "; "),
		StorageWarning: func() string { return storageWarning(d.DB.Writer, w.disk, w.storageAlerts) }})
	for _, rt := range s.console.Routes() {
		s.handle(GroupConsole, rt.Method, rt.Pattern, rt.Handler)
	}
}

// loopConfigured reports whether this daemon runs the switchable loop name
// at all (its credentials or executor are configured).
func (s *Server) loopConfigured(name string) bool {
	switch name {
	case LoopReaper:
		return s.reaper != nil && s.reaper.Configured()
	case LoopRetention:
		return true
	case LoopCosts:
		return s.costs != nil
	case LoopJobs:
		return s.jobRunner != nil
	}
	return false
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.router }

// Routes lists every registered route with its group, in registration order.
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }
