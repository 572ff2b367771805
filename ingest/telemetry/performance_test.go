package telemetry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// perfNow is the fake clock's time in the performance tests.
var perfNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type perfFixture struct {
	db  *storage.DB
	r   *PerformanceReader
	env storage.Environment
	dep storage.Deployment
}

func newPerfFixture(t *testing.T) *perfFixture {
	t.Helper()
	db := storagetest.NewDB(t)
	env := storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	dep := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-1", LaunchedAt: perfNow.Add(-30 * 24 * time.Hour)})
	return &perfFixture{db: db, r: &PerformanceReader{DB: db, Clock: clockwork.NewFakeClockAt(perfNow)}, env: env, dep: dep}
}

// cpu is a window's metrics: cpuPct only, 12 samples around v (min v-1,
// max v+1, last v).
func cpu(v float64) storage.TelemetryMetricSet {
	var m storage.TelemetryMetricSet
	m[storage.MetricCPUPct] = &storage.MetricAgg{N: 12, Sum: 12 * v, Min: v - 1, Max: v + 1, Last: v}
	return m
}

// windows stores n minute windows of session from start, window i with
// cpu(base+i).
func (f *perfFixture) windows(t *testing.T, session string, start time.Time, n int, base float64) {
	t.Helper()
	for i := range n {
		storagetest.TelemetryWindow(t, f.db, storage.TelemetryWindow{EnvironmentID: f.env.ID, DeploymentID: f.dep.ID, SessionID: session,
			WindowStart: start.Add(time.Duration(i) * time.Minute), Metrics: cpu(base + float64(i))})
	}
}

// fold moves one session's hour from detail to its rollup in one writer
// unit, as retention does.
func (f *perfFixture) fold(t *testing.T, session string, hour time.Time) {
	t.Helper()
	ws, err := storage.TelemetryWindowsBetween(t.Context(), f.db.Read, f.env.ID, f.dep.ID, session, hour, hour.Add(time.Hour), 1000)
	if err != nil || len(ws) == 0 {
		t.Fatalf("fold: %d windows, %v", len(ws), err)
	}
	var agg storage.MetricAgg
	for _, w := range ws {
		agg = agg.Merge(*w.Metrics[storage.MetricCPUPct])
	}
	testExec(t, f.db,
		testHourlyRow(f.env.ID, f.dep.ID, session, hour, agg.N, agg.Sum, agg.Min, agg.Max, agg.Last),
		fmt.Sprintf(`DELETE FROM telemetry_windows WHERE environment_id = %d AND deployment_id = '%s' AND session_id = '%s' AND window_start >= %d AND window_start < %d`,
			f.env.ID, f.dep.ID, session, hour.UnixMilli(), hour.Add(time.Hour).UnixMilli()))
}

func (f *perfFixture) read(t *testing.T, from, to time.Time, step time.Duration) adminapi.DeploymentPerformance {
	t.Helper()
	p, err := f.r.Read(t.Context(), adminapi.DeploymentPerformanceRequest{EnvironmentSlug: f.env.Slug, DeploymentID: f.dep.ID, From: from, To: to, Step: step})
	if err != nil {
		t.Fatalf("Read(from %v, to %v, step %v): %v", from, to, step, err)
	}
	return p
}

// cpuPoints is the cpuPct series.
func cpuPoints(t *testing.T, p adminapi.DeploymentPerformance) []adminapi.PerformancePoint {
	t.Helper()
	if len(p.Series) != storage.NumTelemetryMetrics || p.Series[0].Metric != "cpuPct" {
		t.Fatalf("series: %d, first %q; want every metric, cpuPct first", len(p.Series), p.Series[0].Metric)
	}
	return p.Series[0].Points
}

// totals sums a series' samples and values.
func totals(pts []adminapi.PerformancePoint) (n int64, sum float64) {
	for _, p := range pts {
		n, sum = n+p.N, sum+p.Sum
	}
	return n, sum
}

// TestPerformanceDetailAndHourly: windows still in detail and hours
// already folded both appear, with the right aggregates; at a step under
// an hour the folded hours are served whole and the answer says so.
func TestPerformanceDetailAndHourly(t *testing.T) {
	f := newPerfFixture(t)
	f.windows(t, "s1", perfNow.Add(-3*time.Hour), 120, 0) // 09:00-10:59, cpu 0…119
	old := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)  // rollups are of hours past 7 days in life; the reader does not care
	testExec(t, f.db,
		testHourlyRow(f.env.ID, f.dep.ID, "s1", old, 720, 720*50, 5, 95, 42),
		testHourlyRow(f.env.ID, f.dep.ID, "s1", old.Add(time.Hour), 720, 720*60, 6, 96, 43))
	from := perfNow.Add(-5 * 24 * time.Hour) // 1,440 points at 5m

	t.Run("step 1h", func(t *testing.T) {
		p := f.read(t, from, perfNow, time.Hour)
		pts := cpuPoints(t, p)
		if len(pts) != 4 || p.HourlyResolution || p.StepSeconds != 3600 {
			t.Fatalf("%d points (hourly resolution %v, step %d): %+v", len(pts), p.HourlyResolution, p.StepSeconds, pts)
		}
		want := []adminapi.PerformancePoint{
			{T: old, N: 720, Sum: 720 * 50, Mean: 50, Min: 5, Max: 95, Last: 42},
			{T: old.Add(time.Hour), N: 720, Sum: 720 * 60, Mean: 60, Min: 6, Max: 96, Last: 43},
			{T: perfNow.Add(-3 * time.Hour), N: 720, Sum: 12 * 1770, Mean: 29.5, Min: -1, Max: 60, Last: 59},
			{T: perfNow.Add(-2 * time.Hour), N: 720, Sum: 12 * 5370, Mean: 89.5, Min: 59, Max: 120, Last: 119},
		}
		for i := range want {
			if pts[i] != want[i] {
				t.Errorf("point %d = %+v, want %+v", i, pts[i], want[i])
			}
		}
	})
	t.Run("step 5m", func(t *testing.T) {
		p := f.read(t, from, perfNow, 5*time.Minute)
		pts := cpuPoints(t, p)
		if len(pts) != 2+24 || !p.HourlyResolution || p.Note == "" {
			t.Fatalf("%d points, hourly resolution %v, note %q", len(pts), p.HourlyResolution, p.Note)
		}
		if pts[0].Seconds != 3600 || pts[1].Seconds != 3600 || pts[0].N != 720 || pts[2].Seconds != 0 || pts[2].N != 60 {
			t.Errorf("first points %+v", pts[:3])
		}
		if n, _ := totals(pts); n != 720*2+120*12 {
			t.Errorf("total samples %d, want %d", n, 720*2+120*12)
		}
	})
}

// TestPerformanceFoldBoundary: folding an hour (detail rows replaced by
// their rollup in one unit) changes neither the totals nor, at an hourly
// step, any point; an hour folded for one session but still in detail for
// another is served as one point holding both, never twice.
func TestPerformanceFoldBoundary(t *testing.T) {
	f := newPerfFixture(t)
	h := perfNow.Add(-3 * time.Hour)                    // 09:00
	f.windows(t, "s1", h, 120, 0)                       // 09:00-10:59
	f.windows(t, "s2", h.Add(30*time.Minute), 60, 1000) // 09:30-10:29
	from := perfNow.Add(-6 * time.Hour)
	before1h := cpuPoints(t, f.read(t, from, perfNow, time.Hour))
	n5, sum5 := totals(cpuPoints(t, f.read(t, from, perfNow, 5*time.Minute)))

	f.fold(t, "s1", h) // s1's 09:00 hour only; s2's 09:xx stays in detail

	after1h := cpuPoints(t, f.read(t, from, perfNow, time.Hour))
	if fmt.Sprint(after1h) != fmt.Sprint(before1h) {
		t.Errorf("hourly points changed by the fold:\nbefore %+v\nafter  %+v", before1h, after1h)
	}
	p := f.read(t, from, perfNow, 5*time.Minute)
	pts := cpuPoints(t, p)
	if n, sum := totals(pts); n != n5 || sum != sum5 || n != (120+60)*12 {
		t.Errorf("5m totals after the fold: n %d sum %g; before n %d sum %g; want n %d", n, sum, n5, sum5, (120+60)*12)
	}
	var in09 []adminapi.PerformancePoint
	for _, pt := range pts {
		if pt.T.Before(h.Add(time.Hour)) {
			in09 = append(in09, pt)
		}
	}
	if len(in09) != 1 || in09[0].T != h || in09[0].Seconds != 3600 || in09[0].N != (60+30)*12 || in09[0].Last != 1029 {
		t.Errorf("points of the folded hour: %+v; want one hour point of %d samples, last 1029", in09, (60+30)*12)
	}
	if !p.HourlyResolution {
		t.Error("HourlyResolution is false with a folded hour at a 5m step")
	}
}

// TestPerformanceDownsampling: a step merges the windows it covers: count
// and sum add, min and max combine, last is the latest window's.
func TestPerformanceDownsampling(t *testing.T) {
	f := newPerfFixture(t)
	h := perfNow.Add(-2 * time.Hour)
	f.windows(t, "s1", h, 60, 0)
	for _, tc := range []struct {
		step time.Duration
		per  int
	}{{time.Minute, 1}, {5 * time.Minute, 5}, {15 * time.Minute, 15}, {time.Hour, 60}} {
		t.Run(tc.step.String(), func(t *testing.T) {
			pts := cpuPoints(t, f.read(t, h, h.Add(time.Hour), tc.step))
			if len(pts) != 60/tc.per {
				t.Fatalf("%d points, want %d", len(pts), 60/tc.per)
			}
			for k, pt := range pts {
				lo, hi := float64(k*tc.per), float64(k*tc.per+tc.per-1)
				want := adminapi.PerformancePoint{T: h.Add(time.Duration(k) * tc.step), N: int64(12 * tc.per), Sum: 12 * (lo + hi) * float64(tc.per) / 2,
					Mean: (lo + hi) / 2, Min: lo - 1, Max: hi + 1, Last: hi}
				if pt != want {
					t.Errorf("point %d = %+v, want %+v", k, pt, want)
				}
			}
		})
	}
}

// TestResolveRange: the defaults, the smallest step that keeps the point
// bound, and the refusals.
func TestResolveRange(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		now := perfNow.Add(30 * time.Second)
		from, to, step, err := resolveRange(adminapi.DeploymentPerformanceRequest{}, now)
		if err != nil || step != time.Minute || !to.Equal(now) || !from.Equal(perfNow.Add(-24*time.Hour)) || pointsIn(from, to, step) != 1441 {
			t.Errorf("defaults: from %v to %v step %v (%d points), %v", from, to, step, pointsIn(from, to, step), err)
		}
	})
	for _, span := range []time.Duration{time.Hour, 24 * time.Hour, 25 * time.Hour, 3 * 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 90 * 24 * time.Hour, 1000 * 24 * time.Hour} {
		t.Run("default step for "+span.String(), func(t *testing.T) {
			_, _, step, err := resolveRange(adminapi.DeploymentPerformanceRequest{From: perfNow.Add(-span), To: perfNow}, perfNow)
			if err != nil {
				t.Fatal(err)
			}
			if !validStep(step) || pointsIn(perfNow.Add(-span), perfNow, step) > adminapi.MaxPerformancePoints {
				t.Errorf("step %v: valid %v, %d points", step, validStep(step), pointsIn(perfNow.Add(-span), perfNow, step))
			}
			for s := MinPerformanceStep; s < step; s += time.Minute {
				if validStep(s) && pointsIn(perfNow.Add(-span), perfNow, s) <= adminapi.MaxPerformancePoints {
					t.Errorf("step %v chosen, but %v also keeps the bound", step, s)
				}
			}
		})
	}
	refused := []struct {
		name     string
		from, to time.Time
		step     time.Duration
	}{
		{"90s", time.Time{}, time.Time{}, 90 * time.Second},
		{"30s", time.Time{}, time.Time{}, 30 * time.Second},
		{"7m does not divide the hour", time.Time{}, time.Time{}, 7 * time.Minute},
		{"45m", time.Time{}, time.Time{}, 45 * time.Minute},
		{"25h", time.Time{}, time.Time{}, 25 * time.Hour},
		{"negative", time.Time{}, time.Time{}, -time.Hour},
		{"from after to", perfNow, perfNow.Add(-time.Hour), 0},
		{"from equals to", perfNow, perfNow, 0},
		{"too many points", perfNow.Add(-48 * time.Hour), perfNow, time.Minute},
		{"too long for a day step", perfNow.Add(-1501 * 24 * time.Hour), perfNow, 0},
		// Spans beyond time.Duration's ~292 years must not wrap the count.
		{"year 1000 at 1m", time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), perfNow, time.Minute},
		{"to year 9999 at 1m", perfNow, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), time.Minute},
		{"year 2 to 9999 at 24h", time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), 24 * time.Hour},
		{"year 2 to 9999, default step", time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), 0},
	}
	for _, tc := range refused {
		t.Run("refused "+tc.name, func(t *testing.T) {
			_, _, _, err := resolveRange(adminapi.DeploymentPerformanceRequest{From: tc.from, To: tc.to, Step: tc.step}, perfNow)
			var pr *ParamRefusal
			if !errors.As(err, &pr) {
				t.Errorf("resolveRange = %v, want a *ParamRefusal", err)
			}
		})
	}
	for _, s := range []time.Duration{time.Minute, 30 * time.Minute, time.Hour, 90 * time.Minute, 24 * time.Hour} {
		if _, _, _, err := resolveRange(adminapi.DeploymentPerformanceRequest{From: perfNow.Add(-24 * time.Hour), To: perfNow, Step: s}, perfNow); err != nil {
			t.Errorf("step %v refused: %v", s, err)
		}
	}
}

// TestPerformanceSessionsAndAnomalies: the sessions with a window in the
// range come with their summaries, and their anomalies; a session outside
// the range does not; unknown environments and deployments are refused.
func TestPerformanceSessionsAndAnomalies(t *testing.T) {
	f := newPerfFixture(t)
	f.windows(t, "old", perfNow.Add(-5*24*time.Hour), 2, 0)
	f.windows(t, "s1", perfNow.Add(-2*time.Hour), 3, 0)
	testExec(t, f.db,
		`UPDATE telemetry_sessions SET summary = '{"windows":3,"gpuIdleMinutes":0}', summarized_at = 1 WHERE id = 's1'`,
		testAnomalyRow(f.env.ID, f.dep.ID, "s1", "memory-pressure", perfNow.Add(-2*time.Hour)),
		testAnomalyRow(f.env.ID, f.dep.ID, "old", "disk-nearly-full", perfNow.Add(-5*24*time.Hour)))
	p := f.read(t, time.Time{}, time.Time{}, 0)
	if len(p.Sessions) != 1 || p.Sessions[0].ID != "s1" || string(p.Sessions[0].Summary) != `{"windows":3,"gpuIdleMinutes":0}` || p.Sessions[0].Windows != 3 {
		t.Errorf("sessions %+v", p.Sessions)
	}
	if len(p.Anomalies) != 1 || p.Anomalies[0].SessionID != "s1" || p.Anomalies[0].Kind != "memory-pressure" || p.Anomalies[0].Windows != 30 {
		t.Errorf("anomalies %+v", p.Anomalies)
	}
	for _, tc := range []struct {
		slug, dep string
		want      error
	}{{"no-such-env", "dep-1", ErrUnknownEnvironment}, {"demo-harbor", "dep-404", ErrUnknownDeployment}} {
		if _, err := f.r.Read(t.Context(), adminapi.DeploymentPerformanceRequest{EnvironmentSlug: tc.slug, DeploymentID: tc.dep}); !errors.Is(err, tc.want) {
			t.Errorf("Read(%s, %s) = %v, want %v", tc.slug, tc.dep, err, tc.want)
		}
	}
}
