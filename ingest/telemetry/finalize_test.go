package telemetry

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// summaryOf reads a session's stored terminal summary; ok is false when it
// has none.
func summaryOf(t *testing.T, db *storage.DB, ref storage.TelemetrySessionRef) (TerminalSummary, bool) {
	t.Helper()
	s, err := storage.TelemetrySessionByID(context.Background(), db.Read, ref.EnvironmentID, ref.DeploymentID, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Summary == "" {
		return TerminalSummary{}, false
	}
	var sum TerminalSummary
	if err := json.Unmarshal([]byte(s.Summary), &sum); err != nil {
		t.Fatalf("summary %q: %v", s.Summary, err)
	}
	return sum, true
}

// gpuWindow is a window with cpuPct and gpuUtilPct of the given maxima.
func gpuWindow(ref storage.TelemetrySessionRef, start time.Time, cpuMax, gpuMax float64) storage.TelemetryWindow {
	var m storage.TelemetryMetricSet
	m[storage.MetricCPUPct] = &storage.MetricAgg{N: 2, Sum: 2 * cpuMax, Min: cpuMax, Max: cpuMax, Last: cpuMax}
	m[storage.MetricGPUUtilPct] = &storage.MetricAgg{N: 2, Sum: 2 * gpuMax, Min: gpuMax, Max: gpuMax, Last: gpuMax}
	return storage.TelemetryWindow{EnvironmentID: ref.EnvironmentID, DeploymentID: ref.DeploymentID, SessionID: ref.ID,
		WindowStart: start, ReceivedAt: start.Add(time.Minute), Metrics: m}
}

// TestFinalizerRace: a delayed window accepted between the finalizer's
// snapshot read and its write leaves no summary (the write's version guard
// fails); the next pass writes one that includes it. The session's
// history is split across hourly rollups (folded in the same pass) and
// detail, and the summary counts both.
func TestFinalizerRace(t *testing.T) {
	db := storagetest.NewDB(t)
	t0 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	dep := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: t0})
	ref := storage.TelemetrySessionRef{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID, ID: "sess-race"}
	// Day 0: 30 minutes (20 GPU idle) that will be folded; day 9: 10
	// minutes with a gap of 2 in detail.
	var ws []storage.TelemetryWindow
	for m := range 30 {
		gpu := 50.0
		if m < 20 {
			gpu = 1
		}
		ws = append(ws, gpuWindow(ref, t0.Add(time.Duration(m)*time.Minute), 10, gpu))
	}
	day9 := t0.Add(9 * 24 * time.Hour)
	for m := range 12 {
		if m == 4 || m == 5 {
			continue
		}
		ws = append(ws, gpuWindow(ref, day9.Add(time.Duration(m)*time.Minute), 30, 60))
	}
	insertWindows(t, db, ws)
	ended := day9.Add(12 * time.Minute)
	storagetest.EndDeployment(t, db, dep.EnvironmentID, dep.ID, ended)

	r, clock := newRetention(db, ended.Add(FinalizeGrace))
	raced := false
	r.afterSnapshot = func(s storage.TelemetrySession) {
		if raced {
			return
		}
		raced = true
		// The delayed final window for minute 4, CPU at 95.
		insertWindows(t, db, []storage.TelemetryWindow{gpuWindow(ref, day9.Add(4*time.Minute), 95, 2)})
	}
	rep, err := r.Tick(context.Background(), RetentionTriggerSchedule)
	if err != nil {
		t.Fatal(err)
	}
	if !raced {
		t.Fatal("the finalizer never reached its write")
	}
	if rep.MinuteRollups != 30 {
		t.Errorf("folded %d windows, want the 30 of day 0", rep.MinuteRollups)
	}
	if rep.SessionsFinalized != 0 {
		t.Errorf("finalized %d sessions despite the delayed window", rep.SessionsFinalized)
	}
	if s, ok := summaryOf(t, db, ref); ok {
		t.Fatalf("a stale summary was written: %+v", s)
	}

	clock.Advance(time.Minute)
	rep, err = r.Tick(context.Background(), RetentionTriggerSchedule)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SessionsFinalized != 1 {
		t.Fatalf("second pass finalized %d sessions, want 1", rep.SessionsFinalized)
	}
	got, ok := summaryOf(t, db, ref)
	if !ok {
		t.Fatal("no summary after the second pass")
	}
	// 30 + 10 + the delayed one; span t0 … day9+12min.
	want := TerminalSummary{
		StartedAt: t0, EndedAt: day9.Add(12 * time.Minute),
		DurationSeconds: int64(day9.Add(12*time.Minute).Sub(t0) / time.Second),
		WindowsSeen:     41,
		GapMinutes:      int64(day9.Add(12*time.Minute).Sub(t0)/time.Minute) - 41,
		GPUIdleMinutes:  21,
		EndReason:       storage.SessionEndDeploymentEnded,
		Metrics: map[string]MetricSummary{
			"cpuPct":     {Samples: 82, Mean: (30*2*10 + 10*2*30 + 2*95) / 82.0, Max: 95},
			"gpuUtilPct": {Samples: 82, Mean: (20*2*1 + 10*2*50 + 10*2*60 + 2*2) / 82.0, Max: 60},
		},
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("summary\n got %s\nwant %s", gotJSON, wantJSON)
	}
	// A finalized session is left alone.
	rep, err = r.Tick(context.Background(), RetentionTriggerSchedule)
	if err != nil || rep.SessionsFinalized != 0 {
		t.Errorf("third pass finalized %d (%v), want 0", rep.SessionsFinalized, err)
	}
}

// TestFinalizerGrace: a session ended with its deployment is summarized
// only once FinalizeGrace has passed since the end (a final window may
// still arrive until then); one ended by a final window is summarized at
// the next pass; an open session never.
func TestFinalizerGrace(t *testing.T) {
	db := storagetest.NewDB(t)
	t0 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	byDeployment := storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{WindowStart: t0, SessionID: "by-deployment"})
	final := storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{WindowStart: t0, SessionID: "final", Final: true})
	open := storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{WindowStart: t0, SessionID: "open"})
	ended := t0.Add(time.Minute)
	storagetest.EndDeployment(t, db, byDeployment.EnvironmentID, byDeployment.DeploymentID, ended)
	ref := func(w storage.TelemetryWindow) storage.TelemetrySessionRef {
		return storage.TelemetrySessionRef{EnvironmentID: w.EnvironmentID, DeploymentID: w.DeploymentID, ID: w.SessionID}
	}
	for _, tc := range []struct {
		name              string
		at                time.Time
		byDeployment, fin bool
		finalizedThisPass int64
	}{
		{"14:59 after the end", ended.Add(FinalizeGrace - time.Second), false, true, 1},
		{"15:00 after the end", ended.Add(FinalizeGrace), true, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRetention(db, tc.at)
			rep, err := r.Tick(context.Background(), RetentionTriggerSchedule)
			if err != nil {
				t.Fatal(err)
			}
			if rep.SessionsFinalized != tc.finalizedThisPass {
				t.Errorf("finalized %d, want %d", rep.SessionsFinalized, tc.finalizedThisPass)
			}
			if _, ok := summaryOf(t, db, ref(byDeployment)); ok != tc.byDeployment {
				t.Errorf("deployment-ended session summarized = %v, want %v", ok, tc.byDeployment)
			}
			if s, ok := summaryOf(t, db, ref(final)); ok != tc.fin || (ok && (s.WindowsSeen != 1 || s.EndReason != storage.SessionEndFinal)) {
				t.Errorf("final session summary %+v (%v), want one window, reason final", s, ok)
			}
			if _, ok := summaryOf(t, db, ref(open)); ok {
				t.Error("an open session was summarized")
			}
		})
	}
}
