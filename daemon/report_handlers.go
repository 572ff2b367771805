package daemon

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// Operations report bounds (docs/operations.md, "Operations report").
const (
	// defaultReportSpan is the span of a report without ?since: one day,
	// the before-and-after unit an operator compares.
	defaultReportSpan = 24 * time.Hour
	// maxReportSpan bounds ?since: 90 days of hourly rows (2,160 hours ×
	// five route groups) is the most one report reads.
	maxReportSpan = 90 * 24 * time.Hour
)

// The replica listing at report time (docs/operations.md, "Operations
// report").
const (
	// reportReplicaObjects caps the objects one report lists: ten S3 LIST
	// pages, far above the few hundred LTX files compaction and retention
	// leave, so a report costs at most 14 LIST requests (a page per level
	// at least) even when retention has fallen behind.
	reportReplicaObjects = 10_000
	// reportReplicaTimeout bounds the listing: a replica that is down
	// costs the report this much, then it answers without the figures.
	reportReplicaTimeout = 10 * time.Second
)

// reportHandlers serve the operations report: read-only, from stored rows
// and the hour being counted. They hold the database (read pool), the clock
// and the request statistics.
type reportHandlers struct {
	db    *storage.DB
	clock clockwork.Clock
	stats *requestStats
	// repl lists the replica (nil: replication is off).
	repl *storage.Replicator
}

func (h *reportHandlers) register(o *operations) {
	handleOp(o, adminapi.OpGetOperationsReport, h.get)
}

func (h *reportHandlers) get(ctx context.Context, req adminapi.OperationsReportRequest) (adminapi.OperationsReport, error) {
	span := req.Since
	if span == 0 {
		span = defaultReportSpan
	}
	if span < time.Hour || span > maxReportSpan {
		return adminapi.OperationsReport{}, fail(http.StatusBadRequest, "bad_since", "since must be a duration from 1h to 2160h")
	}
	now := h.clock.Now().UTC()
	since := now.Add(-span).Truncate(time.Hour)
	reqs, err := storage.RequestHoursSince(ctx, h.db.Read, since)
	if err != nil {
		return adminapi.OperationsReport{}, err
	}
	procs, err := storage.ProcessHoursSince(ctx, h.db.Read, since)
	if err != nil {
		return adminapi.OperationsReport{}, err
	}
	loops, err := storage.LoopEvidenceSince(ctx, h.db.Read, since, now)
	if err != nil {
		return adminapi.OperationsReport{}, err
	}
	quotas, err := storage.QuotaEventsSince(ctx, h.db.Read, since)
	if err != nil {
		return adminapi.OperationsReport{}, err
	}
	for _, r := range h.stats.live() {
		// The hour being counted is older than the span when the daemon
		// idled longer than it since its last request.
		if !r.HourStart.Before(since) {
			reqs = append(reqs, r)
		}
	}
	out := adminapi.OperationsReport{Since: since, Until: now, Replica: h.replica(ctx),
		Routes: reportRoutes(reqs), Loops: []adminapi.ReportLoop{}, QuotaRefusals: []adminapi.ReportQuotaEvents{},
		LatencyBoundsMs: make([]float64, len(storage.RequestLatencyBounds))}
	for i, b := range storage.RequestLatencyBounds {
		out.LatencyBoundsMs[i] = msFloat(b)
	}
	hours := map[time.Time]bool{}
	for _, r := range reqs {
		hours[r.HourStart] = true
	}
	out.HoursWithTraffic = len(hours)
	for _, p := range procs {
		out.Process.WallSeconds += p.Wall.Seconds()
		out.Process.CPUSeconds += p.CPU.Seconds()
	}
	if out.Process.WallSeconds > 0 {
		out.Process.ActiveShare = out.Process.CPUSeconds / out.Process.WallSeconds
	}
	out.Process.IdleSeconds = max(out.Process.WallSeconds-out.Process.CPUSeconds, 0)
	out.Database.Bytes, out.Database.WALBytes = h.db.Sizes()
	if len(procs) > 0 {
		first := procs[0]
		out.Database.GrowthBytes = out.Database.Bytes - first.DBBytes
		out.Database.WALGrowthBytes = out.Database.WALBytes - first.WALBytes
		out.Database.FirstRecordedAt = &first.RecordedAt
	}
	for _, l := range loops {
		out.Loops = append(out.Loops, adminapi.ReportLoop{Name: l.Name, Runs: l.Runs, Failures: l.Failures, Backlog: l.Backlog, Counts: l.Counts})
	}
	for q, n := range quotas {
		out.QuotaRefusals = append(out.QuotaRefusals, adminapi.ReportQuotaEvents{Quota: q, Events: n})
	}
	sort.Slice(out.QuotaRefusals, func(i, j int) bool { return out.QuotaRefusals[i].Quota < out.QuotaRefusals[j].Quota })
	return out, nil
}

// replica lists the replica now, bounded by reportReplicaObjects and
// reportReplicaTimeout; a failure is reported by its kind, never its
// endpoint or path.
func (h *reportHandlers) replica(ctx context.Context) adminapi.ReportReplica {
	if h.repl == nil {
		return adminapi.ReportReplica{Note: "replication is off"}
	}
	ctx, cancel := context.WithTimeout(ctx, reportReplicaTimeout)
	defer cancel()
	inv, err := h.repl.Inventory(ctx, reportReplicaObjects)
	if err != nil {
		return adminapi.ReportReplica{Note: err.Error()}
	}
	out := adminapi.ReportReplica{Known: true, Objects: inv.Objects, Bytes: inv.Bytes, Truncated: inv.Truncated}
	if inv.Truncated {
		out.Note = fmt.Sprintf("the listing stopped at %d objects: the figures are lower bounds", reportReplicaObjects)
	}
	return out
}

// reportRoutes sums rows by route group (sorted by group) with p50 and p99
// from the summed buckets.
func reportRoutes(rows []storage.RequestHour) []adminapi.ReportRouteGroup {
	sums := map[string]*storage.RequestHour{}
	for _, r := range rows {
		s := sums[r.Group]
		if s == nil {
			s = &storage.RequestHour{Group: r.Group, Buckets: make([]int64, len(storage.RequestLatencyBounds)+1)}
			sums[r.Group] = s
		}
		s.Requests += r.Requests
		s.ServerErrors += r.ServerErrors
		for i, n := range r.Buckets {
			s.Buckets[i] += n
		}
	}
	out := make([]adminapi.ReportRouteGroup, 0, len(sums))
	for _, s := range sums {
		g := adminapi.ReportRouteGroup{Group: s.Group, Requests: s.Requests, ServerErrors: s.ServerErrors, LatencyBuckets: s.Buckets}
		if d, over, ok := storage.LatencyQuantile(s.Buckets, 0.5); ok {
			g.P50Ms, g.P50Over = msFloat(d), over
		}
		if d, over, ok := storage.LatencyQuantile(s.Buckets, 0.99); ok {
			g.P99Ms, g.P99Over = msFloat(d), over
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// msFloat is d in milliseconds with sub-millisecond precision.
func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
