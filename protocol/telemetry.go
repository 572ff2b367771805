package protocol

import "time"

// Window bounds (docs/operations.md, "Telemetry").
const (
	// WindowSeconds is the only window length accepted (seconds): one
	// minute.
	WindowSeconds = 60
	// MaxWindowAge is how old a window may be: one whose end
	// (windowStart + 60 s) is more than two hours before the server's
	// clock is refused as window_too_old.
	MaxWindowAge = 2 * time.Hour
)

// WindowV1 is the body of POST /api/ingest/telemetry: one minute window of
// one telemetry session (RFC 3339 windowStart, minute-aligned; unknown
// fields, and so unknown metric names, are refused). WindowSeconds is
// always the constant WindowSeconds.
type WindowV1 struct {
	EnvironmentSlug string    `json:"environmentSlug" schema:"required,pattern=slug"`
	DeploymentID    string    `json:"deploymentId" schema:"required,pattern=id"`
	SessionID       string    `json:"sessionId" schema:"required,pattern=id"`
	WindowStart     time.Time `json:"windowStart" schema:"required"`
	WindowSeconds   int64     `json:"windowSeconds" schema:"required,minimum=60,maximum=60"` // WindowSeconds
	Final           bool      `json:"final"`
	Metrics         MetricsV1 `json:"metrics"`
}

// MetricsV1 is the fixed metric set; every metric is optional. The server
// stores them in this order and under these names (storage.TelemetryMetrics
// mirrors it); the unit of each is in its comment, and its type (AggV1 with
// the unit's range in its tags) bounds min, max and last to the range
// ingest holds every sample to (docs/operations.md, "Telemetry").
type MetricsV1 struct {
	// CPUPct is percent of all CPUs (0-100).
	CPUPct *PercentAggV1 `json:"cpuPct,omitempty"`
	// MemUsedBytes and MemTotalBytes are bytes.
	MemUsedBytes  *BytesAggV1 `json:"memUsedBytes,omitempty"`
	MemTotalBytes *BytesAggV1 `json:"memTotalBytes,omitempty"`
	// DiskUsedBytes and DiskTotalBytes are bytes of the root filesystem.
	DiskUsedBytes  *BytesAggV1 `json:"diskUsedBytes,omitempty"`
	DiskTotalBytes *BytesAggV1 `json:"diskTotalBytes,omitempty"`
	// Load1 is the one-minute load average.
	Load1 *LoadAggV1 `json:"load1,omitempty"`
	// NetRxBytes and NetTxBytes are bytes received and sent during the
	// sample interval.
	NetRxBytes *BytesAggV1 `json:"netRxBytes,omitempty"`
	NetTxBytes *BytesAggV1 `json:"netTxBytes,omitempty"`
	// GPUUtilPct is percent (0-100) of the busiest GPU.
	GPUUtilPct *PercentAggV1 `json:"gpuUtilPct,omitempty"`
	// GPUMemUsedBytes and GPUMemTotalBytes are bytes over all GPUs.
	GPUMemUsedBytes  *BytesAggV1 `json:"gpuMemUsedBytes,omitempty"`
	GPUMemTotalBytes *BytesAggV1 `json:"gpuMemTotalBytes,omitempty"`
	// GPUTempC is degrees Celsius of the hottest GPU.
	GPUTempC *CelsiusAggV1 `json:"gpuTempC,omitempty"`
	// GPUPowerW is watts over all GPUs.
	GPUPowerW *WattsAggV1 `json:"gpuPowerW,omitempty"`
}

// AggV1 aggregates one metric's samples taken inside the window: n samples
// (an integer ≥ 1), their sum, min, max and the last one, in the metric's
// unit (MetricsV1). N's tag says ingest's MaxSamplesPerWindow, 600
// (docs/operations.md, "OpenAPI"). Each metric's own type below is AggV1
// with its unit's range on min, max and last: a *AggV1 converts to and
// from any of them. The sum's bound (n×min to n×max) relates fields, which
// a tag cannot state: ingest checks it.
type AggV1 struct {
	N    int64   `json:"n" schema:"required,minimum=1,maximum=600"`
	Sum  float64 `json:"sum"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Last float64 `json:"last"`
}

// PercentAggV1 is AggV1 in percent (0-100); the range is ingest's for the unit
// (TestMetricRangesAreTheTags).
type PercentAggV1 struct {
	N    int64   `json:"n" schema:"required,minimum=1,maximum=600"`
	Sum  float64 `json:"sum"`
	Min  float64 `json:"min" schema:"minimum=0,maximum=100"`
	Max  float64 `json:"max" schema:"minimum=0,maximum=100"`
	Last float64 `json:"last" schema:"minimum=0,maximum=100"`
}

// BytesAggV1 is AggV1 in bytes: 0 to 1 EiB (2^60); the range is ingest's for the unit
// (TestMetricRangesAreTheTags).
type BytesAggV1 struct {
	N    int64   `json:"n" schema:"required,minimum=1,maximum=600"`
	Sum  float64 `json:"sum"`
	Min  float64 `json:"min" schema:"minimum=0,maximum=1152921504606846976"`
	Max  float64 `json:"max" schema:"minimum=0,maximum=1152921504606846976"`
	Last float64 `json:"last" schema:"minimum=0,maximum=1152921504606846976"`
}

// LoadAggV1 is AggV1 in a load average: 0 to a million runnable tasks; the range is ingest's for the unit
// (TestMetricRangesAreTheTags).
type LoadAggV1 struct {
	N    int64   `json:"n" schema:"required,minimum=1,maximum=600"`
	Sum  float64 `json:"sum"`
	Min  float64 `json:"min" schema:"minimum=0,maximum=1e6"`
	Max  float64 `json:"max" schema:"minimum=0,maximum=1e6"`
	Last float64 `json:"last" schema:"minimum=0,maximum=1e6"`
}

// CelsiusAggV1 is AggV1 in degrees Celsius: -50 to 200; the range is ingest's for the unit
// (TestMetricRangesAreTheTags).
type CelsiusAggV1 struct {
	N    int64   `json:"n" schema:"required,minimum=1,maximum=600"`
	Sum  float64 `json:"sum"`
	Min  float64 `json:"min" schema:"minimum=-50,maximum=200"`
	Max  float64 `json:"max" schema:"minimum=-50,maximum=200"`
	Last float64 `json:"last" schema:"minimum=-50,maximum=200"`
}

// WattsAggV1 is AggV1 in watts: 0 to a megawatt; the range is ingest's for the unit
// (TestMetricRangesAreTheTags).
type WattsAggV1 struct {
	N    int64   `json:"n" schema:"required,minimum=1,maximum=600"`
	Sum  float64 `json:"sum"`
	Min  float64 `json:"min" schema:"minimum=0,maximum=1e6"`
	Max  float64 `json:"max" schema:"minimum=0,maximum=1e6"`
	Last float64 `json:"last" schema:"minimum=0,maximum=1e6"`
}
