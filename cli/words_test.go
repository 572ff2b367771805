package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestOperatorWords: the text commands print sizes in the units the console
// and environment list use, rates per second, say what lags and what a
// quantile is, and define the words an operator meets there
// (docs/operations.md, "Operations report" and "Glossary").
func TestOperatorWords(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	mode := "live"
	for _, tc := range []struct {
		name          string
		print         func(w *bytes.Buffer) error
		want, without []string
	}{
		{name: "status sizes", print: func(w *bytes.Buffer) error {
			return printStatus(w, statusAnswer{Status: adminapi.Status{DBSizeBytes: 3 << 20},
				Storage:    &adminapi.StorageHealth{FreeBytes: 10 << 30, TotalBytes: 40 << 30, MinFreeBytes: 512 << 20},
				ReaperMode: &mode, Costs: &mode}, false)
		}, want: []string{"3.0 MiB", "10.0 GiB free of 40.0 GiB, floor 512.0 MiB"}, without: []string{" bytes"}},
		{name: "report sizes, lag and quantiles", print: func(w *bytes.Buffer) error {
			return printOperationsReport(w, adminapi.OperationsReport{Since: at, Until: at.Add(time.Hour),
				// 100 requests: 94 at most 500 ms, 6 in (500, 1000] ms, so
				// p99 is ≈ 500 + 500·5/6 ms; p50 ≈ 50/94 of (250, 500].
				LatencyBoundsMs: []float64{0.5, 1, 2.5, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000},
				Routes: []adminapi.ReportRouteGroup{{Group: "admin", Requests: 100, P50Ms: 500, P99Ms: 1000,
					LatencyBuckets: []int64{0, 0, 0, 0, 0, 0, 0, 0, 0, 94, 6, 0, 0, 0}}},
				Database: adminapi.ReportDatabase{Bytes: 2 << 20, GrowthBytes: -1536, WALBytes: 4096, WALGrowthBytes: 4096},
				Replica:  adminapi.ReportReplica{Known: true, Objects: 4, Bytes: 1 << 20}})
		}, want: []string{"Database: 2.0 MiB (-1.5 KiB over the span), WAL 4.0 KiB (+4.0 KiB)", "4 objects, 1.0 MiB",
			"process time lags: an hour's row is written by the next UTC hour's first request", "estimates (≈) interpolated",
			"≈ 383 ms", "≈ 917 ms"},
			without: []string{" bytes", "≤1000 ms", "≤500 ms", "bucket edges"}},
		{name: "report quantiles from a daemon without buckets", print: func(w *bytes.Buffer) error {
			return printOperationsReport(w, adminapi.OperationsReport{Since: at, Until: at.Add(time.Hour),
				Routes: []adminapi.ReportRouteGroup{{Group: "admin", Requests: 3, P50Ms: 5, P99Ms: 1000}}})
		}, want: []string{"≤5 ms", "≤1000 ms"}, without: []string{"≈"}},
		{name: "performance network per second", print: func(w *bytes.Buffer) error {
			return printPerformance(w, adminapi.DeploymentPerformance{From: at, To: at.Add(time.Hour), StepSeconds: 600,
				Series: []adminapi.MetricSeries{{Metric: "netRxBytes", Points: []adminapi.PerformancePoint{{T: at, Mean: 10240}}}}})
		}, want: []string{"NET RX/s", "2.0 KiB/s"}, without: []string{"10 KiB", "NET RX "}},
		{name: "loop not configured", print: func(w *bytes.Buffer) error {
			return printLoops(w, []adminapi.LoopSwitch{{Name: "costs"}})
		}, want: []string{"not running: not started by this daemon, its token or setting is not configured"}, without: []string{"not run here", "running (", "PAUSED"}},
		{name: "loop not configured, paused", print: func(w *bytes.Buffer) error {
			return printLoops(w, []adminapi.LoopSwitch{{Name: "costs", Paused: true}})
		}, want: []string{"PAUSED, and not running: not started by this daemon, its token or setting is not configured"}},
		{name: "performance, one window", print: func(w *bytes.Buffer) error {
			return printPerformance(w, adminapi.DeploymentPerformance{Sessions: []adminapi.PerformanceSession{{ID: "s1", Windows: 1}},
				Anomalies: []adminapi.PerformanceAnomaly{{SessionID: "s1", Kind: "cpu", Windows: 1}}})
		}, want: []string{"1 window ", "1 window\n"}, without: []string{"1 windows"}},
		{name: "deployment end sunk", print: func(w *bytes.Buffer) error {
			return printEndedDeployment(w, adminapi.EndedDeployment{EnvironmentSlug: "demo", DeploymentID: "d1", EndedAt: at, EnvironmentSunk: true})
		}, want: []string{"marked sunk (nothing runs in it; the next deployment's first heartbeat makes it active again)"}},
		{name: "erasure batches", print: func(w *bytes.Buffer) error {
			return printErasure(w, adminapi.TelemetryErasure{EnvironmentSlug: "demo", ErasureID: "e1", Batches: 1, FinishedAt: at})
		}, want: []string{"in 1 batch of at most 5,000 rows"}, without: []string{"writer units"}},
		{name: "fleet sunk", print: func(w *bytes.Buffer) error {
			return printFleet(w, adminapi.Fleet{Environments: []adminapi.FleetEnvironment{{Slug: "gone", Status: "sunk"}}})
		}, want: []string{"sunk: no deployment of the environment is active; its next deployment's first heartbeat makes it active again."}},
		{name: "environment list sunk", print: func(w *bytes.Buffer) error {
			return printEnvironments(w, environmentListAnswer{Environments: []environmentAnswer{{Environment: adminapi.Environment{Slug: "gone", Status: "sunk"}}}})
		}, want: []string{"sunk: no deployment of the environment is active"}},
		{name: "environment list, none sunk", print: func(w *bytes.Buffer) error {
			return printEnvironments(w, environmentListAnswer{Environments: []environmentAnswer{{Environment: adminapi.Environment{Slug: "here", Status: "active"}}}})
		}, without: []string{"sunk:"}},
		{name: "box managed", print: func(w *bytes.Buffer) error {
			return printBox(w, boxAnswer{})
		}, want: []string{"no: its deployments are reaped with the token of its environment's organization (the platform's write token in a platform environment, the customer's own token in a customer organization's)"}, without: []string{" false\n", "no: a customer organization's"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.print(&b); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.without {
				if strings.Contains(b.String(), w) {
					t.Errorf("output still says %q:\n%s", w, b.String())
				}
			}
		})
	}
}
