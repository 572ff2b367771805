// Package telemetry is the Monitor's telemetry: minute source windows with
// their retry receipts, sessions and terminal summaries, anomalies, the
// retention loop that folds detail into hourly rollups, and erase
// (docs/operations.md, "Telemetry"). The signed HTTP route is ingest's; this
// package decides what a verified window means, inside the writer's unit.
package telemetry

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// Window bounds (docs/operations.md, "Telemetry").
const (
	// FinalWindowGrace is how long after a deployment ended its final
	// windows (those starting before ended_at) are still admitted.
	FinalWindowGrace = 15 * time.Minute
	// MaxSamplesPerWindow bounds a metric's n: ten samples a second, far
	// above any sampler's rate, so a corrupt count is refused rather than
	// skewing every mean it is folded into.
	MaxSamplesPerWindow = 600
)

// window is one minute; windowStart is aligned to it.
const window = protocol.WindowSeconds * time.Second

// metricList returns m's metrics in storage.TelemetryMetrics order, each
// as the AggV1 its unit's type converts to: the pointers are m's own.
func metricList(m *protocol.MetricsV1) [storage.NumTelemetryMetrics]*protocol.AggV1 {
	return [...]*protocol.AggV1{(*protocol.AggV1)(m.CPUPct), (*protocol.AggV1)(m.MemUsedBytes), (*protocol.AggV1)(m.MemTotalBytes),
		(*protocol.AggV1)(m.DiskUsedBytes), (*protocol.AggV1)(m.DiskTotalBytes), (*protocol.AggV1)(m.Load1),
		(*protocol.AggV1)(m.NetRxBytes), (*protocol.AggV1)(m.NetTxBytes), (*protocol.AggV1)(m.GPUUtilPct),
		(*protocol.AggV1)(m.GPUMemUsedBytes), (*protocol.AggV1)(m.GPUMemTotalBytes), (*protocol.AggV1)(m.GPUTempC),
		(*protocol.AggV1)(m.GPUPowerW)}
}

// metricRange is the range every sample of a metric must fall in: its
// type's min, max and last tags in protocol.MetricsV1 say it, and
// ValidateWindow's Check holds them (TestMetricRangesAreTheTags).
type metricRange struct{ lo, hi float64 }

// Every range is finite and far from float64's limits: sums of a window's
// samples, an hour's windows and a series' points must stay finite (an
// infinite total cannot be written as JSON, so it would break the
// performance API and terminal summaries).
var (
	percent = metricRange{0, 100}
	// bytes: 1 EiB, beyond any droplet's memory, disk or a minute's
	// traffic.
	bytes = metricRange{0, 1 << 60}
	// load: a million runnable tasks.
	load = metricRange{0, 1e6}
	// celsius: a GPU sensor reading outside this is a fault, not a value.
	celsius = metricRange{-50, 200}
	// watts: a megawatt, beyond any GPU droplet.
	watts = metricRange{0, 1e6}
)

// ranges is indexed like storage.TelemetryMetrics.
var ranges = [storage.NumTelemetryMetrics]metricRange{
	percent, bytes, bytes, bytes, bytes, load,
	bytes, bytes, percent, bytes, bytes, celsius, watts,
}

// Invalid is a window whose fields are well-formed JSON of the right shape
// but break a value rule: 422 invalid_body. Its message names the field,
// never its value.
type Invalid struct{ Message string }

func (e *Invalid) Error() string { return e.Message }

// ValidateWindow checks w's values (docs/operations.md, "Telemetry").
// Errors: *Invalid.
func ValidateWindow(w *protocol.WindowV1) error {
	bad := func(format string, a ...any) error { return &Invalid{Message: fmt.Sprintf(format, a...)} }
	// The rules WindowV1's schema tags declare, which the OpenAPI
	// document carries too (docs/operations.md, "OpenAPI"): windowStart,
	// windowSeconds (exactly protocol.WindowSeconds), each metric's n
	// from 1 to MaxSamplesPerWindow and its min, max and last within its
	// unit's range (ranges) among them.
	if v := apischema.Check(w); v != nil {
		return bad("%s", v.Message())
	}
	// What a schema cannot state: the minute's alignment, the years, and
	// the relations between a metric's fields.
	switch {
	case !w.WindowStart.Truncate(time.Minute).Equal(w.WindowStart):
		return bad("windowStart must be aligned to a whole minute")
	case w.WindowStart.UTC().Year() < 2000 || w.WindowStart.UTC().Year() > 9999:
		return bad("windowStart must fall within the years 2000-9999 in UTC")
	}
	for i, a := range metricList(&w.Metrics) {
		if a == nil {
			continue
		}
		name := storage.TelemetryMetrics[i].Name
		switch {
		case a.Min > a.Max:
			return bad("metrics.%s.min must not exceed max", name)
		case a.Last < a.Min || a.Last > a.Max:
			return bad("metrics.%s.last must lie between min and max", name)
		case !sumFits(a):
			return bad("metrics.%s.sum must lie between n×min and n×max", name)
		}
	}
	return nil
}

// sumFits reports whether sum could be the sum of n samples within
// [min, max], allowing float rounding.
func sumFits(a *protocol.AggV1) bool {
	n := float64(a.N)
	lo, hi := n*a.Min, n*a.Max
	slack := 1e-9 * math.Max(math.Abs(lo), math.Abs(hi))
	return a.Sum >= lo-slack && a.Sum <= hi+slack && !math.IsInf(a.Sum, 0)
}

// CanonicalWindow returns w's canonical encoding — its JSON with
// windowStart in UTC and fields in their fixed order — and its SHA-256,
// the body hash a retry receipt holds. Two bodies that decode to the same
// window (whitespace, key order, an equivalent time offset) are the same
// window; any change of value is a different one.
func CanonicalWindow(w *protocol.WindowV1) ([]byte, [32]byte) {
	c := *w
	c.WindowStart = c.WindowStart.UTC()
	// -0 and 0 are the same value: encode both as 0 (x + 0 is +0 for
	// x = -0 and x otherwise).
	// A copy of each metric: c shares w's pointers.
	m := &c.Metrics
	m.CPUPct, m.GPUUtilPct = norm(m.CPUPct), norm(m.GPUUtilPct)
	m.MemUsedBytes, m.MemTotalBytes, m.DiskUsedBytes, m.DiskTotalBytes = norm(m.MemUsedBytes), norm(m.MemTotalBytes), norm(m.DiskUsedBytes), norm(m.DiskTotalBytes)
	m.NetRxBytes, m.NetTxBytes = norm(m.NetRxBytes), norm(m.NetTxBytes)
	m.GPUMemUsedBytes, m.GPUMemTotalBytes = norm(m.GPUMemUsedBytes), norm(m.GPUMemTotalBytes)
	m.Load1, m.GPUTempC, m.GPUPowerW = norm(m.Load1), norm(m.GPUTempC), norm(m.GPUPowerW)
	b, err := json.Marshal(&c)
	if err != nil {
		// Every field is a string, bool, integer, finite float or a
		// validated time: Marshal cannot fail on a validated window.
		panic(fmt.Sprintf("telemetry: canonical encoding: %v", err))
	}
	return b, sha256.Sum256(b)
}

// aggTypes are the metric types of protocol.MetricsV1.
type aggTypes interface {
	protocol.PercentAggV1 | protocol.BytesAggV1 | protocol.LoadAggV1 | protocol.CelsiusAggV1 | protocol.WattsAggV1
}

// norm is a copy of a with -0 written as 0 (x + 0 is +0 for x = -0 and x
// otherwise): the two are the same value. nil stays nil.
func norm[T aggTypes](a *T) *T {
	if a == nil {
		return nil
	}
	g := protocol.AggV1(*a)
	g.Sum, g.Min, g.Max, g.Last = g.Sum+0, g.Min+0, g.Max+0, g.Last+0
	c := T(g)
	return &c
}

// metricSet converts w's metrics to storage's indexed set.
func metricSet(w *protocol.WindowV1) storage.TelemetryMetricSet {
	var out storage.TelemetryMetricSet
	for i, a := range metricList(&w.Metrics) {
		if a != nil {
			out[i] = &storage.MetricAgg{N: a.N, Sum: a.Sum, Min: a.Min, Max: a.Max, Last: a.Last}
		}
	}
	return out
}
