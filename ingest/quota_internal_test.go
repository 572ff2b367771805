package ingest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

var quotaEpoch = time.Date(2026, 12, 1, 10, 41, 0, 0, time.UTC)

// TestHeartbeatLimiterRetryAfter: the refusal's Retry-After is the whole
// seconds (at least 1) until the quota's next token, and names the quota.
func TestHeartbeatLimiterRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		q          Quotas
		sends      int           // admitted before the refusal
		after      time.Duration // clock advance before the refused attempt
		retryAfter int
		quota      string
	}{
		{"deployment, empty bucket: 5 s at 12 a minute", Quotas{HeartbeatsPerMinute: 12, HeartbeatBurst: 20}, 20, 0, 5, QuotaDeploymentHeartbeats},
		{"deployment, part of a token back: rounded up", Quotas{HeartbeatsPerMinute: 12, HeartbeatBurst: 20}, 20, 1500 * time.Millisecond, 4, QuotaDeploymentHeartbeats},
		{"deployment, almost a token: at least 1", Quotas{HeartbeatsPerMinute: 12, HeartbeatBurst: 20}, 20, 4900 * time.Millisecond, 1, QuotaDeploymentHeartbeats},
		{"deployment, slow rate: 60 s at 1 a minute", Quotas{HeartbeatsPerMinute: 1, HeartbeatBurst: 1}, 1, 0, 60, QuotaDeploymentHeartbeats},
		{"fast environment: at least 1", Quotas{EnvironmentHeartbeatsPerMinute: 1200}, 1200, 0, 1, QuotaEnvironmentHeartbeats},
		{"environment: 12 s at 5 a minute", Quotas{EnvironmentHeartbeatsPerMinute: 5}, 5, 0, 12, QuotaEnvironmentHeartbeats},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newHeartbeatLimiter(tc.q)
			now := quotaEpoch
			for i := range tc.sends {
				if rf := l.allow(now, "demo-harbor", "dep-1"); rf != nil {
					t.Fatalf("send %d refused: %v", i+1, rf)
				}
			}
			rf := l.allow(now.Add(tc.after), "demo-harbor", "dep-1")
			if rf == nil {
				t.Fatalf("send %d admitted", tc.sends+1)
			}
			if rf.Status != http.StatusTooManyRequests || rf.Code != "rate_limited" || rf.RetryAfter != tc.retryAfter || rf.Quota != tc.quota {
				t.Fatalf("refusal = %d %s Retry-After %d quota %s; want 429 rate_limited %d %s", rf.Status, rf.Code, rf.RetryAfter, rf.Quota, tc.retryAfter, tc.quota)
			}
		})
	}
}

// TestHeartbeatLimiterDeploymentsApart: one deployment's flood neither
// touches another deployment's bucket nor spends the environment's.
func TestHeartbeatLimiterDeploymentsApart(t *testing.T) {
	l := newHeartbeatLimiter(Quotas{HeartbeatsPerMinute: 12, HeartbeatBurst: 2, EnvironmentHeartbeatsPerMinute: 4})
	now := quotaEpoch
	for i := range 1000 {
		rf := l.allow(now, "demo-harbor", "dep-flood")
		if (rf == nil) != (i < 2) {
			t.Fatalf("flood attempt %d: refusal %v", i+1, rf)
		}
	}
	for _, dep := range []string{"dep-a", "dep-b"} {
		if rf := l.allow(now, "demo-harbor", dep); rf != nil {
			t.Fatalf("%s during the flood: %v", dep, rf)
		}
	}
	if rf := l.allow(now, "demo-harbor", "dep-c"); rf == nil || rf.Quota != QuotaEnvironmentHeartbeats {
		t.Fatalf("fifth admitted heartbeat of the environment: %v, want the environment quota", rf)
	}
	if rf := l.allow(now, "other-env", "dep-flood"); rf != nil {
		t.Fatalf("the same deployment id in another environment: %v", rf)
	}
}

// TestHeartbeatLimiterZeroIsUnlimited: a quota of 0 never refuses, and
// holds no state.
func TestHeartbeatLimiterZeroIsUnlimited(t *testing.T) {
	for _, q := range []Quotas{{}, {HeartbeatsPerMinute: 12}, {HeartbeatBurst: 20}} {
		l := newHeartbeatLimiter(q)
		for i := range 10_000 {
			if rf := l.allow(quotaEpoch, "demo-harbor", fmt.Sprintf("dep-%d", i%3)); rf != nil {
				t.Fatalf("%+v: refused %v", q, rf)
			}
		}
		if n := l.size(); n != 0 {
			t.Fatalf("%+v: %d buckets held", q, n)
		}
	}
}

// TestHeartbeatLimiterMemoryIsBounded: a flood of distinct deployment ids
// (one leaked key naming a new id per request, 1,000 a second for 10
// minutes) holds at most what the environment bound admits between sweeps,
// and idle buckets are evicted (docs/operations.md, "Quotas").
func TestHeartbeatLimiterMemoryIsBounded(t *testing.T) {
	q := DefaultQuotas()
	l := newHeartbeatLimiter(q)
	now := quotaEpoch
	// Admitted new buckets between two sweeps: the environment's burst plus
	// a minute of its rate; plus the environment's own bucket.
	bound := 2*q.EnvironmentHeartbeatsPerMinute + 1
	peak := 0
	for i := range 600_000 {
		now = now.Add(time.Millisecond)
		l.allow(now, "demo-harbor", fmt.Sprintf("dep-%d", i))
		peak = max(peak, l.size())
	}
	t.Logf("peak %d buckets (bound %d)", peak, bound)
	if peak > bound {
		t.Fatalf("peak %d buckets, want at most %d", peak, bound)
	}
	// Idle long enough to refill, everything is evicted at the next sweep.
	now = now.Add(limiterSweepInterval + 2*time.Minute)
	l.allow(now, "demo-harbor", "dep-last")
	if n := l.size(); n != 2 {
		t.Fatalf("%d buckets after the idle sweep, want 2 (the environment and dep-last)", n)
	}
}

// TestQuotaNotesOncePerHour: a warning is queued once per quota, scope
// and clock hour; at most maxQuotaEventsPerHour an hour; never blocking.
func TestQuotaNotesOncePerHour(t *testing.T) {
	n := newQuotaNotes()
	for range 5 {
		n.note(quotaEpoch, QuotaDeploymentHeartbeats, "demo-harbor", "dep-1", "m")
	}
	n.note(quotaEpoch, QuotaDeploymentHeartbeats, "demo-harbor", "dep-2", "m")
	n.note(quotaEpoch, QuotaEnvironmentHeartbeats, "demo-harbor", "", "m")
	n.note(quotaEpoch.Add(time.Hour), QuotaDeploymentHeartbeats, "demo-harbor", "dep-1", "m")
	var ids []string
	for len(n.ch) > 0 {
		ids = append(ids, (<-n.ch).ID)
	}
	want := []string{
		"quota:deployment_heartbeats:demo-harbor:dep-1:2026-12-01T10",
		"quota:deployment_heartbeats:demo-harbor:dep-2:2026-12-01T10",
		"quota:environment_heartbeats:demo-harbor::2026-12-01T10",
		"quota:deployment_heartbeats:demo-harbor:dep-1:2026-12-01T11",
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("queued %q, want %q", ids, want)
	}

	// The hourly cap, and a full queue that drops without blocking.
	n = newQuotaNotes()
	queued := 0
	for i := range 10 * maxQuotaEventsPerHour {
		n.note(quotaEpoch, QuotaDeploymentHeartbeats, "demo-harbor", fmt.Sprintf("dep-%d", i), "m")
		for len(n.ch) > 0 {
			<-n.ch
			queued++
		}
	}
	if queued != maxQuotaEventsPerHour {
		t.Fatalf("%d warnings queued in one hour, want %d", queued, maxQuotaEventsPerHour)
	}
	n = newQuotaNotes()
	for i := range 2 * quotaEventQueue {
		n.note(quotaEpoch, QuotaDeploymentHeartbeats, "demo-harbor", fmt.Sprintf("dep-%d", i), "m")
	}
	if len(n.ch) != quotaEventQueue {
		t.Fatalf("queue holds %d, want %d", len(n.ch), quotaEventQueue)
	}
	<-n.ch
	n.note(quotaEpoch, QuotaDeploymentHeartbeats, "demo-harbor", fmt.Sprintf("dep-%d", 2*quotaEventQueue-1), "m")
	if len(n.ch) != quotaEventQueue {
		t.Fatalf("a warning dropped on a full queue could not be noted again")
	}
}

// BenchmarkHeartbeatLimiterAllow is the quota check's cost on the heartbeat
// path at the defaults: 500 deployments of one environment, the clock
// advancing so that every check admits (the common case).
func BenchmarkHeartbeatLimiterAllow(b *testing.B) {
	q := DefaultQuotas()
	q.EnvironmentHeartbeatsPerMinute = MaxQuota
	l := newHeartbeatLimiter(q)
	deps := make([]string, 500)
	for i := range deps {
		deps[i] = fmt.Sprintf("dep-%d", i)
	}
	now := quotaEpoch
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(10 * time.Millisecond) // 100/s over 500 deployments: well within 12 a minute each
		if rf := l.allow(now, "demo-harbor", deps[i%len(deps)]); rf != nil {
			b.Fatalf("refused: %v", rf)
		}
	}
}

// TestRateLimiterCosts: a run report costs one request and its artifact
// bytes; either bucket refuses with its own quota and Retry-After for the
// whole cost, and a refusal spends nothing from any bucket; a cost above a
// bucket's size costs the whole bucket instead of being refused forever.
func TestRateLimiterCosts(t *testing.T) {
	q := Quotas{RunsPerMinute: 6, RunBurst: 3, ArtifactKiBPerMinute: 60, ArtifactKiBBurst: 2, EnvironmentArtifactKiBPerMinute: 4}
	for _, tc := range []struct {
		name       string
		costs      []int // artifact bytes of the admitted reports
		cost       int   // of the refused one
		quota      string
		retryAfter int
	}{
		{"request bucket", []int{0, 0, 0}, 0, QuotaDeploymentRuns, 10},
		{"deployment bytes: 1 KiB a second", []int{2048}, 1024, QuotaDeploymentArtifactBytes, 1},
		{"deployment bytes: the whole cost", []int{1024, 1024}, 2048, QuotaDeploymentArtifactBytes, 2},
		{"over the bucket costs the bucket", []int{100_000}, 100_000, QuotaDeploymentArtifactBytes, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newRateLimiter(q.runDims())
			for i, c := range tc.costs {
				if rf := l.allowN(quotaEpoch, "demo-harbor", "dep-1", 1, c); rf != nil {
					t.Fatalf("report %d: %v", i+1, rf)
				}
			}
			rf := l.allowN(quotaEpoch, "demo-harbor", "dep-1", 1, tc.cost)
			if rf == nil || rf.Quota != tc.quota || rf.RetryAfter != tc.retryAfter || rf.Code != "rate_limited" {
				t.Fatalf("refusal %+v, want %s Retry-After %d", rf, tc.quota, tc.retryAfter)
			}
		})
	}
	t.Run("a refusal spends nothing", func(t *testing.T) {
		l := newRateLimiter(q.runDims())
		if rf := l.allowN(quotaEpoch, "demo-harbor", "dep-1", 1, 2048); rf != nil {
			t.Fatal(rf)
		}
		for range 10 { // refused by the deployment's bytes: the environment keeps 2 KiB
			if rf := l.allowN(quotaEpoch, "demo-harbor", "dep-1", 1, 1024); rf == nil || rf.Quota != QuotaDeploymentArtifactBytes {
				t.Fatalf("refusal %v", rf)
			}
		}
		if rf := l.allowN(quotaEpoch, "demo-harbor", "dep-2", 1, 2048); rf != nil {
			t.Fatalf("another deployment within the environment's 4 KiB: %v", rf)
		}
		if rf := l.allowN(quotaEpoch, "demo-harbor", "dep-3", 1, 1); rf == nil || rf.Quota != QuotaEnvironmentArtifactBytes {
			t.Fatalf("the environment's 4 KiB spent: %v", rf)
		}
	})
}

// TestQuotaMessageForEveryQuota: each quota's hourly quota-exceeded event
// says what it bounds and, for a configurable one, the variable and its
// value (docs/operations.md, "Quotas"); a quota added to QuotaNames without
// its text in quotaMessage (and rateVariables, for a rate) would fall back
// to the bare "… quota exceeded".
func TestQuotaMessageForEveryQuota(t *testing.T) {
	for _, q := range QuotaNames {
		msg := quotaMessage(q, DefaultQuotas(), "dep-1")
		if strings.HasSuffix(msg, " quota exceeded") {
			t.Errorf("quota %s has no event text of its own: %q", q, msg)
		}
		if v, ok := rateVariables[q]; ok && !strings.Contains(msg, v.rate+"=") {
			t.Errorf("quota %s's event does not name %s: %q", q, v.rate, msg)
		}
	}
}
