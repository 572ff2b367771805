package console

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

func fixedConsole(t *testing.T) (*Console, *storage.DB) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(chartNow)
	return New(Deps{DB: db, Perf: &telemetry.PerformanceReader{DB: db, Clock: clock}, CostRule: cost.DefaultRule,
		Version: "test", Origin: "http://127.0.0.1:8080", Clock: clock, Log: zerolog.Nop()}), db
}

// TestFleetSummaryAtTop: the fleet page opens with the month's cost, the
// number of active deployments and their soonest idle deadlines, soonest
// first, each linked to its deployment — above the environment table.
func TestFleetSummaryAtTop(t *testing.T) {
	c, db := fixedConsole(t)
	a := storagetest.Environment(t, db, storage.Environment{Slug: "alpha"})
	b := storagetest.Environment(t, db, storage.Environment{Slug: "bravo"})
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: a.ID, ID: "dep-later", LaunchedAt: chartNow.Add(-time.Hour), IdleDeadlineAt: chartNow.Add(40 * time.Minute)})
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: b.ID, ID: "dep-soon", LaunchedAt: chartNow.Add(-time.Hour), IdleDeadlineAt: chartNow.Add(5 * time.Minute)})
	code, body := pageOf(t, c.fleet, "/app")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	sum, table := strings.Index(body, `id="summary"`), strings.Index(body, `<table id="fleet">`)
	if sum < 0 || table < 0 || sum > table {
		t.Fatalf("summary at %d, table at %d: the summary is not at the top:\n%s", sum, table, body)
	}
	top := body[sum:table]
	for _, want := range []string{`id="cost-total">$`, `id="active-total">2<`, `<strong>in 5m 00s</strong></time> <a href="/app/env/bravo/deployments/dep-soon">bravo/dep-soon</a>`,
		`<strong>in 40m 00s</strong></time> <a href="/app/env/alpha/deployments/dep-later">`} {
		if !strings.Contains(top, want) {
			t.Errorf("summary lacks %q:\n%s", want, top)
		}
	}
	if strings.Index(top, "dep-soon") > strings.Index(top, "dep-later") {
		t.Error("deadlines are not soonest first")
	}
}

// TestEnvironmentSparklines: each listed deployment has a CPU % sparkline
// of the last 6 hours at quarter-hour marks with its mean, peak and last
// value as a <title>; a
// lone point is a dot; a deployment without telemetry says so; a window
// older than the span is not drawn.
func TestEnvironmentSparklines(t *testing.T) {
	c, db := fixedConsole(t)
	e := storagetest.Environment(t, db, storage.Environment{Slug: "harbor"})
	base := chartNow.Truncate(time.Minute)
	for _, id := range []string{"dep-busy", "dep-one", "dep-none"} {
		storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e.ID, ID: id, LaunchedAt: chartNow.Add(-8 * time.Hour)})
	}
	window := func(dep, sess string, at time.Time, cpu float64) {
		var m storage.TelemetryMetricSet
		m[storage.MetricCPUPct] = agg(cpu)
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: e.ID, DeploymentID: dep, SessionID: sess, WindowStart: at, Metrics: m})
	}
	// Four windows on quarter-hour marks (10, 20, 30, 60 %), one between
	// marks and one 7 h ago: neither of the last two is drawn.
	for i, cpu := range []float64{10, 20, 30, 60} {
		window("dep-busy", "s-busy", base.Truncate(sparkStep).Add(-time.Duration(4-i)*sparkStep), cpu)
	}
	window("dep-busy", "s-busy", base.Truncate(sparkStep).Add(-sparkStep+7*time.Minute), 77)
	window("dep-busy", "s-old", base.Add(-7*time.Hour), 99)
	window("dep-one", "s-one", base.Add(-time.Hour), 42)
	code, body := pageOf(t, c.environment, "/app/env/harbor", "slug", "harbor")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	row := func(id string) string {
		i := strings.Index(body, `deployments/`+id+`"`)
		if i < 0 {
			t.Fatalf("no row for %s", id)
		}
		return body[i : i+strings.Index(body[i:], "</tr>")]
	}
	if r := row("dep-busy"); !strings.Contains(r, `<svg class="spark"`) || !strings.Contains(r, `data-points="4"`) ||
		!strings.Contains(r, "<title>CPU %: mean 30.0%, peak 60.0%, last 60.0%</title>") {
		t.Errorf("dep-busy's sparkline:\n%s", r)
	}
	if r := row("dep-one"); !strings.Contains(r, `data-points="1"`) || !strings.Contains(r, `<circle`) {
		t.Errorf("dep-one's lone point is not a dot:\n%s", r)
	}
	if r := row("dep-none"); !strings.Contains(r, "no telemetry") {
		t.Errorf("dep-none:\n%s", r)
	}
}
