package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// pointsFleet stores a random fleet's telemetry: deps deployments, each
// with one to three sessions (the first three) in the last ten days,
// starting within six hours of each other (so two sessions often have a
// window at the same minute, where the later session's Last wins), windows
// at four minutes of five, random metric subsets, and each session folded
// into hourly rollups up to its own random hour (so an hour can be folded
// for one session and still in detail for another). Values are whole
// numbers, except in the odd deployments, where every value has a random
// fraction added (fractional reports which). A session has 100 to 999
// minutes, or 100 to 399 under -short (contrib/test.sh --fast: the fast
// lane's fleet is smaller, the full run's as large as ever).
func pointsFleet(t *testing.T, rng *rand.Rand, deps int) (db *storage.DB, env storage.Environment, ids []string, fractional map[string]bool) {
	t.Helper()
	db = storagetest.NewDB(t)
	env = storagetest.Environment(t, db, storage.Environment{Slug: "points-fleet"})
	fractional = map[string]bool{}
	var refs []storage.TelemetrySessionRef
	var ws []storage.TelemetryWindow
	extraMinutes := 900
	if testing.Short() {
		extraMinutes = 300
	}
	for d := range deps {
		dep := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: fmt.Sprintf("dep-%d", d), LaunchedAt: perfNow.Add(-11 * 24 * time.Hour)})
		ids = append(ids, dep.ID)
		fractional[dep.ID] = d%2 == 1
		base := perfNow.Add(-time.Duration(rng.IntN(10*24*60)) * time.Minute)
		sessions := 1 + rng.IntN(3)
		if d == 0 {
			sessions = 3
		}
		for s := range sessions {
			sess := fmt.Sprintf("s%d-%d", rng.IntN(100), s)
			refs = append(refs, storage.TelemetrySessionRef{EnvironmentID: env.ID, DeploymentID: dep.ID, ID: sess})
			start := base.Add(time.Duration(rng.IntN(6*60)) * time.Minute)
			for i := range 100 + rng.IntN(extraMinutes) {
				at := start.Add(time.Duration(i) * time.Minute)
				if !at.Before(perfNow) {
					break
				}
				if rng.IntN(5) == 0 {
					continue
				}
				m := randomMetrics(rng, rng.IntN(3) == 0)
				if fractional[dep.ID] {
					for _, a := range m {
						if a != nil {
							a.Sum += rng.Float64()
							a.Min += rng.Float64()
							a.Max += rng.Float64()
							a.Last += rng.Float64()
						}
					}
				}
				ws = append(ws, storage.TelemetryWindow{EnvironmentID: env.ID, DeploymentID: dep.ID, SessionID: sess,
					WindowStart: at, ReceivedAt: at.Add(time.Minute), Metrics: m})
			}
		}
	}
	insertWindows(t, db, ws)
	for _, s := range refs {
		to := perfNow.Truncate(time.Hour).Add(-time.Duration(rng.IntN(10*24)) * time.Hour)
		if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
			_, err := storage.FoldTelemetryWindows(context.Background(), tx, s, to)
			return err
		}); err != nil {
			t.Fatalf("fold %+v: %v", s, err)
		}
	}
	return db, env, ids, fractional
}

// sumsWithin reports whether a and b differ only in their points' Sum and
// Mean, and those by at most a relative 1e-12 (SQLite's compensated sum
// against one window at a time).
func sumsWithin(a, b adminapi.DeploymentPerformance) bool {
	if len(a.Series) != len(b.Series) {
		return false
	}
	close := func(x, y float64) bool { return math.Abs(x-y) <= 1e-12*max(math.Abs(x), math.Abs(y), 1) }
	for i := range a.Series {
		if len(a.Series[i].Points) != len(b.Series[i].Points) {
			return false
		}
		for j := range a.Series[i].Points {
			p, q := &a.Series[i].Points[j], &b.Series[i].Points[j]
			if !close(p.Sum, q.Sum) || !close(p.Mean, q.Mean) {
				return false
			}
			q.Sum, q.Mean = p.Sum, p.Mean
		}
	}
	return reflect.DeepEqual(a, b)
}

// TestPerformancePointsMatchWindows: over a random fleet (overlapping
// sessions, metric subsets, hours folded for some sessions and not
// others) and random ranges at every kind of step, summing points in
// SQLite answers exactly what reading window by window answers: the same
// points, counts, minima, maxima and Last values, and with integer values
// the same sums; with fractional values the sums agree to rounding. The
// full run makes 60 reads; the fast lane (-short) 20 over its smaller
// fleet; both make more (up to 300) until one of them was at hourly
// resolution (the random reads missed it in 60 about once in a few hundred
// runs).
func TestPerformancePointsMatchWindows(t *testing.T) {
	const maxReads = 300
	reads := 60
	if testing.Short() {
		reads = 20
	}
	steps := []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 12 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 90 * time.Minute, 2 * time.Hour, 4 * time.Hour, 24 * time.Hour}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 24))
	db, env, deps, fractional := pointsFleet(t, rng, 4)
	clock := clockwork.NewFakeClockAt(perfNow)
	byWindow := &PerformanceReader{DB: db, Clock: clock, pointsFrom: MaxPerformanceStep + time.Minute}
	byPoint := &PerformanceReader{DB: db, Clock: clock, pointsFrom: MinPerformanceStep}
	var points, hourly, compared int
	for i := 0; i < maxReads && (i < reads || hourly == 0); i++ {
		step := steps[rng.IntN(len(steps))]
		from := perfNow.Add(-time.Duration(rng.IntN(11*24*60*60)) * time.Second)
		to := from.Add(time.Duration(1+rng.IntN(int(adminapi.MaxPerformancePoints))) * step)
		req := adminapi.DeploymentPerformanceRequest{EnvironmentSlug: env.Slug, DeploymentID: deps[rng.IntN(len(deps))], From: from, To: to, Step: step}
		want, err := byWindow.Read(t.Context(), req)
		var pr *ParamRefusal
		if errors.As(err, &pr) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		got, err := byPoint.Read(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		same := reflect.DeepEqual(got, want)
		if !same && fractional[req.DeploymentID] {
			same = sumsWithin(want, got)
		}
		if !same {
			t.Fatalf("%s from %v to %v step %v:\npoints %+v\nwindows %+v", req.DeploymentID, from, to, step, got.Series, want.Series)
		}
		compared++
		for _, s := range want.Series {
			points += len(s.Points)
		}
		if want.HourlyResolution {
			hourly++
		}
	}
	if compared < reads/2 || points == 0 || hourly == 0 {
		t.Errorf("the fleet exercised too little: %d reads compared, %d points, %d with hourly points", compared, points, hourly)
	}
}
