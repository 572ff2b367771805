package console

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// chartNow is the fixed clock of the chart tests, so time labels are known.
var chartNow = time.Date(2026, 3, 4, 12, 0, 30, 0, time.UTC)

func agg(v float64) *storage.MetricAgg {
	return &storage.MetricAgg{N: 12, Sum: 12 * v, Min: v, Max: v, Last: v}
}

// figureOf returns the <figure> of metric on a page ("" when absent).
func figureOf(body, metric string) string {
	i := strings.Index(body, `data-metric="`+metric+`"`)
	if i < 0 {
		return ""
	}
	return body[i : i+strings.Index(body[i:], "</figure>")]
}

// TestDeploymentCharts: the deployment page's charts read at a glance —
// human titles, a value axis with unit-bearing tick labels, a UTC time axis
// with clock labels, each point's time and value as an SVG <title> (memory
// "of" its total, network per second), a one-point series drawn as a
// visible dot, and no GPU chart without GPU data (one with it).
func TestDeploymentCharts(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(chartNow)
	c := New(Deps{DB: db, Perf: &telemetry.PerformanceReader{DB: db, Clock: clock}, CostRule: cost.DefaultRule,
		Version: "test", Origin: "http://127.0.0.1:8080", Clock: clock, Log: zerolog.Nop()})
	e := storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	d := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-web", LaunchedAt: chartNow.Add(-2 * time.Hour)})
	first := chartNow.Truncate(time.Minute).Add(-42 * time.Minute)
	for i := 0; i < 40; i++ {
		var m storage.TelemetryMetricSet
		m[storage.MetricCPUPct] = agg(float64(10 + i))
		m[storage.MetricMemUsedBytes] = agg(1 << 30)
		m[storage.MetricMemTotalBytes] = agg(4 << 30)
		m[storage.MetricNetRxBytes] = agg(5000) // per 5 s sample: 1000 B/s
		m[storage.MetricLoad1] = agg(0.5)
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: e.ID, DeploymentID: d.ID, SessionID: "s1",
			WindowStart: first.Add(time.Duration(i) * time.Minute), Metrics: m})
	}
	code, body := pageOf(t, c.deployment, "/app/env/harbor/deployments/dep-web?range=1h", "slug", "harbor", "id", "dep-web")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for metric, title := range map[string]string{"cpuPct": "CPU %", "memUsedBytes": "Memory used of total", "diskUsedBytes": "Disk used of total",
		"netRxBytes": "Network in/out per second", "load1": "Load (1-minute average)"} {
		if f := figureOf(body, metric); !strings.Contains(f, `<strong class="chart-title">`+title) {
			t.Errorf("%s: no title %q:\n%.300s", metric, title, f)
		}
	}
	if strings.Contains(body, "<strong>cpuPct</strong>") || strings.Contains(body, "memUsedBytes</strong>") {
		t.Error("a chart is titled with its wire name")
	}
	cpu := figureOf(body, "cpuPct")
	for _, want := range []string{`<text x="78" y="177">0%</text>`, `>50%</text>`, `>100%</text>`, `class="utc"`,
		`>11:10</text>`, `>11:20</text>`, `>11:50</text>`, `>12:00</text>`,
		`<title>11:18 10.0%</title>`, `<title>11:57 49.0%</title>`, `data-points="40"`} {
		if !strings.Contains(cpu, want) {
			t.Errorf("CPU chart lacks %q:\n%s", want, cpu)
		}
	}
	if n := strings.Count(cpu, "<path"); n != 40 {
		t.Errorf("CPU chart has %d point titles, want 40", n)
	}
	if strings.Contains(cpu, `class="solo"`) {
		t.Error("a point of a continuous line is drawn as a lone dot")
	}
	mem := figureOf(body, "memUsedBytes")
	for _, want := range []string{`<title>11:18 1.00 GiB of 4.00 GiB</title>`, `class="total"`, `>4 GiB</text>`, `>2 GiB</text>`} {
		if !strings.Contains(mem, want) {
			t.Errorf("memory chart lacks %q:\n%.2000s", want, mem)
		}
	}
	if net := figureOf(body, "netRxBytes"); !strings.Contains(net, "<title>11:18 in 1000 B/s</title>") || !strings.Contains(net, `class="key s0">in<`) {
		t.Errorf("network chart is not per second with its legend:\n%.2000s", net)
	}
	if disk := figureOf(body, "diskUsedBytes"); !strings.Contains(disk, `data-points="0"`) || !strings.Contains(disk, "no data in this range") {
		t.Errorf("disk chart without data:\n%s", disk)
	}
	if strings.Contains(body, `data-metric="gpu`) {
		t.Error("GPU charts on a machine without GPU data")
	}

	t.Run("one point", func(t *testing.T) {
		one := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-one", LaunchedAt: chartNow.Add(-time.Hour)})
		var m storage.TelemetryMetricSet
		m[storage.MetricCPUPct] = agg(42)
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: e.ID, DeploymentID: one.ID, SessionID: "s2",
			WindowStart: chartNow.Truncate(time.Minute).Add(-5 * time.Minute), Metrics: m})
		_, body := pageOf(t, c.deployment, "/app/env/harbor/deployments/dep-one?range=1h", "slug", "harbor", "id", "dep-one")
		cpu := figureOf(body, "cpuPct")
		if !regexp.MustCompile(`<path class="solo" d="M[0-9]+ [0-9]+h0"><title>11:55 42.0%</title></path>`).MatchString(cpu) {
			t.Errorf("a one-point series is not a visible dot:\n%s", cpu)
		}
	})
	t.Run("GPU data", func(t *testing.T) {
		g := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-gpu", LaunchedAt: chartNow.Add(-time.Hour)})
		var m storage.TelemetryMetricSet
		m[storage.MetricGPUUtilPct] = agg(80)
		m[storage.MetricGPUTempC] = agg(65)
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: e.ID, DeploymentID: g.ID, SessionID: "s3",
			WindowStart: chartNow.Truncate(time.Minute).Add(-5 * time.Minute), Metrics: m})
		_, body := pageOf(t, c.deployment, "/app/env/harbor/deployments/dep-gpu?range=1h", "slug", "harbor", "id", "dep-gpu")
		for _, want := range []string{"GPU utilisation %", "GPU temperature °C", "<title>11:55 65.0 °C</title>"} {
			if !strings.Contains(body, want) {
				t.Errorf("GPU page lacks %q", want)
			}
		}
	})
}

func TestAxisLabels(t *testing.T) {
	for _, tc := range []struct {
		name string
		hi   float64
		u    unitKind
		top  float64
		tick string
	}{
		{"bytes round in GiB", 3.8 * (1 << 30), unitBytes, 4 << 30, "1 GiB"},
		{"bytes below a GiB", 300 << 20, unitBytes, 400 << 20, "100 MiB"},
		{"load", 0.9, unitPlain, 1, "0.25"},
		{"nothing", 0, unitPlain, 1, "0.25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := niceTop(tc.hi, tc.u)
			if top != tc.top {
				t.Fatalf("niceTop(%v) = %v, want %v", tc.hi, top, tc.top)
			}
			if got := axisValue(top/valueTicks, tc.u, top/valueTicks); got != tc.tick {
				t.Errorf("first tick %q, want %q", got, tc.tick)
			}
		})
	}
}

// TestChartWords: a one-point series says "1 point", and a 24-hour chart
// labels its midnight tick with the date and names the day in points'
// titles, so the second half of the chart is not read as the first's day.
func TestChartWords(t *testing.T) {
	from := time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)
	to := from.Add(24 * time.Hour)
	one := adminapi.MetricSeries{Metric: "cpuPct", Points: []adminapi.PerformancePoint{{T: from.Add(13 * time.Hour), Mean: 40}}}
	v := renderPanel(panels[0], map[string]adminapi.MetricSeries{"cpuPct": one}, from, to, 10*time.Minute)
	for _, tc := range []struct {
		name, in, want, not string
	}{
		{"one point", v.Summary, "1 point;", "1 points"},
		{"midnight tick has the date", string(v.SVG), ">Mar 4</text>", ">00:00</text>"},
		{"point title names the day", string(v.SVG), "<title>Mar 4 01:00 ", "<title>01:00 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.in, tc.want) || strings.Contains(tc.in, tc.not) {
				t.Errorf("want %q and not %q in:\n%s", tc.want, tc.not, tc.in)
			}
		})
	}
}
