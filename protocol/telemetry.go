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
	WindowStart     time.Time `json:"windowStart"`
	WindowSeconds   int64     `json:"windowSeconds"`
	Final           bool      `json:"final"`
	Metrics         MetricsV1 `json:"metrics"`
}

// MetricsV1 is the fixed metric set; every metric is optional. The server
// stores them in this order and under these names (storage.TelemetryMetrics
// mirrors it); the unit of each is in its comment.
type MetricsV1 struct {
	// CPUPct is percent of all CPUs (0-100).
	CPUPct *AggV1 `json:"cpuPct,omitempty"`
	// MemUsedBytes and MemTotalBytes are bytes.
	MemUsedBytes  *AggV1 `json:"memUsedBytes,omitempty"`
	MemTotalBytes *AggV1 `json:"memTotalBytes,omitempty"`
	// DiskUsedBytes and DiskTotalBytes are bytes of the root filesystem.
	DiskUsedBytes  *AggV1 `json:"diskUsedBytes,omitempty"`
	DiskTotalBytes *AggV1 `json:"diskTotalBytes,omitempty"`
	// Load1 is the one-minute load average.
	Load1 *AggV1 `json:"load1,omitempty"`
	// NetRxBytes and NetTxBytes are bytes received and sent during the
	// sample interval.
	NetRxBytes *AggV1 `json:"netRxBytes,omitempty"`
	NetTxBytes *AggV1 `json:"netTxBytes,omitempty"`
	// GPUUtilPct is percent (0-100) of the busiest GPU.
	GPUUtilPct *AggV1 `json:"gpuUtilPct,omitempty"`
	// GPUMemUsedBytes and GPUMemTotalBytes are bytes over all GPUs.
	GPUMemUsedBytes  *AggV1 `json:"gpuMemUsedBytes,omitempty"`
	GPUMemTotalBytes *AggV1 `json:"gpuMemTotalBytes,omitempty"`
	// GPUTempC is degrees Celsius of the hottest GPU.
	GPUTempC *AggV1 `json:"gpuTempC,omitempty"`
	// GPUPowerW is watts over all GPUs.
	GPUPowerW *AggV1 `json:"gpuPowerW,omitempty"`
}

// AggV1 aggregates one metric's samples taken inside the window: n samples
// (an integer ≥ 1), their sum, min, max and the last one, in the metric's
// unit (MetricsV1). N's tag says ingest's MaxSamplesPerWindow, 600
// (docs/operations.md, "OpenAPI").
type AggV1 struct {
	N    int64   `json:"n" schema:"required,minimum=1,maximum=600"`
	Sum  float64 `json:"sum"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Last float64 `json:"last"`
}
