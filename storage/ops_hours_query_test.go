package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// buckets returns a bucket slice with counts at the given indexes.
func buckets(at map[int]int64) []int64 {
	b := make([]int64, len(storage.RequestLatencyBounds)+1)
	for i, n := range at {
		b[i] = n
	}
	return b
}

// TestLatencyQuantile: a quantile is the upper bound of the bucket holding
// the request of rank ceil(q·total), flagged over past the last bound.
func TestLatencyQuantile(t *testing.T) {
	last := len(storage.RequestLatencyBounds)
	for _, tc := range []struct {
		name     string
		buckets  []int64
		q        float64
		want     time.Duration
		over, ok bool
	}{
		{"empty", buckets(nil), 0.5, 0, false, false},
		{"one request", buckets(map[int]int64{3: 1}), 0.99, 5 * time.Millisecond, false, true},
		{"median at a bucket edge", buckets(map[int]int64{0: 50, 4: 50}), 0.5, 500 * time.Microsecond, false, true},
		{"median past the edge", buckets(map[int]int64{0: 49, 4: 51}), 0.5, 10 * time.Millisecond, false, true},
		{"p99 of 100 with one slow", buckets(map[int]int64{1: 99, last: 1}), 0.99, time.Millisecond, false, true},
		{"p99 of 100 with two slow", buckets(map[int]int64{1: 98, last: 2}), 0.99, 5 * time.Second, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, over, ok := storage.LatencyQuantile(tc.buckets, tc.q)
			if d != tc.want || over != tc.over || ok != tc.ok {
				t.Errorf("LatencyQuantile = %s, %v, %v; want %s, %v, %v", d, over, ok, tc.want, tc.over, tc.ok)
			}
		})
	}
	t.Run("bucket of a latency", func(t *testing.T) {
		for d, want := range map[time.Duration]int{0: 0, 500 * time.Microsecond: 0, 501 * time.Microsecond: 1, 5 * time.Second: last - 1, 6 * time.Second: last} {
			if got := storage.LatencyBucket(d); got != want {
				t.Errorf("LatencyBucket(%s) = %d; want %d", d, got, want)
			}
		}
	})
}

// TestAddOpsHour: a second write for an hour (a restart within it) adds
// counts, buckets, wall and CPU time and replaces the sizes; a row with the
// wrong number of buckets is refused with nothing written.
func TestAddOpsHour(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	hour := time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC)
	add := func(p storage.ProcessHour, reqs ...storage.RequestHour) error {
		return db.Writer.Do(ctx, func(tx storage.Tx) error { return storage.AddOpsHour(ctx, tx, p, reqs) })
	}
	for i, size := range []int64{1000, 3000} {
		err := add(storage.ProcessHour{HourStart: hour, Wall: 30 * time.Minute, CPU: 2 * time.Second, DBBytes: size, WALBytes: size / 10, RecordedAt: hour.Add(time.Duration(i+1) * time.Minute)},
			storage.RequestHour{HourStart: hour, Group: "ingest", Requests: 3, ServerErrors: 1, Buckets: buckets(map[int]int64{2: 2, 5: 1})})
		if err != nil {
			t.Fatal(err)
		}
	}
	reqs, err := storage.RequestHoursSince(ctx, db.Read, hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1 || reqs[0].Requests != 6 || reqs[0].ServerErrors != 2 || reqs[0].Buckets[2] != 4 || reqs[0].Buckets[5] != 2 {
		t.Errorf("request hours = %+v; want one row of 6 requests, 2 errors, buckets 4 and 2", reqs)
	}
	procs, err := storage.ProcessHoursSince(ctx, db.Read, hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].Wall != time.Hour || procs[0].CPU != 4*time.Second || procs[0].DBBytes != 3000 || procs[0].WALBytes != 300 {
		t.Errorf("process hours = %+v; want 1 h wall, 4 s CPU, the second sizes", procs)
	}
	if later, _ := storage.RequestHoursSince(ctx, db.Read, hour.Add(time.Hour)); len(later) != 0 {
		t.Errorf("rows since the next hour: %+v", later)
	}
	err = add(storage.ProcessHour{HourStart: hour.Add(time.Hour), RecordedAt: hour}, storage.RequestHour{HourStart: hour.Add(time.Hour), Group: "admin", Buckets: []int64{1}})
	if !errors.Is(err, storage.ErrBadBuckets) {
		t.Errorf("short buckets: err = %v; want ErrBadBuckets", err)
	}
	if procs, _ := storage.ProcessHoursSince(ctx, db.Read, hour.Add(time.Hour)); len(procs) != 0 {
		t.Errorf("a refused write stored %+v", procs)
	}
}

// TestLoopAndQuotaEvidence: the loops' figures and the quota events by
// quota count only the span's rows.
func TestLoopAndQuotaEvidence(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	env := storagetest.Environment(t, db, storage.Environment{})
	since := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for _, r := range []storage.RetentionRun{
			{Trigger: "schedule", StartedAt: since.Add(-time.Hour), DrainStopReason: "drained", Error: "fold"}, // before the span
			{Trigger: "schedule", StartedAt: since.Add(time.Hour), DrainStopReason: "drained", Error: "prune"},
			{Trigger: "admin", StartedAt: since.Add(2 * time.Hour), DrainStopReason: "deadline", BacklogPending: true},
		} {
			if _, err := storage.InsertRetentionRun(ctx, tx, r); err != nil {
				return err
			}
		}
		for _, ev := range []storage.LifecycleEvent{
			{ID: "quota:heartbeats-per-minute:e:d1:2026-02-28T23", Kind: "quota-exceeded", OccurredAt: since.Add(-time.Minute)},
			{ID: "quota:heartbeats-per-minute:e:d1:2026-03-01T01", Kind: "quota-exceeded", OccurredAt: since.Add(time.Hour)},
			{ID: "quota:heartbeats-per-minute:e:d2:2026-03-01T01", Kind: "quota-exceeded", OccurredAt: since.Add(time.Hour)},
			{ID: "quota:telemetry-bytes-per-day:e::2026-03-01T02", Kind: "quota-exceeded", OccurredAt: since.Add(2 * time.Hour)},
			{ID: "r1", Kind: "reaper-destroyed", OccurredAt: since.Add(time.Hour)},
			{ID: "r2", Kind: "reaper-warning", Reason: "provider", OccurredAt: since.Add(time.Hour)},
		} {
			ev.EnvironmentID = env.ID
			if _, err := storage.InsertLifecycleEvent(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	loops, err := storage.LoopEvidenceSince(ctx, db.Read, since, since.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][3]int64{}
	for _, l := range loops {
		got[l.Name] = [3]int64{l.Runs, l.Failures, l.Backlog}
	}
	want := map[string][3]int64{"retention": {2, 1, 1}, "costs": {0, 0, 0}, "reaper": {1, 1, 0}, "jobs": {0, 0, 0}}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: runs, failures, backlog = %v; want %v", name, got[name], w)
		}
	}
	quotas, err := storage.QuotaEventsSince(ctx, db.Read, since)
	if err != nil {
		t.Fatal(err)
	}
	if len(quotas) != 2 || quotas["heartbeats-per-minute"] != 2 || quotas["telemetry-bytes-per-day"] != 1 {
		t.Errorf("quota events = %v; want heartbeats-per-minute 2, telemetry-bytes-per-day 1", quotas)
	}
}
