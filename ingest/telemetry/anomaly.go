package telemetry

import (
	"context"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// Anomaly rules (docs/operations.md, "Telemetry"). A rule is evaluated when
// a window is accepted, on the windows the session holds at that moment: it
// holds at a window when that window and the Run-1 minutes before it are all
// present and all meet the condition. A window that arrives late and
// completes a run is judged as it arrives; the windows after it are not
// re-judged.
type anomalyRule struct {
	// Kind is the rule's name in telemetry_anomalies.kind.
	Kind string
	// Run is how many consecutive minutes the condition must hold.
	Run int
	// ActiveOnly rules apply only while the deployment is active.
	ActiveOnly bool
	// Meets reports whether one window meets the condition; false when the
	// window lacks a metric the rule reads.
	Meets func(m *storage.TelemetryMetricSet) bool
}

// Thresholds of the rules.
const (
	// GPUIdleBelowPct: a GPU whose busiest minute stayed below 5 % did no
	// real work that minute.
	GPUIdleBelowPct = 5
	// GPUIdleMinutes: half an hour of an idle GPU is the expensive case the
	// operator wants to see (a GPU droplet billed while nothing runs).
	GPUIdleMinutes = 30
	// MemoryPressureFraction and MemoryPressureMinutes: memory more than
	// 95 % used for five minutes means swapping or an OOM kill is near.
	MemoryPressureFraction = 0.95
	MemoryPressureMinutes  = 5
	// DiskNearlyFullFraction: a root filesystem more than 90 % full.
	DiskNearlyFullFraction = 0.90
)

// rules is the documented rule set, evaluated in this order.
var rules = []anomalyRule{
	{Kind: "gpu-idle", Run: GPUIdleMinutes, ActiveOnly: true, Meets: func(m *storage.TelemetryMetricSet) bool {
		g := m[storage.MetricGPUUtilPct]
		return g != nil && g.Max < GPUIdleBelowPct
	}},
	{Kind: "memory-pressure", Run: MemoryPressureMinutes, Meets: func(m *storage.TelemetryMetricSet) bool {
		return fraction(m[storage.MetricMemUsedBytes], m[storage.MetricMemTotalBytes]) > MemoryPressureFraction
	}},
	{Kind: "disk-nearly-full", Run: 1, Meets: func(m *storage.TelemetryMetricSet) bool {
		return fraction(m[storage.MetricDiskUsedBytes], m[storage.MetricDiskTotalBytes]) > DiskNearlyFullFraction
	}},
}

// fraction is mean(used)/mean(total) over the window; 0 when either is
// missing or total is 0.
func fraction(used, total *storage.MetricAgg) float64 {
	if used == nil || total == nil || total.Sum <= 0 {
		return 0
	}
	u, t := used.Sum/float64(used.N), total.Sum/float64(total.N)
	if t <= 0 {
		return 0
	}
	return u / t
}

// evaluateAnomalies runs the rules for a window just stored and records the
// ones that hold; it returns their kinds.
func evaluateAnomalies(ctx context.Context, q storage.Querier, env int64, dep, sess string, start time.Time, m *storage.TelemetryMetricSet, active bool) ([]string, error) {
	var raised []string
	for _, r := range rules {
		if (r.ActiveOnly && !active) || !r.Meets(m) {
			continue
		}
		if r.Run > 1 {
			from := start.Add(-time.Duration(r.Run-1) * time.Minute)
			prev, err := storage.TelemetryWindowsBetween(ctx, q, env, dep, sess, from, start, r.Run)
			if err != nil {
				return nil, err
			}
			if len(prev) != r.Run-1 {
				continue
			}
			all := true
			for i := range prev {
				if !r.Meets(&prev[i].Metrics) {
					all = false
					break
				}
			}
			if !all {
				continue
			}
		}
		if err := storage.RecordTelemetryAnomaly(ctx, q, storage.TelemetryAnomaly{
			EnvironmentID: env, DeploymentID: dep, SessionID: sess, Kind: r.Kind,
			FirstSeenAt: start.Add(-time.Duration(r.Run-1) * time.Minute), LastSeenAt: start.Add(window),
		}); err != nil {
			return nil, err
		}
		raised = append(raised, r.Kind)
	}
	return raised, nil
}
