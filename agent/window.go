package agent

import (
	"time"

	"github.com/chalupa-run/chalupa/protocol"
)

// Windower aggregates samples into minute windows (protocol.WindowV1): n,
// sum, min, max and last of every metric sampled inside
// [windowStart, windowStart+1 min). The first window is the first whole
// minute after Start — the samples of the partial minute the agent started
// in only seed the CPU and network deltas — so windows are relative to the
// agent's start, never to boot (docs/operations.md, "Agent").
type Windower struct {
	// EnvironmentSlug, DeploymentID and SessionID identify the windows.
	EnvironmentSlug, DeploymentID, SessionID string
	// Start is when the agent started.
	Start time.Time

	cur    time.Time
	n      int
	aggs   [numMetrics]*protocol.AggV1
	active bool
}

// firstWindow is the start of the first whole minute at or after Start.
func (w *Windower) firstWindow() time.Time {
	s := w.Start.UTC()
	t := s.Truncate(WindowLength)
	if t.Before(s) {
		t = t.Add(WindowLength)
	}
	return t
}

// Add folds s into its minute. When s is the first sample of a new minute,
// the window it closes is returned (nil when that window was the partial
// first minute or held no sample).
func (w *Windower) Add(s Sample) *protocol.WindowV1 {
	start := s.At.UTC().Truncate(WindowLength)
	var done *protocol.WindowV1
	if w.active && !start.Equal(w.cur) {
		if !w.cur.Before(w.firstWindow()) && start.After(w.cur) {
			done = w.build(false)
		}
		w.active = false
	}
	if !w.active {
		w.cur, w.n, w.aggs, w.active = start, 0, [numMetrics]*protocol.AggV1{}, true
	}
	w.n++
	for m := range numMetrics {
		if !s.Has[m] {
			continue
		}
		v := s.Value[m]
		a := w.aggs[m]
		if a == nil {
			w.aggs[m] = &protocol.AggV1{N: 1, Sum: v, Min: v, Max: v, Last: v}
			continue
		}
		a.N++
		a.Sum += v
		a.Min = min(a.Min, v)
		a.Max = max(a.Max, v)
		a.Last = v
	}
	return done
}

// Final returns the window of the current minute, marked final:true: the
// partial last minute of a stopping agent, which ends its session. With no
// sample taken yet it is the current minute of now, with no metrics.
func (w *Windower) Final(now time.Time) *protocol.WindowV1 {
	if !w.active {
		w.cur, w.aggs, w.active = now.UTC().Truncate(WindowLength), [numMetrics]*protocol.AggV1{}, true
	}
	out := w.build(true)
	w.active = false
	return out
}

// Current returns the window in progress (not final), for `agent status`;
// nil before the first sample.
func (w *Windower) Current() *protocol.WindowV1 {
	if !w.active {
		return nil
	}
	return w.build(false)
}

func (w *Windower) build(final bool) *protocol.WindowV1 {
	a := w.aggs
	return &protocol.WindowV1{
		EnvironmentSlug: w.EnvironmentSlug, DeploymentID: w.DeploymentID, SessionID: w.SessionID,
		WindowStart: w.cur, WindowSeconds: protocol.WindowSeconds, Final: final,
		// Each metric's type is AggV1 with its unit's range in the tags.
		Metrics: protocol.MetricsV1{
			CPUPct: (*protocol.PercentAggV1)(a[CPUPct]), MemUsedBytes: (*protocol.BytesAggV1)(a[MemUsedBytes]),
			MemTotalBytes: (*protocol.BytesAggV1)(a[MemTotalBytes]), DiskUsedBytes: (*protocol.BytesAggV1)(a[DiskUsedBytes]),
			DiskTotalBytes: (*protocol.BytesAggV1)(a[DiskTotalBytes]), Load1: (*protocol.LoadAggV1)(a[Load1]),
			NetRxBytes: (*protocol.BytesAggV1)(a[NetRxBytes]), NetTxBytes: (*protocol.BytesAggV1)(a[NetTxBytes]),
			GPUUtilPct: (*protocol.PercentAggV1)(a[GPUUtilPct]), GPUMemUsedBytes: (*protocol.BytesAggV1)(a[GPUMemUsedBytes]),
			GPUMemTotalBytes: (*protocol.BytesAggV1)(a[GPUMemTotalBytes]), GPUTempC: (*protocol.CelsiusAggV1)(a[GPUTempC]),
			GPUPowerW: (*protocol.WattsAggV1)(a[GPUPowerW]),
		},
	}
}
