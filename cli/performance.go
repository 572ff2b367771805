package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/bytesize"
)

type adminPerformanceCmd struct {
	Env        string        `arg:"" name:"slug" help:"Environment slug."`
	Deployment string        `arg:"" name:"deployment" help:"Deployment id."`
	Since      time.Duration `default:"24h" help:"How far back to show, up to now."`
	Step       time.Duration `help:"Width of a row (whole minutes, 1m to 24h; below 1h a divisor of the hour); default: the smallest the daemon allows for the range."`
	JSON       bool          `help:"Print JSON."`
}

func (*adminPerformanceCmd) operation() string { return adminapi.OpGetDeploymentPerformance }

// Run prints one deployment's performance as a compact table: one row per
// point, one column per metric that has data (the mean over the point),
// then the sessions and anomalies.
func (c *adminPerformanceCmd) Run(a *adminCmd) error {
	if c.Since <= 0 {
		return &exitError{code: ExitUsage, err: errors.New("--since must be positive")}
	}
	req := adminapi.DeploymentPerformanceRequest{EnvironmentSlug: c.Env, DeploymentID: c.Deployment,
		From: time.Now().Add(-c.Since).UTC().Truncate(time.Second), Step: c.Step}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.DeploymentPerformance, error) {
		return cl.GetDeploymentPerformance(ctx, req)
	}, printPerformance)
}

// metricLabel is a metric's short column heading.
var metricLabel = map[string]string{
	"cpuPct": "CPU%", "memUsedBytes": "MEM", "memTotalBytes": "MEM TOTAL", "diskUsedBytes": "DISK",
	"diskTotalBytes": "DISK TOTAL", "load1": "LOAD1", "netRxBytes": "NET RX/s", "netTxBytes": "NET TX/s",
	"gpuUtilPct": "GPU%", "gpuMemUsedBytes": "GPU MEM", "gpuMemTotalBytes": "GPU MEM TOTAL",
	"gpuTempC": "GPU °C", "gpuPowerW": "GPU W",
}

// netSampleSeconds is the agent's sampling interval (docs/operations.md,
// "Agent": a sample every 5 s): netRxBytes and netTxBytes are bytes moved
// during one sample ("Telemetry"), so a mean divided by it is bytes per
// second, as the console's network chart shows them.
const netSampleSeconds = 5

// formatValue is v compactly in the metric's unit; network means are
// written per second.
func formatValue(metric string, v float64) string {
	if metric == "netRxBytes" || metric == "netTxBytes" {
		return bytesize.PerSecond(v / netSampleSeconds)
	}
	if strings.HasSuffix(metric, "Bytes") {
		if v < 0 {
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
		return humanize.IBytes(uint64(v))
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func printPerformance(w io.Writer, p adminapi.DeploymentPerformance) error {
	fmt.Fprintf(w, "%s / %s: %s to %s, step %s\n", displayText(p.EnvironmentSlug), displayText(p.DeploymentID),
		p.From.UTC().Format(time.RFC3339), p.To.UTC().Format(time.RFC3339), time.Duration(p.StepSeconds)*time.Second)
	if p.Note != "" {
		fmt.Fprintf(w, "note: %s\n", p.Note)
	}
	var cols []adminapi.MetricSeries
	rows := map[time.Time]map[string]string{}
	var times []time.Time
	for _, s := range p.Series {
		if len(s.Points) == 0 {
			continue
		}
		cols = append(cols, s)
		for _, pt := range s.Points {
			r, ok := rows[pt.T]
			if !ok {
				r = map[string]string{}
				rows[pt.T] = r
				times = append(times, pt.T)
			}
			r[s.Metric] = formatValue(s.Metric, pt.Mean)
			if pt.Seconds != 0 {
				r[""] = " (hour)"
			}
		}
	}
	tw := table(w)
	if len(cols) == 0 {
		fmt.Fprintln(w, "no telemetry in this range")
	} else {
		head := []string{"TIME (mean per point)"}
		for _, s := range cols {
			head = append(head, metricLabel[s.Metric])
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		slices.SortFunc(times, time.Time.Compare)
		for _, t := range times {
			line := []string{t.UTC().Format("2006-01-02 15:04") + rows[t][""]}
			for _, s := range cols {
				v := rows[t][s.Metric]
				if v == "" {
					v = "-"
				}
				line = append(line, v)
			}
			fmt.Fprintln(tw, strings.Join(line, "\t"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "sessions: %d", len(p.Sessions))
	if p.SessionsTruncated {
		fmt.Fprintf(w, " (the newest %d)", len(p.Sessions))
	}
	fmt.Fprintln(w)
	tw = table(w)
	for _, s := range p.Sessions {
		state := "open"
		if !s.EndedAt.IsZero() {
			state = "ended " + s.EndReason
		}
		summary := "no summary yet"
		if len(s.Summary) > 0 {
			summary = "summary " + displayText(string(s.Summary))
		}
		fmt.Fprintf(tw, "  %s\t%s to %s\t%d %s\t%s\t%s\n", displayText(s.ID), timeOrDash(s.FirstWindowAt), timeOrDash(s.LastWindowAt), s.Windows, plural(s.Windows, "window", "windows"), state, summary)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "anomalies: %d\n", len(p.Anomalies))
	tw = table(w)
	for _, an := range p.Anomalies {
		fmt.Fprintf(tw, "  %s\t%s\t%s to %s\t%d %s\n", displayText(an.SessionID), displayText(an.Kind), timeOrDash(an.FirstSeenAt), timeOrDash(an.LastSeenAt), an.Windows, plural(an.Windows, "window", "windows"))
	}
	return tw.Flush()
}
