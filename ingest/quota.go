package ingest

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
)

// Quota defaults (docs/operations.md, "Quotas"). Keys are per environment
// and every droplet of an environment holds the same one, so quotas are per
// deployment, with bounds per environment on what one leaked key can write.
// Each signed write route has a deployment rate (sustained a minute, and a
// burst) and an environment rate (a one-minute bucket); the environment
// rates are sized for DefaultActiveDeployments honest deployments.
const (
	// DefaultHeartbeatsPerMinute is a deployment's sustained heartbeat
	// rate: six times an honest agent's one per 30 s, so retries and a
	// restarted agent never meet it.
	DefaultHeartbeatsPerMinute = 12
	// DefaultHeartbeatBurst is how many heartbeats a deployment may send
	// at once before the sustained rate applies: a restarted agent's catch
	// up plus retries of 5xx answers, with room to spare.
	DefaultHeartbeatBurst = 20
	// DefaultOpenSessions bounds a deployment's open telemetry sessions,
	// so one droplet cannot multiply telemetry identities (the telemetry
	// admission's own default and reason), and the sessions it may open
	// in any SessionOpeningWindow, so windows that each open and close
	// their own session (final: true) cannot either.
	DefaultOpenSessions = telemetry.DefaultOpenSessions
	// DefaultActiveDeployments bounds an environment's active deployments:
	// far more droplets than a solo operator runs at once, and a cap on
	// the deployment rows (and rate limiters) one leaked key can create.
	DefaultActiveDeployments = 100
	// DefaultEnvironmentHeartbeatsPerMinute bounds an environment's
	// heartbeats: 100 active deployments at the sustained rate is 1,200 a
	// minute, about 1.7 million rows a day at most from one leaked key,
	// against 138,000 a minute without it.
	DefaultEnvironmentHeartbeatsPerMinute = 1200

	// DefaultTelemetryPerMinute is a deployment's sustained rate of
	// telemetry windows: six times an honest agent's one a minute, so a
	// restart's final and first windows and retries never meet it.
	DefaultTelemetryPerMinute = 6
	// DefaultTelemetryBurst is two hours of minute windows
	// (protocol.MaxWindowAge): the whole spool of the longest outage
	// whose windows are still admitted replays at the agent's pace (5 a
	// second) without one refusal.
	DefaultTelemetryBurst = 120
	// DefaultEnvironmentTelemetryPerMinute is 100 deployments at the
	// sustained rate; after a one-hour outage of the whole environment
	// (6,000 spooled windows, 100 more a minute) it drains in about 11
	// minutes, well inside the 2-hour window age.
	DefaultEnvironmentTelemetryPerMinute = 600
	// DefaultLifecyclePerMinute is a deployment's sustained rate of
	// lifecycle events: an honest droplet reports a handful in its life
	// plus two per CI job; six a minute is a CI job every 20 s.
	DefaultLifecyclePerMinute = 6
	// DefaultLifecycleBurst holds an hour's spooled events of a droplet
	// running a CI job every five minutes (24), with room to spare.
	DefaultLifecycleBurst = 30
	// DefaultEnvironmentLifecyclePerMinute is 100 deployments each
	// starting and finishing a CI job a minute.
	DefaultEnvironmentLifecyclePerMinute = 240
	// DefaultRunsPerMinute is a deployment's sustained rate of run
	// reports: one per CI job, six a minute is a job every 10 s.
	DefaultRunsPerMinute = 6
	// DefaultRunBurst holds an hour's spooled reports of a runner finishing
	// a job every five minutes (12), or a job reporting a dozen suites at
	// once, with room to spare.
	DefaultRunBurst = 30
	// DefaultEnvironmentRunsPerMinute is 100 deployments each reporting a
	// run more often than every minute.
	DefaultEnvironmentRunsPerMinute = 120
	// DefaultArtifactKiBPerMinute is a deployment's sustained rate of
	// artifact bytes in run reports (KiB, ArtifactBytes): an honest run's
	// artifacts (reports, logs, bundles named by URL) take a few KiB, so
	// 256 KiB a minute is dozens of runs.
	DefaultArtifactKiBPerMinute = 256
	// DefaultArtifactKiBBurst is six runs at the largest size a report may
	// have (MaxRunArtifactBytes, 164 KiB), or some 170 honest runs: a
	// spool of an hour's reports replays without a refusal.
	DefaultArtifactKiBBurst = 1024
	// DefaultEnvironmentArtifactKiBPerMinute bounds an environment's
	// artifact bytes (KiB a minute): 100 deployments' honest runs are tens
	// of KiB a minute; one leaked key writes at most 4 MiB of artifact
	// refs in its first minute, about 3 GiB a day, against 1.3 GB a minute
	// without it.
	DefaultEnvironmentArtifactKiBPerMinute = 2048
	// DefaultLogRequestsPerMinute is a deployment's sustained rate of log
	// broker requests (sessions, plans, commits, finishes together): an
	// honest agent ships a chunk a minute per service (plan and commit),
	// three services are six a minute, and 30 is five times that.
	DefaultLogRequestsPerMinute = 30
	// DefaultLogBurst is an hour's backlog of one service (60 chunks, two
	// requests each): a replay after an outage ships without a refusal.
	DefaultLogBurst = 120
	// DefaultEnvironmentLogRequestsPerMinute is 100 deployments shipping
	// the default allowlist's three services (logs.DefaultServices) at a
	// chunk a minute each: three times the steady state, where only the
	// agent's own unit logs every minute, but no headroom once all three
	// are busy on every droplet (docs/operations.md, "Quotas").
	DefaultEnvironmentLogRequestsPerMinute = 600

	// MaxQuota is the largest value a quota accepts; larger would be
	// unlimited in all but name (use 0 for that, benchmarks only).
	MaxQuota = 1_000_000
)

// SessionOpeningWindow is the window in which the sessions a deployment
// opened are counted against OpenSessions, ended or not: an honest agent
// opens one session per start, so eight starts in an hour is already a
// crash loop, while a window that opens and closes its own session
// (final: true) can no longer multiply sessions (docs/operations.md,
// "Quotas").
const SessionOpeningWindow = telemetry.DefaultOpeningWindow

// Quota names, the label of chalupa_ingest_quota_refused_total and the kind
// part of a quota-exceeded event's id (docs/operations.md, "Quotas").
const (
	// QuotaDeploymentHeartbeats is one deployment's heartbeat rate.
	QuotaDeploymentHeartbeats = "deployment_heartbeats"
	// QuotaEnvironmentHeartbeats is one environment's heartbeats per minute.
	QuotaEnvironmentHeartbeats = "environment_heartbeats"
	// QuotaActiveDeployments is one environment's active deployments.
	QuotaActiveDeployments = "active_deployments"
	// QuotaOpenSessions is one deployment's open telemetry sessions, and
	// the sessions it opened in the last SessionOpeningWindow.
	QuotaOpenSessions = "open_sessions"
	// QuotaTelemetryReceipts is one deployment's telemetry receipts
	// (20,160, docs/operations.md "Telemetry"); reaching it is permanent
	// for the deployment, so it is the warning the operator most needs.
	QuotaTelemetryReceipts = "telemetry_receipts"
	// QuotaLogSessions is one deployment's open log sessions (8).
	QuotaLogSessions = "log_sessions"
	// QuotaLogChunks is the chunks one deployment may plan (256).
	QuotaLogChunks = "log_chunks"
	// QuotaLogBytes is the bytes one deployment may plan (64 MiB).
	QuotaLogBytes = "log_bytes"
	// QuotaEnvironmentStorage is one environment's storage budget
	// (CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES).
	QuotaEnvironmentStorage = "environment_storage"
	// QuotaDeploymentTelemetry is one deployment's telemetry window rate.
	QuotaDeploymentTelemetry = "deployment_telemetry"
	// QuotaEnvironmentTelemetry is one environment's telemetry windows a
	// minute.
	QuotaEnvironmentTelemetry = "environment_telemetry"
	// QuotaDeploymentLifecycle is one deployment's lifecycle event rate.
	QuotaDeploymentLifecycle = "deployment_lifecycle"
	// QuotaEnvironmentLifecycle is one environment's lifecycle events a
	// minute.
	QuotaEnvironmentLifecycle = "environment_lifecycle"
	// QuotaDeploymentRuns is one deployment's run report rate.
	QuotaDeploymentRuns = "deployment_runs"
	// QuotaEnvironmentRuns is one environment's run reports a minute.
	QuotaEnvironmentRuns = "environment_runs"
	// QuotaDeploymentArtifactBytes is one deployment's rate of artifact
	// bytes in run reports.
	QuotaDeploymentArtifactBytes = "deployment_artifact_bytes"
	// QuotaEnvironmentArtifactBytes is one environment's artifact bytes a
	// minute.
	QuotaEnvironmentArtifactBytes = "environment_artifact_bytes"
	// QuotaDeploymentLogRequests is one deployment's log broker request
	// rate.
	QuotaDeploymentLogRequests = "deployment_log_requests"
	// QuotaEnvironmentLogRequests is one environment's log broker requests
	// a minute.
	QuotaEnvironmentLogRequests = "environment_log_requests"
)

// QuotaNames lists every quota name, for metrics that start at zero.
var QuotaNames = []string{QuotaDeploymentHeartbeats, QuotaEnvironmentHeartbeats, QuotaActiveDeployments, QuotaOpenSessions, QuotaTelemetryReceipts,
	QuotaLogSessions, QuotaLogChunks, QuotaLogBytes, QuotaEnvironmentStorage,
	QuotaDeploymentTelemetry, QuotaEnvironmentTelemetry, QuotaDeploymentLifecycle, QuotaEnvironmentLifecycle,
	QuotaDeploymentRuns, QuotaEnvironmentRuns, QuotaDeploymentArtifactBytes, QuotaEnvironmentArtifactBytes,
	QuotaDeploymentLogRequests, QuotaEnvironmentLogRequests}

// environmentQuotas are the quotas of a whole environment: their warnings
// name no deployment.
var environmentQuotas = map[string]bool{
	QuotaEnvironmentHeartbeats: true, QuotaActiveDeployments: true, QuotaEnvironmentTelemetry: true, QuotaEnvironmentLifecycle: true,
	QuotaEnvironmentRuns: true, QuotaEnvironmentArtifactBytes: true, QuotaEnvironmentLogRequests: true,
	QuotaEnvironmentStorage: true,
}

// Quotas are the deployment- and environment-level ingest quotas
// (CHALUPA_QUOTA_*; docs/operations.md, "Quotas"). Zero in any field means
// unlimited, for benchmarks only.
type Quotas struct {
	// HeartbeatsPerMinute is a deployment's sustained heartbeat rate (per
	// minute); 0 turns the deployment rate limit off.
	HeartbeatsPerMinute int
	// HeartbeatBurst is the deployment limiter's bucket (heartbeats); 0
	// turns the deployment rate limit off.
	HeartbeatBurst int
	// OpenSessions bounds a deployment's open telemetry sessions and the
	// sessions it opened in the last SessionOpeningWindow (enforced by the
	// telemetry path); 0 is unlimited.
	OpenSessions int
	// ActiveDeployments bounds an environment's active deployments; a
	// first heartbeat beyond it is 429 deployment_quota. 0 is unlimited.
	ActiveDeployments int
	// EnvironmentHeartbeatsPerMinute bounds an environment's heartbeats
	// per minute (a one-minute bucket refilled continuously); 0 is
	// unlimited.
	EnvironmentHeartbeatsPerMinute int
	// EnvironmentStorageBytes bounds the bytes an environment's runs,
	// telemetry and producer lifecycle events are charged (bytes); beyond
	// it those writes are 429 storage_quota, heartbeats never. 0 is
	// unlimited.
	EnvironmentStorageBytes int64

	// TelemetryPerMinute and TelemetryBurst are a deployment's telemetry
	// window rate (windows a minute, and bucket); either 0 turns it off.
	TelemetryPerMinute, TelemetryBurst int
	// EnvironmentTelemetryPerMinute bounds an environment's windows a
	// minute (a one-minute bucket); 0 is unlimited.
	EnvironmentTelemetryPerMinute int
	// LifecyclePerMinute and LifecycleBurst are a deployment's lifecycle
	// event rate; either 0 turns it off.
	LifecyclePerMinute, LifecycleBurst int
	// EnvironmentLifecyclePerMinute bounds an environment's lifecycle
	// events a minute; 0 is unlimited.
	EnvironmentLifecyclePerMinute int
	// RunsPerMinute and RunBurst are a deployment's run report rate;
	// either 0 turns it off.
	RunsPerMinute, RunBurst int
	// EnvironmentRunsPerMinute bounds an environment's run reports a
	// minute; 0 is unlimited.
	EnvironmentRunsPerMinute int
	// ArtifactKiBPerMinute and ArtifactKiBBurst are a deployment's rate of
	// artifact bytes in run reports (KiB a minute, and bucket in KiB;
	// ArtifactBytes); either 0 turns it off.
	ArtifactKiBPerMinute, ArtifactKiBBurst int
	// EnvironmentArtifactKiBPerMinute bounds an environment's artifact
	// bytes (KiB a minute); 0 is unlimited.
	EnvironmentArtifactKiBPerMinute int
	// LogRequestsPerMinute and LogBurst are a deployment's rate of log
	// broker requests (all four routes together); either 0 turns it off.
	LogRequestsPerMinute, LogBurst int
	// EnvironmentLogRequestsPerMinute bounds an environment's log broker
	// requests a minute; 0 is unlimited.
	EnvironmentLogRequestsPerMinute int
}

// DefaultQuotas returns the documented defaults.
func DefaultQuotas() Quotas {
	return Quotas{
		HeartbeatsPerMinute:             DefaultHeartbeatsPerMinute,
		HeartbeatBurst:                  DefaultHeartbeatBurst,
		OpenSessions:                    DefaultOpenSessions,
		ActiveDeployments:               DefaultActiveDeployments,
		EnvironmentHeartbeatsPerMinute:  DefaultEnvironmentHeartbeatsPerMinute,
		EnvironmentStorageBytes:         DefaultEnvironmentStorageBytes,
		TelemetryPerMinute:              DefaultTelemetryPerMinute,
		TelemetryBurst:                  DefaultTelemetryBurst,
		EnvironmentTelemetryPerMinute:   DefaultEnvironmentTelemetryPerMinute,
		LifecyclePerMinute:              DefaultLifecyclePerMinute,
		LifecycleBurst:                  DefaultLifecycleBurst,
		EnvironmentLifecyclePerMinute:   DefaultEnvironmentLifecyclePerMinute,
		RunsPerMinute:                   DefaultRunsPerMinute,
		RunBurst:                        DefaultRunBurst,
		EnvironmentRunsPerMinute:        DefaultEnvironmentRunsPerMinute,
		ArtifactKiBPerMinute:            DefaultArtifactKiBPerMinute,
		ArtifactKiBBurst:                DefaultArtifactKiBBurst,
		EnvironmentArtifactKiBPerMinute: DefaultEnvironmentArtifactKiBPerMinute,
		LogRequestsPerMinute:            DefaultLogRequestsPerMinute,
		LogBurst:                        DefaultLogBurst,
		EnvironmentLogRequestsPerMinute: DefaultEnvironmentLogRequestsPerMinute,
	}
}

// rateDim is one dimension of a route's rate quotas: a deployment bucket
// (perMin tokens a minute, burst tokens) and an environment bucket (envPerMin
// a minute, a one-minute bucket), in units of unit tokens (1 for requests,
// 1024 for KiB of bytes). A zero rate or burst turns that bucket off.
type rateDim struct {
	perMin, burst, envPerMin, unit int
	// depQuota and envQuota name the quotas (QuotaNames).
	depQuota, envQuota string
	// what names the unit in refusals ("heartbeat", "KiB of artifacts").
	what string
}

func (d rateDim) depOn() bool { return d.perMin > 0 && d.burst > 0 }
func (d rateDim) envOn() bool { return d.envPerMin > 0 }

// Route rate specs, from the quotas (docs/operations.md, "Quotas").
func (q Quotas) heartbeatDims() []rateDim {
	return []rateDim{{q.HeartbeatsPerMinute, q.HeartbeatBurst, q.EnvironmentHeartbeatsPerMinute, 1, QuotaDeploymentHeartbeats, QuotaEnvironmentHeartbeats, "heartbeat"}}
}

func (q Quotas) telemetryDims() []rateDim {
	return []rateDim{{q.TelemetryPerMinute, q.TelemetryBurst, q.EnvironmentTelemetryPerMinute, 1, QuotaDeploymentTelemetry, QuotaEnvironmentTelemetry, "telemetry window"}}
}

func (q Quotas) lifecycleDims() []rateDim {
	return []rateDim{{q.LifecyclePerMinute, q.LifecycleBurst, q.EnvironmentLifecyclePerMinute, 1, QuotaDeploymentLifecycle, QuotaEnvironmentLifecycle, "lifecycle event"}}
}

// runDims are a run report's two costs: one request, and its ArtifactBytes.
func (q Quotas) runDims() []rateDim {
	return []rateDim{
		{q.RunsPerMinute, q.RunBurst, q.EnvironmentRunsPerMinute, 1, QuotaDeploymentRuns, QuotaEnvironmentRuns, "run report"},
		{q.ArtifactKiBPerMinute, q.ArtifactKiBBurst, q.EnvironmentArtifactKiBPerMinute, 1024, QuotaDeploymentArtifactBytes, QuotaEnvironmentArtifactBytes, "KiB of artifacts"},
	}
}

func (q Quotas) logDims() []rateDim {
	return []rateDim{{q.LogRequestsPerMinute, q.LogBurst, q.EnvironmentLogRequestsPerMinute, 1, QuotaDeploymentLogRequests, QuotaEnvironmentLogRequests, "log request"}}
}

// Limiter bookkeeping bounds (docs/operations.md, "Quotas").
const (
	// limiterSweepInterval is how often idle limiters are evicted.
	limiterSweepInterval = time.Minute
	// limiterSweepMin is the entry count that triggers a sweep before the
	// interval: a flood of distinct ids is swept as it grows, not a minute
	// later.
	limiterSweepMin = 4096
)

// rateLimiter holds the token buckets of one route's rate quotas, keyed by
// environment slug and deployment id, one bucket per dimension (a run
// report costs a request and its artifact bytes). A bucket that has
// refilled to its burst behaves exactly like a fresh one, so it is evicted:
// what stays in memory is only the buckets spent recently. A deployment's
// buckets are created only once its environment's buckets admitted the
// request, so the environment bound caps how fast entries appear
// (docs/operations.md, "Quotas").
type rateLimiter struct {
	dims []rateDim

	mu        sync.Mutex
	envs      map[string]*envBuckets
	entries   int // environments + deployments held
	lastSweep time.Time
	sweepAt   int
}

type envBuckets struct {
	lims []*rate.Limiter // per dimension; nil when its environment bound is off
	deps map[string][]*rate.Limiter
}

func newRateLimiter(dims []rateDim) *rateLimiter {
	return &rateLimiter{dims: dims, envs: map[string]*envBuckets{}, sweepAt: limiterSweepMin}
}

// newHeartbeatLimiter is the heartbeat route's limiter.
func newHeartbeatLimiter(q Quotas) *rateLimiter { return newRateLimiter(q.heartbeatDims()) }

func (l *rateLimiter) on() bool {
	for _, d := range l.dims {
		if d.depOn() || d.envOn() {
			return true
		}
	}
	return false
}

// perMinute is a rate.Limit of n tokens a minute.
func perMinute(n int) rate.Limit { return rate.Limit(float64(n) / 60) }

// retryAfter is the whole seconds (at least 1) until lim holds need tokens.
func retryAfter(lim *rate.Limiter, tokens float64, need int) int {
	s := (float64(need) - tokens) / float64(lim.Limit())
	if s < 1 || math.IsNaN(s) {
		return 1
	}
	return int(math.Ceil(s))
}

// allow spends one request of deployment dep in environment env at now, or
// returns the refusal (see allowN).
func (l *rateLimiter) allow(now time.Time, env, dep string) *Refusal {
	return l.allowN(now, env, dep, 1)
}

// allowN spends cost[i] tokens of dimension i (1 when cost is shorter) for
// deployment dep in environment env at now, or returns the refusal: 429
// rate_limited with Retry-After, naming the quota it met. Every deployment
// bucket is checked first, then every environment bucket, and nothing is
// spent from any unless all admit, so a flood on one deployment never
// spends its environment's budget. A cost above a bucket's size costs the
// whole bucket (it could never be admitted otherwise).
func (l *rateLimiter) allowN(now time.Time, env, dep string, cost ...int) *Refusal {
	if !l.on() {
		return nil
	}
	need := func(i int, lim *rate.Limiter) int {
		n := 1
		if i < len(cost) {
			n = cost[i]
		}
		return min(n, lim.Burst())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeSweep(now)
	e := l.envs[env]
	if e == nil {
		e = &envBuckets{lims: make([]*rate.Limiter, len(l.dims)), deps: map[string][]*rate.Limiter{}}
		for i, d := range l.dims {
			if d.envOn() {
				e.lims[i] = rate.NewLimiter(perMinute(d.envPerMin*d.unit), d.envPerMin*d.unit)
			}
		}
		l.envs[env] = e
		l.entries++
	}
	deps := e.deps[dep]
	for i, lim := range deps {
		if lim == nil {
			continue
		}
		if t, n := lim.TokensAt(now), need(i, lim); t < float64(n) {
			d := l.dims[i]
			rf := refuse(http.StatusTooManyRequests, "rate_limited",
				"deployment %s quota exceeded (%d %s a minute, burst %d); retry later", d.what, d.perMin, plural(d.what), d.burst)
			rf.RetryAfter, rf.Quota = retryAfter(lim, t, n), d.depQuota
			return rf
		}
	}
	for i, lim := range e.lims {
		if lim == nil {
			continue
		}
		if t, n := lim.TokensAt(now), need(i, lim); t < float64(n) {
			d := l.dims[i]
			rf := refuse(http.StatusTooManyRequests, "rate_limited",
				"environment %s quota exceeded (%d %s a minute); retry later", d.what, d.envPerMin, plural(d.what))
			rf.RetryAfter, rf.Quota = retryAfter(lim, t, n), d.envQuota
			return rf
		}
	}
	for i, lim := range e.lims {
		if lim != nil {
			lim.AllowN(now, need(i, lim))
		}
	}
	if deps == nil {
		for i, d := range l.dims {
			if d.depOn() {
				if deps == nil {
					deps = make([]*rate.Limiter, len(l.dims))
				}
				deps[i] = rate.NewLimiter(perMinute(d.perMin*d.unit), d.burst*d.unit)
			}
		}
		if deps == nil {
			return nil
		}
		e.deps[dep] = deps
		l.entries++
	}
	for i, lim := range deps {
		if lim != nil {
			lim.AllowN(now, need(i, lim))
		}
	}
	return nil
}

// plural is the unit's plural for refusals ("KiB of artifacts" stays).
func plural(what string) string {
	if what == "KiB of artifacts" {
		return what
	}
	return what + "s"
}

// full reports whether lim holds its whole burst at now (a fresh bucket).
func full(lim *rate.Limiter, now time.Time) bool {
	return lim == nil || lim.TokensAt(now) >= float64(lim.Burst())
}

// maybeSweep evicts full buckets (indistinguishable from fresh ones) every
// limiterSweepInterval, or sooner once the entries reach sweepAt (twice what
// the last sweep kept, at least limiterSweepMin): amortized O(1) a request.
func (l *rateLimiter) maybeSweep(now time.Time) {
	if l.entries < l.sweepAt && now.Sub(l.lastSweep) < limiterSweepInterval {
		return
	}
	l.lastSweep = now
	allFull := func(lims []*rate.Limiter) bool {
		for _, lim := range lims {
			if !full(lim, now) {
				return false
			}
		}
		return true
	}
	for slug, e := range l.envs {
		for id, d := range e.deps {
			if allFull(d) {
				delete(e.deps, id)
				l.entries--
			}
		}
		if len(e.deps) == 0 && allFull(e.lims) {
			delete(l.envs, slug)
			l.entries--
		}
	}
	l.sweepAt = max(2*l.entries, limiterSweepMin)
}

// size is how many entries are held (environments + deployments).
func (l *rateLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries
}
