package daemon

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/storage"
)

// metrics are the daemon's Prometheus series, served on GET /metrics
// (text exposition format, CHALUPA_READY_TOKEN bearer). Each Server owns its
// registry so several daemons can run in one test process.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// sharedKey counts requests on the deprecated shared-key path.
	sharedKey prometheus.Counter
	// ingest counts ingest outcomes by route and code.
	ingest *prometheus.CounterVec
	// shed counts ingest requests answered 503 overloaded.
	shed prometheus.Counter
	// quotaRefused counts ingest requests refused by a quota, by quota
	// (docs/operations.md, "Quotas").
	quotaRefused *prometheus.CounterVec
}

// newMetrics builds s's registry: the HTTP and ingest families, the
// writer's and replication's, the configured modes, storage and disk, and
// the Go runtime and process collectors.
func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.registerHTTP()
	m.registerIngest(s)
	m.reg.MustRegister(writerMetrics(s.db)...)
	m.reg.MustRegister(replicationMetrics(s)...)
	m.reg.MustRegister(modeMetrics(s.cfg)...)
	m.reg.MustRegister(storageMetrics(s)...)
	m.reg.MustRegister(offsetCollector{estimate: s.ingest.ClockOffset})
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(buildInfoMetric())
	return m
}

// buildInfoMetric is chalupa_build_info, constant 1, whose labels say which
// build answers: the release version, the VCS commit, the Go version and the
// linked Litestream module's version (docs/operations.md, "Metrics"). Each
// label has one value per binary, so the series is one.
func buildInfoMetric() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chalupa_build_info",
		Help: "Always 1; the labels name the running build: release version, VCS commit, Go version, linked Litestream version.",
		ConstLabels: prometheus.Labels{
			"version":            buildinfo.Version,
			"commit":             buildinfo.Commit(),
			"go_version":         runtime.Version(),
			"litestream_version": buildinfo.LinkedLitestreamVersion(),
		},
	})
	g.Set(1)
	return g
}

// registerHTTP registers every route's request count and latency.
func (m *metrics) registerHTTP() {
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chalupa_http_requests_total",
		Help: "HTTP requests by route pattern, method and status code.",
	}, []string{"route", "method", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "chalupa_http_request_duration_seconds",
		Help:    "HTTP request latency in seconds by route pattern.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"route"})
	m.reg.MustRegister(m.requests, m.latency)
}

// registerIngest registers the signed-ingest families: outcomes, the
// shared key, shedding and the in-flight bound, quota refusals (every
// quota's series from the start, at 0; docs/operations.md, "Quotas") and
// the log grants.
func (m *metrics) registerIngest(s *Server) {
	m.sharedKey = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chalupa_ingest_shared_key_requests_total",
		Help: "Requests authenticated with the deprecated shared CHALUPA_INGEST_KEY (no key id).",
	})
	m.ingest = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chalupa_ingest_results_total",
		Help: "Signed ingest outcomes by route and result code (accepted or the refusal code).",
	}, []string{"route", "result"})
	m.shed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chalupa_ingest_shed_total",
		Help: "Signed ingest requests answered 503 overloaded because the in-flight bound was reached.",
	})
	m.quotaRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chalupa_ingest_quota_refused_total",
		Help: "Signed ingest requests refused by a deployment or environment quota, by quota.",
	}, []string{"quota"})
	for _, q := range ingest.QuotaNames {
		m.quotaRefused.WithLabelValues(q)
	}
	m.reg.MustRegister(m.sharedKey, m.ingest, m.shed, m.quotaRefused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_ingest_in_flight", Help: fmt.Sprintf("Signed ingest requests being served now (bound: %d).", maxIngestInFlight),
		}, func() float64 { return float64(s.ingestInFlight.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chalupa_log_grants_total", Help: "Presigned log upload grants signed since start (docs/operations.md, \"Logs\").",
		}, func() float64 { return float64(s.ingest.LogGrants()) }))
}

// writerMetrics are the single writer's families: lock wait and COMMIT
// time (observed through the writer's timing hook), commits and units.
func writerMetrics(db *storage.DB) []prometheus.Collector {
	writerBuckets := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	lockWait := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "chalupa_writer_lock_wait_seconds",
		Help:    "Time a writer batch's BEGIN waited for the write lock held by another connection (Litestream sealing the WAL to checkpoint), in seconds; one observation per batch that waited.",
		Buckets: writerBuckets,
	})
	commitTime := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "chalupa_writer_commit_seconds",
		Help:    "Time of each writer COMMIT (WAL append and fsync), in seconds.",
		Buckets: writerBuckets,
	})
	db.Writer.SetTimingHook(func(t storage.BatchTiming) {
		if t.LockWait > 0 {
			lockWait.Observe(t.LockWait.Seconds())
		}
		commitTime.Observe(t.Commit.Seconds())
	})
	return []prometheus.Collector{lockWait, commitTime,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chalupa_writer_commits_total", Help: "Write transactions committed by the single writer.",
		}, func() float64 { c, _ := db.Writer.Stats(); return float64(c) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chalupa_writer_units_total", Help: "Units of work committed by the writer (units/commits = mean batch).",
		}, func() float64 { _, u := db.Writer.Stats(); return float64(u) }),
	}
}

// replicationMetrics are the replicator's families: the commit-to-replica
// delay (observed through its hook) and its health read at each scrape
// (docs/operations.md, "Replication").
func replicationMetrics(s *Server) []prometheus.Collector {
	replicated := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "chalupa_replication_commit_delay_seconds",
		Help:    "Time from each writer COMMIT to the end of the sync that put it in the replica, in seconds (one observation per COMMIT).",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	s.repl.SetReplicatedHook(func(d time.Duration) { replicated.Observe(d.Seconds()) })
	health := func() storage.ReplicationHealth { return s.repl.Health(s.clock.Now()) }
	return []prometheus.Collector{replicated,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_replication_lag_seconds", Help: "Age of the oldest local change not yet in the replica, in seconds.",
		}, func() float64 { return health().LagSeconds }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chalupa_replication_sync_errors_total", Help: "Sync attempts with the replica that failed since start.",
		}, func() float64 { return float64(health().SyncErrors) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_replication_failing", Help: "1 while replication lag or errors exceed the lag limit.",
		}, func() float64 { return one(health().Failing) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_replication_refused", Help: "1 while the replica path holds another database's history and nothing is written to it (docs/operations.md, \"Replication\").",
		}, func() float64 { return one(health().Refused != "") }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chalupa_replication_reseeds_total", Help: "Times since start a replica with no restorable history was re-seeded with a fresh snapshot.",
		}, func() float64 { return float64(health().Reseeds) }),
	}
}

// offsetDesc is chalupa_clock_offset_seconds{scope}: scope "fleet", and
// "env:<slug>" for each environment ingest.OffsetEstimate lists (at most
// ingest.MaxOffsetEnvironments), so the family has at most 17 series
// whatever keys send; "env:" keeps a slug named fleet apart.
var offsetDesc = prometheus.NewDesc("chalupa_clock_offset_seconds",
	"The server clock's offset from the fleet's, median of receivedAt − sentAt over signed heartbeats of ≥ 5 deployments in 10 min, in seconds (positive: the server is ahead); absent while not measured (docs/operations.md, \"Heartbeats and deadlines\").",
	[]string{"scope"}, nil)

// offsetCollector reads the clock offset's estimate at each scrape.
type offsetCollector struct {
	estimate func() ingest.OffsetEstimate
}

// Describe sends offsetDesc.
func (offsetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- offsetDesc }

// Collect sends the fleet's series and each listed environment's, none
// while the offset is not measured.
func (c offsetCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.estimate()
	if !e.Measured {
		return
	}
	ch <- prometheus.MustNewConstMetric(offsetDesc, prometheus.GaugeValue, e.Fleet.Offset.Seconds(), "fleet")
	for _, env := range e.Environments {
		ch <- prometheus.MustNewConstMetric(offsetDesc, prometheus.GaugeValue, env.Offset.Seconds(), "env:"+env.Environment)
	}
}

// modeMetrics are the reaper's and costs' modes, one series each, 1 for
// the mode in force (docs/operations.md, "Configuration").
func modeMetrics(c *Config) []prometheus.Collector {
	reaperMode := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chalupa_reaper_mode", Help: "1 for the reaper's mode (CHALUPA_REAPER: live, dry-run or off), 0 for the others.",
	}, []string{"mode"})
	for _, mode := range ReaperModes {
		reaperMode.WithLabelValues(mode).Set(one(mode == c.Reaper.Mode))
	}
	costsMode := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chalupa_costs_mode", Help: "1 for the cost reconciler's mode (CHALUPA_COSTS: on or off), 0 for the other.",
	}, []string{"mode"})
	for _, mode := range []string{CostsOn, CostsOff} {
		costsMode.WithLabelValues(mode).Set(one(mode == onOff(c.Costs.On)))
	}
	return []prometheus.Collector{reaperMode, costsMode}
}

// storageMetrics are the database's size, the writer's storage faults and
// the free-space guard (docs/operations.md, "Storage and the writer",
// "Quotas").
func storageMetrics(s *Server) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_db_size_bytes", Help: "SQLite database file plus WAL, in bytes.",
		}, func() float64 { return float64(s.db.Size()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_storage_failing", Help: "1 while the writer's commits fail for storage reasons (disk full, I/O error, read-only file system); /api/ready answers 503 then.",
		}, func() float64 { _, failing := s.db.Writer.Failing(); return one(failing) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chalupa_storage_faults_total", Help: "Writer batches that met a storage fault since start.",
		}, func() float64 { return float64(s.db.Writer.StorageHealth().Faults) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_disk_free_bytes", Help: "Free space on the data directory's filesystem, in bytes (measured at most every 5 s).",
		}, func() float64 { return float64(s.disk.Check().FreeBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_disk_min_free_bytes", Help: "The free-space floor in force (CHALUPA_MIN_FREE_BYTES), in bytes; 0 is off.",
		}, func() float64 { return float64(s.disk.Check().MinFreeBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chalupa_disk_low", Help: "1 from free space falling below the floor until it is back above the floor plus its margin: signed ingest other than heartbeats is refused 503 disk_low.",
		}, func() float64 { return one(s.disk.Check().Low) }),
	}
}

// one is a boolean gauge's value: 1 for true, 0 for false.
func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// knownMethod returns method if it is a standard HTTP method, else "other":
// the method is client input, and as a label (or a log field) each new value
// would be a new series held for the process's life.
func knownMethod(method string) string {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
		return method
	}
	return "other"
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) observe(route, method string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, knownMethod(method), strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}
