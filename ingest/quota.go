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
	// admission's own default and reason).
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
	// MaxQuota is the largest value a quota accepts; larger would be
	// unlimited in all but name (use 0 for that, benchmarks only).
	MaxQuota = 1_000_000
)

// Quota names, the label of chalupa_ingest_quota_refused_total and the kind
// part of a quota-exceeded event's id (docs/operations.md, "Quotas").
const (
	// QuotaDeploymentHeartbeats is one deployment's heartbeat rate.
	QuotaDeploymentHeartbeats = "deployment_heartbeats"
	// QuotaEnvironmentHeartbeats is one environment's heartbeats per minute.
	QuotaEnvironmentHeartbeats = "environment_heartbeats"
	// QuotaActiveDeployments is one environment's active deployments.
	QuotaActiveDeployments = "active_deployments"
	// QuotaOpenSessions is one deployment's open telemetry sessions.
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
)

// QuotaNames lists every quota name, for metrics that start at zero.
var QuotaNames = []string{QuotaDeploymentHeartbeats, QuotaEnvironmentHeartbeats, QuotaActiveDeployments, QuotaOpenSessions, QuotaTelemetryReceipts,
	QuotaLogSessions, QuotaLogChunks, QuotaLogBytes, QuotaEnvironmentStorage}

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
	// OpenSessions bounds a deployment's open telemetry sessions (enforced
	// by the telemetry path); 0 is unlimited.
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
}

// DefaultQuotas returns the documented defaults.
func DefaultQuotas() Quotas {
	return Quotas{
		HeartbeatsPerMinute:            DefaultHeartbeatsPerMinute,
		HeartbeatBurst:                 DefaultHeartbeatBurst,
		OpenSessions:                   DefaultOpenSessions,
		ActiveDeployments:              DefaultActiveDeployments,
		EnvironmentHeartbeatsPerMinute: DefaultEnvironmentHeartbeatsPerMinute,
		EnvironmentStorageBytes:        DefaultEnvironmentStorageBytes,
	}
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

// heartbeatLimiter holds the token buckets of the heartbeat quotas, keyed by
// environment slug and deployment id. A bucket that has refilled to its
// burst behaves exactly like a fresh one, so it is evicted: what stays in
// memory is only the buckets spent recently. A deployment's bucket is
// created only once its environment's bucket admitted the request, so the
// environment bound caps how fast entries appear (docs/operations.md,
// "Quotas").
type heartbeatLimiter struct {
	q Quotas

	mu        sync.Mutex
	envs      map[string]*envBuckets
	entries   int // environments + deployments held
	lastSweep time.Time
	sweepAt   int
}

type envBuckets struct {
	lim  *rate.Limiter // nil when the environment bound is off
	deps map[string]*rate.Limiter
}

func newHeartbeatLimiter(q Quotas) *heartbeatLimiter {
	return &heartbeatLimiter{q: q, envs: map[string]*envBuckets{}, sweepAt: limiterSweepMin}
}

func (l *heartbeatLimiter) deploymentOn() bool {
	return l.q.HeartbeatsPerMinute > 0 && l.q.HeartbeatBurst > 0
}

func (l *heartbeatLimiter) environmentOn() bool { return l.q.EnvironmentHeartbeatsPerMinute > 0 }

// perMinute is a rate.Limit of n events a minute.
func perMinute(n int) rate.Limit { return rate.Limit(float64(n) / 60) }

// retryAfter is the whole seconds (at least 1) until lim holds one token.
func retryAfter(lim *rate.Limiter, tokens float64) int {
	s := (1 - tokens) / float64(lim.Limit())
	if s < 1 || math.IsNaN(s) {
		return 1
	}
	return int(math.Ceil(s))
}

// allow spends one heartbeat of deployment dep in environment env at now,
// or returns the refusal: 429 rate_limited with Retry-After, naming the
// quota it met. The deployment's bucket is checked first and nothing is
// spent from either bucket unless both admit, so a flood on one deployment
// never spends its environment's budget.
func (l *heartbeatLimiter) allow(now time.Time, env, dep string) *Refusal {
	if !l.deploymentOn() && !l.environmentOn() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybeSweep(now)
	e := l.envs[env]
	if e == nil {
		e = &envBuckets{deps: map[string]*rate.Limiter{}}
		if l.environmentOn() {
			n := l.q.EnvironmentHeartbeatsPerMinute
			e.lim = rate.NewLimiter(perMinute(n), n)
		}
		l.envs[env] = e
		l.entries++
	}
	var d *rate.Limiter
	if l.deploymentOn() {
		d = e.deps[dep]
		if d != nil {
			if t := d.TokensAt(now); t < 1 {
				rf := refuse(http.StatusTooManyRequests, "rate_limited",
					"deployment heartbeat quota exceeded (%d a minute, burst %d); retry later", l.q.HeartbeatsPerMinute, l.q.HeartbeatBurst)
				rf.RetryAfter, rf.Quota = retryAfter(d, t), QuotaDeploymentHeartbeats
				return rf
			}
		}
	}
	if e.lim != nil {
		if t := e.lim.TokensAt(now); t < 1 {
			rf := refuse(http.StatusTooManyRequests, "rate_limited",
				"environment heartbeat quota exceeded (%d a minute); retry later", l.q.EnvironmentHeartbeatsPerMinute)
			rf.RetryAfter, rf.Quota = retryAfter(e.lim, t), QuotaEnvironmentHeartbeats
			return rf
		}
		e.lim.AllowN(now, 1)
	}
	if l.deploymentOn() {
		if d == nil {
			d = rate.NewLimiter(perMinute(l.q.HeartbeatsPerMinute), l.q.HeartbeatBurst)
			e.deps[dep] = d
			l.entries++
		}
		d.AllowN(now, 1)
	}
	return nil
}

// maybeSweep evicts full buckets (indistinguishable from fresh ones) every
// limiterSweepInterval, or sooner once the entries reach sweepAt (twice what
// the last sweep kept, at least limiterSweepMin): amortized O(1) a request.
func (l *heartbeatLimiter) maybeSweep(now time.Time) {
	if l.entries < l.sweepAt && now.Sub(l.lastSweep) < limiterSweepInterval {
		return
	}
	l.lastSweep = now
	for slug, e := range l.envs {
		for id, d := range e.deps {
			if d.TokensAt(now) >= float64(d.Burst()) {
				delete(e.deps, id)
				l.entries--
			}
		}
		if len(e.deps) == 0 && (e.lim == nil || e.lim.TokensAt(now) >= float64(e.lim.Burst())) {
			delete(l.envs, slug)
			l.entries--
		}
	}
	l.sweepAt = max(2*l.entries, limiterSweepMin)
}

// size is how many buckets are held (environments + deployments).
func (l *heartbeatLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries
}
