package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Operations report operation id (docs/operations.md, "Operations report").
const OpGetOperationsReport = "adminGetOperationsReport"

var reportOperations = []Operation{
	{ID: OpGetOperationsReport, MCP: mcpRead, Method: methodGet, Path: "/api/admin/report", Status: http.StatusOK,
		Request: typeOf[OperationsReportRequest](), Response: typeOf[OperationsReport](),
		Summary: "operations report from stored evidence (?since=24h, at most 2160h): requests and p50/p99 by route group, active time, database and WAL growth, loop runs, quota refusals; the replica's objects and bytes by a bounded listing now"},
}

// OperationsReportRequest holds adminGetOperationsReport's query parameter.
type OperationsReportRequest struct {
	// Since is how far back the report reaches (Go duration, 1h to 2160h,
	// i.e. 90 days); zero means 24h. Request figures cover the whole UTC
	// hours starting at or after now−Since.
	Since time.Duration `query:"since" json:"-"`
}

// OperationsReport answers adminGetOperationsReport: the before-and-after
// evidence of the daemon over a span, read from stored rows (so it covers
// the span across restarts) plus the hour being counted in memory.
type OperationsReport struct {
	// Since is the start of the first hour covered; Until is now.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// HoursWithTraffic counts the hours in the span that had requests
	// (only those hours store rows).
	HoursWithTraffic int                 `json:"hoursWithTraffic"`
	Routes           []ReportRouteGroup  `json:"routes"`
	Process          ReportProcess       `json:"process"`
	Database         ReportDatabase      `json:"database"`
	Replica          ReportReplica       `json:"replica"`
	Loops            []ReportLoop        `json:"loops"`
	QuotaRefusals    []ReportQuotaEvents `json:"quotaRefusals"`
	// LatencyBoundsMs are the upper bounds of the latency buckets every
	// route group's LatencyBuckets count in, in milliseconds, ascending:
	// the /metrics histogram's bounds (0.5 ms to 5000 ms).
	LatencyBoundsMs []float64 `json:"latencyBoundsMs"`
}

// ReportRouteGroup is one route group's requests over the span.
// P50Ms and P99Ms are the upper bound of the latency bucket holding the
// quantile (no request in that bucket was slower), in milliseconds; a
// *Over flag means the quantile is above the last bucket (5000 ms).
// LatencyBuckets hold the counts an estimate within the bucket is
// interpolated from (LatencyEstimateMs; docs/operations.md, "Operations
// report").
type ReportRouteGroup struct {
	// Group is public, probe, admin, ingest, console or unrouted.
	Group        string  `json:"group"`
	Requests     int64   `json:"requests"`
	ServerErrors int64   `json:"serverErrors"`
	P50Ms        float64 `json:"p50Ms"`
	P50Over      bool    `json:"p50Over,omitempty"`
	P99Ms        float64 `json:"p99Ms"`
	P99Over      bool    `json:"p99Over,omitempty"`
	// LatencyBuckets counts the group's requests per latency bucket: entry
	// i those slower than LatencyBoundsMs[i-1] (0 for i = 0) and at most
	// LatencyBoundsMs[i], and one entry more for those slower than the
	// last bound. Not cumulative.
	LatencyBuckets []int64 `json:"latencyBuckets"`
}

// LatencyEstimateMs estimates the q quantile (0 < q ≤ 1) of the requests
// counted in buckets (a ReportRouteGroup's LatencyBuckets, with the
// report's LatencyBoundsMs), in milliseconds, as Prometheus's
// histogram_quantile does: the rank q·n falls in a bucket, and the
// estimate is linear within it, from the previous bucket's bound (0 for
// the first) to its own. It assumes requests spread evenly within the
// bucket, so it is an estimate, never above the bucket's bound. over is
// true when the rank falls past the last bound (ms is then that bound);
// ok is false without requests or when the slices do not fit
// (docs/operations.md, "Operations report").
func LatencyEstimateMs(boundsMs []float64, buckets []int64, q float64) (ms float64, over, ok bool) {
	if len(boundsMs) == 0 || len(buckets) != len(boundsMs)+1 || !(q > 0 && q <= 1) {
		return 0, false, false
	}
	var total int64
	for _, n := range buckets {
		total += n
	}
	if total <= 0 {
		return 0, false, false
	}
	rank := q * float64(total)
	var below int64
	for i, n := range buckets[:len(boundsMs)] {
		if n > 0 && float64(below+n) >= rank {
			lower := 0.0
			if i > 0 {
				lower = boundsMs[i-1]
			}
			return lower + (boundsMs[i]-lower)*(rank-float64(below))/float64(n), false, true
		}
		below += n
	}
	return boundsMs[len(boundsMs)-1], true, true
}

// ReportProcess is the daemon's active vs idle time over the stored rows
// of the span: wall and CPU seconds measured between successive rows.
type ReportProcess struct {
	WallSeconds float64 `json:"wallSeconds"`
	CPUSeconds  float64 `json:"cpuSeconds"`
	// ActiveShare is CPUSeconds / WallSeconds (0 without wall time): the
	// share of one core the daemon kept busy.
	ActiveShare float64 `json:"activeShare"`
	// IdleSeconds is WallSeconds − CPUSeconds, at least 0.
	IdleSeconds float64 `json:"idleSeconds"`
}

// ReportDatabase is the database and WAL size now and their growth over
// the span (now minus the first row's sizes; 0 without a row), in bytes.
type ReportDatabase struct {
	Bytes          int64 `json:"bytes"`
	WALBytes       int64 `json:"walBytes"`
	GrowthBytes    int64 `json:"growthBytes"`
	WALGrowthBytes int64 `json:"walGrowthBytes"`
	// FirstRecordedAt is when the sizes growth is measured from were
	// recorded; absent without a row.
	FirstRecordedAt *time.Time `json:"firstRecordedAt,omitempty"`
}

// ReportReplica is what the replica's current generation holds now, by a
// bounded listing at report time (docs/operations.md, "Operations
// report"): Objects LTX files of Bytes bytes. Known is false when the
// listing failed or replication is off, and Note says why; Truncated is
// true when the listing stopped at its cap (the figures are then lower
// bounds).
type ReportReplica struct {
	Known     bool   `json:"known"`
	Objects   int64  `json:"objects"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated,omitempty"`
	Note      string `json:"note,omitempty"`
}

// ReportLoop is one background loop's stored evidence over the span;
// Counts says what Runs, Failures and Backlog count for it.
type ReportLoop struct {
	Name     string `json:"name"`
	Runs     int64  `json:"runs"`
	Failures int64  `json:"failures"`
	Backlog  int64  `json:"backlog"`
	Counts   string `json:"counts"`
}

// ReportQuotaEvents counts one quota's quota-exceeded events over the span
// (one per quota, deployment or environment and clock hour: refused
// requests beyond the first of an hour are not counted).
type ReportQuotaEvents struct {
	Quota  string `json:"quota"`
	Events int64  `json:"events"`
}

// GetOperationsReport calls adminGetOperationsReport; since 0 means 24h.
func (c *Client) GetOperationsReport(ctx context.Context, since time.Duration) (OperationsReport, error) {
	return call[OperationsReport](ctx, c, OpGetOperationsReport, OperationsReportRequest{Since: since})
}
