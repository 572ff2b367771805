package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/bytesize"
)

// adminReportCmd prints the operations report (docs/operations.md,
// "Operations report").
type adminReportCmd struct {
	Since time.Duration `default:"24h" help:"How far back the report reaches (1h to 2160h); request figures cover whole UTC hours."`
	JSON  bool          `help:"Print JSON."`
}

func (*adminReportCmd) operation() string { return adminapi.OpGetOperationsReport }

// Run fetches and prints the report.
func (c *adminReportCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.OperationsReport, error) {
		return cl.GetOperationsReport(ctx, c.Since)
	}, printOperationsReport)
}

// printOperationsReport prints the report as tables.
func printOperationsReport(w io.Writer, r adminapi.OperationsReport) error {
	fmt.Fprintf(w, "Operations report from %s to %s (hours with traffic: %d).\n", timeOrDash(r.Since), timeOrDash(r.Until), r.HoursWithTraffic)
	// What lags and why: rows are written once an hour, by the next hour's
	// first request or at shutdown (docs/operations.md, "Operations report").
	fmt.Fprintln(w, "Requests include the hour under way (counted live); process time lags: an hour's row is written by the next UTC hour's first request or at shutdown.")
	fmt.Fprintln(w)
	tw := table(w)
	fmt.Fprintln(tw, "ROUTE GROUP\tREQUESTS\t5XX\tP50\tP99")
	for _, g := range r.Routes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", g.Group, g.Requests, g.ServerErrors, quantileText(r, g, 0.5, g.P50Ms, g.P50Over), quantileText(r, g, 0.99, g.P99Ms, g.P99Over))
	}
	if len(r.Routes) == 0 {
		fmt.Fprintln(tw, "(no requests)\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case len(r.Routes) == 0:
	case len(r.LatencyBoundsMs) > 0:
		fmt.Fprintln(w, "P50 and P99 are estimates (≈) interpolated within the /metrics histogram's latency buckets, as Prometheus's histogram_quantile does; >5000 ms is past the last bucket.")
	default:
		fmt.Fprintln(w, "P50 and P99 are latency bucket edges (this daemon sends no bucket counts to interpolate from): ≤250 ms means at most 250 ms.")
	}
	p := r.Process
	fmt.Fprintf(w, "\nProcess (hours written so far): %.1f s wall, %.1f s CPU (active %.2f%%, idle %.1f s).\n", p.WallSeconds, p.CPUSeconds, 100*p.ActiveShare, p.IdleSeconds)
	d := r.Database
	fmt.Fprintf(w, "Database: %s (%s over the span), WAL %s (%s).\n", bytesize.Format(d.Bytes), bytesize.Signed(d.GrowthBytes), bytesize.Format(d.WALBytes), bytesize.Signed(d.WALGrowthBytes))
	if r.Replica.Known {
		more := ""
		if r.Replica.Truncated {
			more = " at least"
		}
		fmt.Fprintf(w, "Replica:%s %d objects, %s.\n", more, r.Replica.Objects, bytesize.Format(r.Replica.Bytes))
	} else {
		fmt.Fprintf(w, "Replica: %s.\n", r.Replica.Note)
	}
	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "LOOP\tRUNS\tFAILURES\tBACKLOG\tCOUNTS")
	for _, l := range r.Loops {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", l.Name, l.Runs, l.Failures, l.Backlog, l.Counts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(r.QuotaRefusals) == 0 {
		_, err := fmt.Fprintln(w, "Quota refusals: none recorded.")
		return err
	}
	tw = table(w)
	fmt.Fprintln(tw, "QUOTA\tEVENTS (deployment or environment hours refused)")
	for _, q := range r.QuotaRefusals {
		fmt.Fprintf(tw, "%s\t%d\n", q.Quota, q.Events)
	}
	return tw.Flush()
}

// quantileText is g's q latency quantile in ms: "≈" the estimate
// interpolated within its bucket (adminapi.LatencyEstimateMs), ">" past the
// last bucket, "-" without requests; "≤" the bucket bound edgeMs when the
// answer carries no bucket counts (a daemon before them;
// docs/operations.md, "Operations report").
func quantileText(r adminapi.OperationsReport, g adminapi.ReportRouteGroup, q, edgeMs float64, edgeOver bool) string {
	if ms, over, ok := adminapi.LatencyEstimateMs(r.LatencyBoundsMs, g.LatencyBuckets, q); ok {
		if over {
			return fmt.Sprintf(">%g ms", ms)
		}
		return "≈ " + msText(ms) + " ms"
	}
	switch {
	case edgeOver:
		return fmt.Sprintf(">%g ms", edgeMs)
	case edgeMs == 0:
		return "-"
	}
	return fmt.Sprintf("≤%g ms", edgeMs)
}

// msText writes an estimate in ms: whole milliseconds from 10 ms, one
// decimal from 1 ms, two below; the buckets do not support more.
func msText(ms float64) string {
	switch {
	case ms >= 10:
		return strconv.FormatFloat(ms, 'f', 0, 64)
	case ms >= 1:
		return strconv.FormatFloat(ms, 'f', 1, 64)
	}
	return strconv.FormatFloat(ms, 'f', 2, 64)
}
