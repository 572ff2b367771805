// Package daemon wires chalupa's process: configuration, the assembled App
// (open → migrate → master-key check → replication → services), the HTTP
// route groups with their authentication, the admin operations' domain
// handler sets, the loop registry and supervisor, and the shutdown order
// (docs/architecture.md).
package daemon

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/jonboulle/clockwork"
	"github.com/julienschmidt/httprouter"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/console"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/pulumiexec/doctor"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
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
	// jobRunner is the converge job lane (nil without an executor: not
	// run); jobWatch the offline watch; jobs what the admin API calls.
	jobRunner *jobs.Runner
	jobWatch  *jobs.Watch
	jobs      *jobs.Service
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
	// uptime; nil means the real clock.
	Clock clockwork.Clock
	// Executor runs converge jobs; nil: converge is not configured.
	Executor jobs.Executor
	// Statfs measures the data directory's filesystem for the free-space
	// guard; nil means storage.Statfs.
	Statfs storage.StatfsFunc
}

// newServer builds the server: every route group with its authentication,
// and every admin operation's handler from the domain handler sets. Errors:
// an operation of adminapi.Operations without a handler (the daemon refuses
// to start rather than answer 404 for it).
func newServer(d serverDeps) (*Server, error) {
	clock := d.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	s := &Server{cfg: d.Config, db: d.DB, repl: d.Replicator, log: d.Log, clock: clock, ingestLimit: maxIngestInFlight,
		disk: storage.NewDiskGuard(storage.DiskGuardConfig{Path: d.Config.DataDir, MinFreeBytes: d.Config.MinFreeBytes, Statfs: d.Statfs})}
	var shared []byte
	if d.Config.IngestKey != "" {
		shared = []byte(d.Config.IngestKey.Reveal())
	}
	read, err := newReadClient(d.Config, clock, d)
	if err != nil {
		return nil, err
	}
	var customers *reaper.CustomerTokens
	if d.ProviderTokens != nil {
		customers = &reaper.CustomerTokens{Source: d.ProviderTokens, BaseURL: d.Config.DOAPIURL, Version: buildinfo.Version, Clock: clock, Log: d.Log}
	}
	var droplets ingest.DropletLookup
	if read != nil || customers != nil {
		var platform digitalocean.DropletAPI
		if read != nil {
			platform = read
		}
		droplets = dropletLookup(d.DB, platform, customers)
	}
	s.logs = newLogBroker(d.Config, clock)
	// One clock guard hears ingest's contact and holds the reaper
	// (docs/operations.md, "Reaper"); ingest never imports the reaper.
	guard := clockguard.New(clock)
	s.ingest = ingest.NewService(ingest.Config{DB: d.DB, Keys: d.Keys, SharedKey: shared, Clock: clock, Log: d.Log,
		Quotas: d.Config.IngestQuotas(), Droplets: droplets, Logs: s.logs, Contact: guard})
	s.m = newMetrics(s)
	s.stats = newRequestStats(d.DB, clock, d.Log, processCPU)
	s.router = newRouter(s)
	if s.switches, err = newLoopSwitches(context.Background(), d.DB, clock, d.Log, s.m.reg); err != nil {
		return nil, err
	}
	loopsH := &loopHandlers{sw: s.switches, configured: s.loopConfigured}
	if s.reaper, err = newReaper(d.Config, d.DB, s.ingest, guard, clock, d.Log, s.m.reg, customers); err != nil {
		return nil, err
	}

	// Public and probe routes.
	s.public("GET", "/api/health", s.handleHealth)
	s.probe("GET", "/api/ready", s.handleReady)
	s.probe("GET", "/metrics", s.m.handler().ServeHTTP)

	// Signed ingest: ingest's route table, each route behind the group.
	for _, rt := range ingest.Routes {
		s.signed(rt)
	}

	// Admin operations, one handler set per domain, each holding only its
	// own dependencies.
	s.ops = newOperations()
	(&statusHandlers{db: d.DB, repl: d.Replicator, clock: clock, started: clock.Now(), loops: loopsH.wire, disk: s.disk, guard: guard, cfg: d.Config}).register(s.ops)
	loopsH.register(s.ops)
	(&environmentHandlers{db: d.DB, clock: clock, deadlines: s.ingest.DeadlineActivity(),
		storageBudget: s.ingest.Quotas().EnvironmentStorageBytes}).register(s.ops)
	(&organizationHandlers{db: d.DB, tokens: d.ProviderTokens, clock: clock}).register(s.ops)
	(&ingestKeyHandlers{keys: d.Keys}).register(s.ops)
	(&fleetHandlers{db: d.DB}).register(s.ops)
	(&sshKeyHandlers{db: d.DB, sealer: d.Sealer, clock: clock}).register(s.ops)
	(&deploymentHandlers{db: d.DB, clock: clock}).register(s.ops)
	s.retention = &telemetry.Retention{DB: d.DB, Clock: clock, Log: d.Log}
	(&retentionHandlers{db: d.DB, retention: s.retention}).register(s.ops)
	(&telemetryHandlers{
		eraser: &telemetry.Eraser{DB: d.DB, Clock: clock},
		perf:   &telemetry.PerformanceReader{DB: d.DB, Clock: clock},
	}).register(s.ops)
	costs, err := newCostReconciler(d.Config, read, d.DB, clock, d, customers)
	if err != nil {
		return nil, err
	}
	s.costs = costs
	billing := d.Config.BillingRule
	if billing == (cost.Rule{}) { // a Config built without LoadConfig
		billing = cost.DefaultRule
	}
	(&costHandlers{db: d.DB, clock: clock, rec: s.costs, rule: billing}).register(s.ops)
	(&reaperHandlers{reaper: s.reaper, mode: d.Config.ReaperMode}).register(s.ops)
	(&eventHandlers{db: d.DB}).register(s.ops)
	(&runHandlers{db: d.DB}).register(s.ops)
	s.jobWatch = jobs.NewWatch(d.DB, clock, d.Log)
	if d.Executor != nil {
		// The instance id locks this process's jobs: serve holds the data
		// dir lock, so a job locked by another id is provably dead
		// (docs/operations.md, "Jobs").
		s.jobRunner = jobs.NewRunner(jobs.RunnerConfig{DB: d.DB, Clock: clock, Log: d.Log, Executor: d.Executor,
			InstanceID: ulid.Make().String(), Version: buildinfo.Version})
	} else {
		d.Log.Warn().Msg(convergeOffMessage)
	}
	s.jobs = jobs.NewService(d.DB, clock, s.jobRunner, s.jobWatch)
	if s.jobRunner != nil {
		s.jobs.SetAdmit(agentAdmission(d.Config.AgentRelease))
	}
	(&boxHandlers{db: d.DB, clock: clock}).register(s.ops)
	(&agentUpgradeHandlers{db: d.DB, clock: clock, release: d.Config.AgentRelease, port: cmp.Or(d.Config.SSHPort, DefaultSSHPort), log: d.Log,
		deliverer: sshdeliver.New(d.DB, d.Sealer, clock)}).register(s.ops)
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
	if err := s.ops.complete(); err != nil {
		return nil, err
	}
	for _, rt := range s.ops.routes() {
		s.admin(rt.method, rt.path, s.ops.serve(s, rt))
	}
	// The document is a pure function of the table: built once.
	doc, err := OpenAPI(buildinfo.Version)
	if err != nil {
		return nil, err
	}
	s.admin(http.MethodGet, OpenAPIPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	})

	// The console, on the same listener, reading through the same
	// services (docs/operations.md, "Console").
	rule := billing
	if s.costs != nil {
		rule = s.costs.Rule()
	}
	var logStore logs.Store
	if s.logs != nil {
		logStore = s.logs.Store()
	}
	con := console.New(console.Deps{DB: d.DB, Logs: logStore, Perf: &telemetry.PerformanceReader{DB: d.DB, Clock: clock}, Jobs: s.jobs,
		Replication: d.Replicator.Health, CostRule: rule, StorageBudget: s.ingest.Quotas().EnvironmentStorageBytes, AgentRelease: d.Config.AgentRelease, Version: buildinfo.Version, Origin: d.Config.Origin,
		TrustedProxies: d.Config.TrustedProxies, Clock: clock, Log: d.Log, ClockWarning: func() string { return clockWarning(guard.Evaluate()) },
		ModeWarning: strings.Join(d.Config.ModeNotes(), "; ")})
	s.console = con
	for _, rt := range con.Routes() {
		s.handle(GroupConsole, rt.Method, rt.Pattern, rt.Handler)
	}
	return s, nil
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

// newLogBroker returns the log broker on CHALUPA_LOGS_URL with the log
// credentials alone, or nil when it is unset (docs/operations.md, "Logs").
func newLogBroker(c *Config, clock clockwork.Clock) *logs.Broker {
	if c.LogsURL == "" {
		return nil
	}
	store := logs.NewS3(c.LogsLocation, c.LogsKey.Reveal(), c.LogsSecret.Reveal(), clock)
	return logs.NewBroker(store, c.LogsLocation, logs.Limits{})
}

// logRetention is the log retention loop, holding only the log store
// (nil without CHALUPA_LOGS_URL).
func (s *Server) logRetention() *logs.Retention {
	if s.logs == nil {
		return nil
	}
	return &logs.Retention{DB: s.db, Store: s.logs.Store(), Clock: s.clock, Log: s.log, Age: s.cfg.LogsRetention}
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.router }

// Routes lists every registered route with its group, in registration order.
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }
