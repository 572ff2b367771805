package telemetry

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage"
)

// insertWindows stores windows the way window admission does (receipt,
// detail row and session update), many per writer unit: the fixtures'
// one-unit-per-window would cost an fsync per row.
func insertWindows(t testing.TB, db *storage.DB, ws []storage.TelemetryWindow) {
	t.Helper()
	const chunk = 2000
	for len(ws) > 0 {
		n := min(chunk, len(ws))
		part := ws[:n]
		ws = ws[n:]
		if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
			ctx := context.Background()
			for _, w := range part {
				if err := storage.InsertTelemetryReceipt(ctx, tx, storage.TelemetryReceipt{
					EnvironmentID: w.EnvironmentID, DeploymentID: w.DeploymentID, SessionID: w.SessionID,
					WindowStart: w.WindowStart, BodyHash: sha256.Sum256([]byte(fmt.Sprint(w.SessionID, w.WindowStart.UnixMilli()))),
					ReceivedAt: w.ReceivedAt,
				}); err != nil {
					return err
				}
				if err := storage.InsertTelemetryWindow(ctx, tx, w); err != nil {
					return err
				}
				if _, err := storage.RecordSessionWindow(ctx, tx, w.EnvironmentID, w.DeploymentID, w.SessionID,
					w.WindowStart, w.WindowStart.Add(time.Minute), w.ReceivedAt, w.Final); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("insert windows: %v", err)
		}
	}
}

// randomMetrics returns a window's metrics: each metric present with
// probability 0.7 (all present when full), integer-valued so that sums are
// exact in any order; gpuUtilPct's max is under 5 about a third of the time.
func randomMetrics(rng *rand.Rand, full bool) storage.TelemetryMetricSet {
	var set storage.TelemetryMetricSet
	for i := range set {
		if !full && rng.IntN(10) >= 7 {
			continue
		}
		n := int64(1 + rng.IntN(12))
		lo := float64(rng.IntN(100))
		hi := lo + float64(rng.IntN(50))
		if i == storage.MetricGPUUtilPct && rng.IntN(3) == 0 {
			lo, hi = 0, float64(rng.IntN(5))
		}
		set[i] = &storage.MetricAgg{N: n, Sum: lo*float64(n) + float64(rng.IntN(100)), Min: lo, Max: hi, Last: lo + float64(rng.IntN(int(hi-lo)+1))}
	}
	return set
}

// groupKey is one (deployment, session, hour).
type groupKey struct {
	env        int64
	dep, sess  string
	hourMillis int64
}

// expectAgg is the direct aggregate of one group's windows.
type expectAgg struct {
	windows, gpuIdle int64
	first, last      int64
	m                [storage.NumTelemetryMetrics]storage.MetricAgg
	lastAt           [storage.NumTelemetryMetrics]int64
}

func (a *expectAgg) add(ws int64, gpuIdle int64, windows int64, first, last int64, set storage.TelemetryMetricSet, lastAt *[storage.NumTelemetryMetrics]int64) {
	if a.windows == 0 || first < a.first {
		a.first = first
	}
	if a.windows == 0 || last > a.last {
		a.last = last
	}
	a.windows += windows
	a.gpuIdle += gpuIdle
	for i, m := range set {
		if m == nil {
			continue
		}
		at := ws
		if lastAt != nil {
			at = lastAt[i]
		}
		prev := a.m[i]
		if prev.N == 0 {
			a.m[i], a.lastAt[i] = *m, at
			continue
		}
		// Merge keeps b's Last: order by windowStart.
		if at > a.lastAt[i] {
			a.m[i], a.lastAt[i] = prev.Merge(*m), at
		} else {
			a.m[i] = m.Merge(prev)
		}
	}
}

func windowGroup(w storage.TelemetryWindow) groupKey {
	return groupKey{w.EnvironmentID, w.DeploymentID, w.SessionID, w.WindowStart.Truncate(time.Hour).UnixMilli()}
}

func isGPUIdle(set storage.TelemetryMetricSet) int64 {
	if g := set[storage.MetricGPUUtilPct]; g != nil && g.Max < 5 {
		return 1
	}
	return 0
}

// directAggregate aggregates the original windows per group.
func directAggregate(ws []storage.TelemetryWindow) map[groupKey]*expectAgg {
	out := map[groupKey]*expectAgg{}
	for _, w := range ws {
		k := windowGroup(w)
		a := out[k]
		if a == nil {
			a = &expectAgg{}
			out[k] = a
		}
		ms := w.WindowStart.UnixMilli()
		a.add(ms, isGPUIdle(w.Metrics), 1, ms, ms, w.Metrics, nil)
	}
	return out
}

// storedState reads every session's hourly rows and remaining detail.
type storedState struct {
	hourly map[groupKey]storage.TelemetryHourly
	detail []storage.TelemetryWindow
}

func readState(t testing.TB, db *storage.DB, sessions []storage.TelemetrySessionRef) storedState {
	t.Helper()
	ctx := context.Background()
	st := storedState{hourly: map[groupKey]storage.TelemetryHourly{}}
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range sessions {
		hs, err := storage.TelemetryHourlyBetween(ctx, db.Read, s.EnvironmentID, s.DeploymentID, s.ID, time.Time{}, far, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			st.hourly[groupKey{s.EnvironmentID, s.DeploymentID, s.ID, h.HourStart.UnixMilli()}] = h
		}
		ds, err := storage.TelemetryWindowsBetween(ctx, db.Read, s.EnvironmentID, s.DeploymentID, s.ID, time.Time{}, far, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		st.detail = append(st.detail, ds...)
	}
	return st
}

// checkFoldInvariants asserts the retention property: for every group, the
// hourly rollup plus the remaining detail equals the direct aggregate of
// the original windows (count, n, sum, min, max, last, GPU-idle windows);
// no remaining detail row is also counted in a rollup (the counts would
// exceed the originals); every detail row is an original one; when
// drained, no detail older than the cutoff remains and nothing at or after
// it was folded; and each session's detail_from is its oldest detail row.
func checkFoldInvariants(t testing.TB, db *storage.DB, originals []storage.TelemetryWindow, sessions []storage.TelemetrySessionRef, cutoff time.Time, drained bool) {
	t.Helper()
	want := directAggregate(originals)
	st := readState(t, db, sessions)
	orig := map[string]bool{}
	for _, w := range originals {
		orig[fmt.Sprint(w.EnvironmentID, w.DeploymentID, w.SessionID, w.WindowStart.UnixMilli())] = true
	}
	got := map[groupKey]*expectAgg{}
	for k, h := range st.hourly {
		if !cutoff.IsZero() && h.HourStart.Add(time.Hour).After(cutoff) {
			t.Errorf("group %+v was folded though its hour ends after the cutoff %v", k, cutoff)
		}
		var lastAt [storage.NumTelemetryMetrics]int64
		for i := range lastAt {
			lastAt[i] = h.LastAt[i].UnixMilli()
		}
		a := &expectAgg{}
		a.add(0, h.GPUIdleWindows, h.Windows, h.FirstWindowAt.UnixMilli(), h.LastWindowAt.UnixMilli(), h.Metrics, &lastAt)
		got[k] = a
	}
	oldest := map[storage.TelemetrySessionRef]time.Time{}
	for _, w := range st.detail {
		if !orig[fmt.Sprint(w.EnvironmentID, w.DeploymentID, w.SessionID, w.WindowStart.UnixMilli())] {
			t.Errorf("detail row %s %s is not an original window", w.SessionID, w.WindowStart)
		}
		if drained && w.WindowStart.Before(cutoff) {
			t.Errorf("detail row %s %s is older than the cutoff %v after a drained pass", w.SessionID, w.WindowStart, cutoff)
		}
		ref := storage.TelemetrySessionRef{EnvironmentID: w.EnvironmentID, DeploymentID: w.DeploymentID, ID: w.SessionID}
		if o, ok := oldest[ref]; !ok || w.WindowStart.Before(o) {
			oldest[ref] = w.WindowStart
		}
		k := windowGroup(w)
		a := got[k]
		if a == nil {
			a = &expectAgg{}
			got[k] = a
		}
		ms := w.WindowStart.UnixMilli()
		a.add(ms, isGPUIdle(w.Metrics), 1, ms, ms, w.Metrics, nil)
	}
	keys := make([]groupKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	bad := 0
	for _, k := range keys {
		w, g := want[k], got[k]
		if g == nil {
			t.Errorf("group %+v: %d original windows, none stored", k, w.windows)
			bad++
		} else if *g != *w {
			t.Errorf("group %+v:\n got %+v\nwant %+v", k, *g, *w)
			bad++
		}
		if bad > 5 {
			t.Fatal("too many mismatching groups")
		}
	}
	for k := range got {
		if want[k] == nil {
			t.Errorf("group %+v stored but never sent", k)
		}
	}
	for _, s := range sessions {
		sess, err := storage.TelemetrySessionByID(context.Background(), db.Read, s.EnvironmentID, s.DeploymentID, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !sess.DetailFrom.Equal(oldest[s]) {
			t.Errorf("session %s: detail_from %v, oldest detail row %v", s.ID, sess.DetailFrom, oldest[s])
		}
	}
}

// newRetention returns a Retention on db with a fake clock at now.
func newRetention(db *storage.DB, now time.Time) (*Retention, *clockwork.FakeClock) {
	clock := clockwork.NewFakeClockAt(now)
	return &Retention{DB: db, Clock: clock, Log: zerolog.Nop()}, clock
}
