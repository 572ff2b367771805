package storage

// TelemetryMetric is one metric of the Monitor's fixed set: Name is its key
// in a telemetry window's "metrics" object (docs/operations.md,
// "Telemetry"), Column the prefix of its five columns in telemetry_windows
// and telemetry_hourly (schema/0002_telemetry.sql), Unit what its values
// measure.
type TelemetryMetric struct {
	Name   string
	Column string
	Unit   string
}

// TelemetryMetrics is the fixed metric set, in column order. A window's
// MetricAgg array is indexed by position in this list. Adding a metric is a
// migration (five columns on each table) plus a row here.
var TelemetryMetrics = [NumTelemetryMetrics]TelemetryMetric{
	{"cpuPct", "cpu_pct", "percent of all CPUs (0-100)"},
	{"memUsedBytes", "mem_used_bytes", "bytes"},
	{"memTotalBytes", "mem_total_bytes", "bytes"},
	{"diskUsedBytes", "disk_used_bytes", "bytes (root filesystem)"},
	{"diskTotalBytes", "disk_total_bytes", "bytes (root filesystem)"},
	{"load1", "load1", "one-minute load average"},
	{"netRxBytes", "net_rx_bytes", "bytes received during the sample interval"},
	{"netTxBytes", "net_tx_bytes", "bytes sent during the sample interval"},
	{"gpuUtilPct", "gpu_util_pct", "percent (0-100), busiest GPU"},
	{"gpuMemUsedBytes", "gpu_mem_used_bytes", "bytes, all GPUs"},
	{"gpuMemTotalBytes", "gpu_mem_total_bytes", "bytes, all GPUs"},
	{"gpuTempC", "gpu_temp_c", "degrees Celsius, hottest GPU"},
	{"gpuPowerW", "gpu_power_w", "watts, all GPUs"},
}

// NumTelemetryMetrics is the size of the fixed metric set.
const NumTelemetryMetrics = 13

// Indexes of the metrics the anomaly rules and summaries read.
const (
	MetricCPUPct = iota
	MetricMemUsedBytes
	MetricMemTotalBytes
	MetricDiskUsedBytes
	MetricDiskTotalBytes
	MetricLoad1
	MetricNetRxBytes
	MetricNetTxBytes
	MetricGPUUtilPct
	MetricGPUMemUsedBytes
	MetricGPUMemTotalBytes
	MetricGPUTempC
	MetricGPUPowerW
)

// MetricAgg is the aggregate of one metric's samples inside one window (or,
// in an hourly rollup, of every sample of the hour): N samples (≥ 1), their
// Sum, Min, Max, and the Last sample taken. Units are the metric's.
type MetricAgg struct {
	N                   int64
	Sum, Min, Max, Last float64
}

// Merge returns the aggregate of a's and b's samples, where b's samples
// were taken after a's (so b's Last is the merged Last). A zero N on either
// side is "no samples".
func (a MetricAgg) Merge(b MetricAgg) MetricAgg {
	switch {
	case a.N == 0:
		return b
	case b.N == 0:
		return a
	}
	out := MetricAgg{N: a.N + b.N, Sum: a.Sum + b.Sum, Min: a.Min, Max: a.Max, Last: b.Last}
	if b.Min < out.Min {
		out.Min = b.Min
	}
	if b.Max > out.Max {
		out.Max = b.Max
	}
	return out
}

// TelemetryMetricSet holds one aggregate per metric of TelemetryMetrics, by
// index; nil means the agent did not send (or the hour held no sample of)
// that metric.
type TelemetryMetricSet [NumTelemetryMetrics]*MetricAgg
