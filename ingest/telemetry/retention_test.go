package telemetry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// propertyStart is the first minute of the property tests' 30 days.
var propertyStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// genFleet creates deployments over two environments and random windows of
// several sessions each spanning up to 30 days from propertyStart: sparse
// minutes (a few windows in most hours) plus dense hours (50–60 windows),
// so groups of every size exist. It returns the windows (not yet stored)
// and the sessions. A session has 50 to 199 sparse minutes, or 25 to 74
// under -short (contrib/test.sh --fast: a smaller fleet with groups of
// every size still; the full run's is as large as ever).
func genFleet(t testing.TB, db *storage.DB, rng *rand.Rand) ([]storage.TelemetryWindow, []storage.TelemetrySessionRef) {
	t.Helper()
	sparseMin, sparseRange := 50, 150
	if testing.Short() {
		sparseMin, sparseRange = 25, 50
	}
	var out []storage.TelemetryWindow
	var sessions []storage.TelemetrySessionRef
	envs := []int64{storagetest.Environment(t, db, storage.Environment{}).ID, storagetest.Environment(t, db, storage.Environment{}).ID}
	const minutes = 30 * 24 * 60
	for d := range 3 {
		dep := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: envs[d%2], LaunchedAt: propertyStart})
		for s := range 1 + rng.IntN(3) {
			ref := storage.TelemetrySessionRef{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID, ID: fmt.Sprintf("sess-%d-%d", d, s)}
			sessions = append(sessions, ref)
			from := rng.IntN(minutes / 2)
			span := 1 + rng.IntN(minutes-from)
			used := map[int]bool{}
			for range sparseMin + rng.IntN(sparseRange) {
				used[from+rng.IntN(span)] = true
			}
			for range 1 + rng.IntN(2) {
				h := (from + rng.IntN(span)) / 60 * 60
				for m := range 60 {
					if rng.IntN(10) > 0 && h+m < minutes {
						used[h+m] = true
					}
				}
			}
			for m := range used {
				start := propertyStart.Add(time.Duration(m) * time.Minute)
				out = append(out, storage.TelemetryWindow{
					EnvironmentID: ref.EnvironmentID, DeploymentID: ref.DeploymentID, SessionID: ref.ID,
					WindowStart: start, ReceivedAt: start.Add(time.Minute), Metrics: randomMetrics(rng, false),
				})
			}
		}
	}
	return out, sessions
}

// lateWindows returns new windows (minutes the sessions do not have yet)
// in hours before cutoff that already have rollups: what a fold must merge.
func lateWindows(rng *rand.Rand, originals []storage.TelemetryWindow, cutoff time.Time) []storage.TelemetryWindow {
	have := map[string]bool{}
	for _, w := range originals {
		have[fmt.Sprint(w.SessionID, w.WindowStart.UnixMilli())] = true
	}
	var out []storage.TelemetryWindow
	for range 200 {
		w := originals[rng.IntN(len(originals))]
		if !w.WindowStart.Before(cutoff) {
			continue
		}
		start := w.WindowStart.Truncate(time.Hour).Add(time.Duration(rng.IntN(60)) * time.Minute)
		key := fmt.Sprint(w.SessionID, start.UnixMilli())
		if have[key] {
			continue
		}
		have[key] = true
		w.WindowStart, w.ReceivedAt, w.Metrics = start, start.Add(time.Minute), randomMetrics(rng, false)
		out = append(out, w)
	}
	return out
}

// runUntilDrained runs passes (each after the previous) until one drains,
// tolerating the injected failures; it fails the test after 500 passes.
func runUntilDrained(t *testing.T, r *Retention) []Report {
	t.Helper()
	var reps []Report
	for range 500 {
		rep, err := r.Tick(context.Background(), RetentionTriggerSchedule)
		reps = append(reps, rep)
		if err == nil && rep.DrainStopReason == DrainStopDrained {
			if rep.BacklogPending {
				t.Fatalf("drained pass reports a pending backlog: %+v", rep)
			}
			return reps
		}
		if err == nil && !rep.BacklogPending {
			t.Fatalf("pass stopped (%s) with no backlog pending", rep.DrainStopReason)
		}
	}
	t.Fatal("retention did not drain in 500 passes")
	return nil
}

// TestRetentionFoldProperty is the retention property: random windows over
// several deployments and sessions spanning 30 days, folded in random
// batch sizes, unit sizes (small, so batches span several writer units)
// and batch caps, with the clock moving forward between
// passes, with injected aborted units, and with late windows merged into
// existing rollups; afterwards every (deployment, session, hour) rollup
// plus remaining detail equals the direct aggregate of the originals.
func TestRetentionFoldProperty(t *testing.T) {
	for _, tc := range []struct {
		name  string
		abort bool
	}{{"random-batches", false}, {"aborted-units", true}} {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 8))
			db := storagetest.NewDB(t)
			originals, sessions := genFleet(t, db, rng)
			insertWindows(t, db, originals)
			t.Logf("%d windows in %d sessions", len(originals), len(sessions))

			now := propertyStart.Add(20*24*time.Hour + time.Duration(rng.IntN(3600))*time.Second)
			r, clock := newRetention(db, now)
			// Units small against the batches, so batches span several
			// units; the hook sees a unit past a batch's first.
			multiUnit := false
			r.inUnit = func(_, unit int) error {
				multiUnit = multiUnit || unit > 0
				if tc.abort && rng.IntN(3) == 0 {
					return errors.New("injected abort")
				}
				return nil
			}
			var folded int64
			// Three stages: day 20, day 30, day 38 (past every window's 7 days).
			for _, step := range []time.Duration{0, 10 * 24 * time.Hour, 8 * 24 * time.Hour} {
				clock.Advance(step)
				r.BatchRows = 20 + rng.IntN(400)
				r.UnitRows = 1 + rng.IntN(r.BatchRows/2)
				r.MaxBatches = 2 + rng.IntN(6)
				for _, rep := range runUntilDrained(t, r) {
					folded += rep.MinuteRollups
				}
				checkFoldInvariants(t, db, originals, sessions, FoldCutoff(clock.Now()), true)
			}
			detail := len(readState(t, db, sessions).detail)
			if !tc.abort && folded != int64(len(originals)-detail) {
				t.Errorf("reports count %d minute rollups; %d windows were folded", folded, len(originals)-detail)
			}

			// Late windows into folded hours merge with the rollups.
			late := lateWindows(rng, originals, FoldCutoff(clock.Now()))
			insertWindows(t, db, late)
			originals = append(originals, late...)
			r.BatchRows = 1 + rng.IntN(400)
			r.UnitRows = 1 + rng.IntN(100)
			reps := runUntilDrained(t, r)
			checkFoldInvariants(t, db, originals, sessions, FoldCutoff(clock.Now()), true)
			if !multiUnit {
				t.Error("no batch was folded in more than one writer unit")
			}
			if !tc.abort && len(late) > 0 {
				var hourly int64
				for _, rep := range reps {
					hourly += rep.HourlyRollups
				}
				if hourly == 0 {
					t.Errorf("%d late windows folded with no hourly update", len(late))
				}
			}
		})
	}
}

// childEnv names the database a TestRetentionChild process folds.
const childEnv = "CHALUPA_RETENTION_CHILD_DB"

// TestRetentionChild is not a test of its own: TestRetentionSurvivesKill
// runs the test binary with childEnv set, and this function then folds the
// database in one-batch passes, printing "pass" after each, until killed.
func TestRetentionChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("helper process for TestRetentionSurvivesKill")
	}
	now, _ := strconv.ParseInt(os.Getenv(childEnv+"_NOW"), 10, 64)
	rows, _ := strconv.Atoi(os.Getenv(childEnv + "_ROWS"))
	unitRows, _ := strconv.Atoi(os.Getenv(childEnv + "_UNIT_ROWS"))
	db, err := storage.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	r := &Retention{DB: db, Clock: clockwork.NewFakeClockAt(time.UnixMilli(now)), Log: zerolog.Nop(), BatchRows: rows, UnitRows: unitRows, MaxBatches: 1}
	for {
		if _, err := r.Tick(context.Background(), RetentionTriggerSchedule); err != nil {
			t.Fatal(err)
		}
		fmt.Println("pass")
	}
}

// TestRetentionSurvivesKill: a process folding the database is killed
// (SIGKILL) mid-pass, repeatedly, with batches of several writer units (so
// kills land between the units of a batch too); after reopening, further
// passes drain and the retention property holds: every committed unit is
// whole hour groups and nothing is folded twice or lost.
func TestRetentionSurvivesKill(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in the helper process")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	path := filepath.Join(t.TempDir(), "chalupa.db")
	ctx := context.Background()
	db, err := storage.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{Logger: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	originals, sessions := genFleet(t, db, rng)
	insertWindows(t, db, originals)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	now := propertyStart.Add(38 * 24 * time.Hour)
	for kill := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRetentionChild$", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"="+path, fmt.Sprintf("%s_NOW=%d", childEnv, now.UnixMilli()),
			fmt.Sprintf("%s_ROWS=%d", childEnv, 20+rng.IntN(300)), fmt.Sprintf("%s_UNIT_ROWS=%d", childEnv, 1+rng.IntN(60)))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		passes := 1 + rng.IntN(4)
		sc := bufio.NewScanner(out)
		for seen := 0; seen < passes && sc.Scan(); {
			if sc.Text() == "pass" {
				seen++
			}
		}
		// Mid-pass: the child starts its next batch as soon as it printed.
		// The random pause is the test (a kill at a random point of the
		// pass), not a wait for anything to settle.
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		t.Logf("kill %d after %d passes", kill, passes)
	}
	db, err = storage.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, _ := newRetention(db, now)
	r.BatchRows = 20 + rng.IntN(400)
	r.UnitRows = 1 + rng.IntN(60)
	runUntilDrained(t, r)
	checkFoldInvariants(t, db, originals, sessions, FoldCutoff(now), true)
}
