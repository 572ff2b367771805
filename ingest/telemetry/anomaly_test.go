package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestAnomalyRules: each rule is raised only once its condition has held
// for its run of consecutive minutes, is one row per session and rule, and
// counts the windows at which it held.
func TestAnomalyRules(t *testing.T) {
	idleGPU := protocol.MetricsV1{GPUUtilPct: &protocol.PercentAggV1{N: 6, Sum: 6, Min: 0, Max: 4.9, Last: 1}}
	busyGPU := protocol.MetricsV1{GPUUtilPct: &protocol.PercentAggV1{N: 6, Sum: 300, Min: 40, Max: 60, Last: 50}}
	memHigh := protocol.MetricsV1{
		MemUsedBytes:  &protocol.BytesAggV1{N: 2, Sum: 2 * 960, Min: 960, Max: 960, Last: 960},
		MemTotalBytes: &protocol.BytesAggV1{N: 2, Sum: 2 * 1000, Min: 1000, Max: 1000, Last: 1000},
	}
	diskFull := protocol.MetricsV1{
		DiskUsedBytes:  &protocol.BytesAggV1{N: 1, Sum: 91, Min: 91, Max: 91, Last: 91},
		DiskTotalBytes: &protocol.BytesAggV1{N: 1, Sum: 100, Min: 100, Max: 100, Last: 100},
	}
	for _, tc := range []struct {
		name    string
		minutes []protocol.MetricsV1 // one window per minute, in order
		ended   bool
		kind    string
		windows int64 // 0: no anomaly row
	}{
		{name: "gpu idle 29 minutes", minutes: repeat(idleGPU, 29), kind: "gpu-idle"},
		{name: "gpu idle 30 minutes", minutes: repeat(idleGPU, 30), kind: "gpu-idle", windows: 1},
		{name: "gpu idle 32 minutes", minutes: repeat(idleGPU, 32), kind: "gpu-idle", windows: 3},
		{name: "gpu idle broken by a busy minute", minutes: append(append(repeat(idleGPU, 20), busyGPU), repeat(idleGPU, 20)...), kind: "gpu-idle"},
		{name: "gpu idle after the deployment ended", minutes: repeat(idleGPU, 30), ended: true, kind: "gpu-idle"},
		{name: "memory pressure 4 minutes", minutes: repeat(memHigh, 4), kind: "memory-pressure"},
		{name: "memory pressure 5 minutes", minutes: repeat(memHigh, 5), kind: "memory-pressure", windows: 1},
		{name: "disk nearly full", minutes: repeat(diskFull, 2), kind: "disk-nearly-full", windows: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := storagetest.NewDB(t)
			ctx := context.Background()
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			d := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: now.Add(-2 * time.Hour)})
			first := now.Add(-time.Duration(len(tc.minutes)) * time.Minute)
			if tc.ended {
				storagetest.EndDeployment(t, db, d.EnvironmentID, d.ID, now)
			}
			for i, m := range tc.minutes {
				w := win(d, "s1", first.Add(time.Duration(i)*time.Minute))
				w.Metrics = m
				if _, err := accept(t, db, d, w, now, telemetry.DefaultLimits()); err != nil {
					t.Fatalf("minute %d: %v", i, err)
				}
			}
			as, err := storage.TelemetryAnomaliesOf(ctx, db.Read, d.EnvironmentID, d.ID)
			if err != nil {
				t.Fatal(err)
			}
			var got int64
			for _, a := range as {
				if a.Kind != tc.kind {
					t.Errorf("unexpected anomaly %s", a.Kind)
					continue
				}
				got = a.Windows
				if a.LastSeenAt.After(now) || !a.FirstSeenAt.Before(a.LastSeenAt) {
					t.Errorf("anomaly bounds %v..%v", a.FirstSeenAt, a.LastSeenAt)
				}
			}
			if got != tc.windows {
				t.Fatalf("%s counted %d windows, want %d", tc.kind, got, tc.windows)
			}
		})
	}
}

func repeat(m protocol.MetricsV1, n int) []protocol.MetricsV1 {
	out := make([]protocol.MetricsV1, n)
	for i := range out {
		out[i] = m
	}
	return out
}
