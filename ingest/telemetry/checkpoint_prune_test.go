package telemetry

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestRetentionPrunesCheckpoints: the hourly pass keeps each stack's
// newest storage.StackStatesKeep checkpoints (and one a pending import
// names), deletes every checkpoint of a box destroyed more than 30 days
// ago unless a job of it is live, keeps those of a box destroyed less
// than 30 days ago or still holding a volume, and reports the count
// (docs/operations.md, "Retention").
func TestRetentionPrunesCheckpoints(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	now := time.Date(2026, 12, 1, 12, 43, 0, 0, time.UTC)
	export := []byte(`{"version":3,"deployment":{"resources":[]}}`)
	sum := sha256.Sum256(export)
	seed := func(stack string, env int64, n int) {
		t.Helper()
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			for i := 0; i < n; i++ {
				if _, err := storage.InsertStackState(ctx, tx, storage.StackState{OrganizationID: storage.PlatformOrgID, EnvironmentID: env,
					Stack: stack, Export: export, SHA256: sum[:], SizeBytes: int64(len(export))}, now.Add(-40*24*time.Hour)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// box makes a box whose resources were last recorded at at.
	box := func(name string, res storage.BoxResources, at time.Time) storage.Box {
		t.Helper()
		b := storagetest.Box(t, db, storage.Box{Name: name})
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			return storage.RecordBoxResources(ctx, tx, b.ID, res, at)
		}); err != nil {
			t.Fatal(err)
		}
		return b
	}
	live := box("live", storage.BoxResources{DropletID: 7, FirewallID: "fw", VolumeID: "vol"}, now.Add(-60*24*time.Hour))
	seed("live-compute", live.EnvironmentID, storage.StackStatesKeep+3)
	seed("live-data", live.EnvironmentID, storage.StackStatesKeep+2)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.PutStackImportMarker(ctx, tx, "live-data", 1, now)
	}); err != nil {
		t.Fatal(err)
	}
	gone := box("gone", storage.BoxResources{}, now.Add(-storage.DestroyedBoxStackStateRetention-time.Hour))
	seed("gone-compute", gone.EnvironmentID, 3)
	seed("gone-data", gone.EnvironmentID, 2)
	recent := box("recent", storage.BoxResources{}, now.Add(-storage.DestroyedBoxStackStateRetention+time.Hour))
	seed("recent-compute", recent.EnvironmentID, 3)
	volume := box("volume", storage.BoxResources{VolumeID: "vol-2"}, now.Add(-60*24*time.Hour))
	seed("volume-data", volume.EnvironmentID, 2)
	busy := box("busy", storage.BoxResources{}, now.Add(-60*24*time.Hour))
	seed("busy-compute", busy.EnvironmentID, 2)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.EnqueueJob(ctx, tx, ulid.Make().String(), "box", busy.ID, "up", false, now)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	r, _ := newRetention(db, now)
	rep, err := r.Tick(ctx, RetentionTriggerAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// live-compute: 3 beyond the newest 10; live-data: 2 beyond, but v1
	// is named by a pending import; gone: all 5.
	if want := int64(3 + 1 + 5); rep.StackStatesPruned != want {
		t.Errorf("pruned %d checkpoints, want %d", rep.StackStatesPruned, want)
	}
	versions := func(stack string) string {
		rows, err := db.Read.QueryContext(ctx, `SELECT version FROM stack_states WHERE stack = ? ORDER BY version`, stack)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var vs []int64
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		return fmt.Sprint(vs)
	}
	for stack, want := range map[string]string{
		"live-compute":   "[4 5 6 7 8 9 10 11 12 13]",
		"live-data":      "[1 3 4 5 6 7 8 9 10 11 12]",
		"gone-compute":   "[]",
		"gone-data":      "[]",
		"recent-compute": "[1 2 3]",
		"volume-data":    "[1 2]",
		"busy-compute":   "[1 2]",
	} {
		if got := versions(stack); got != want {
			t.Errorf("%s keeps versions %s, want %s", stack, got, want)
		}
	}
	runs, err := storage.RecentRetentionRuns(ctx, db.Read, 1)
	if err != nil || len(runs) != 1 || runs[0].StackStatesPruned != rep.StackStatesPruned {
		t.Fatalf("stored report %+v, %v", runs, err)
	}
	again, err := r.Tick(ctx, RetentionTriggerAdmin)
	if err != nil || again.StackStatesPruned != 0 {
		t.Fatalf("a second pass pruned %d (%v), want 0", again.StackStatesPruned, err)
	}
}

// TestRetentionPrunesCheckpointsInUnits: a backlog larger than one writer
// unit is pruned over several units of one pass, up to the pass's cap.
func TestRetentionPrunesCheckpointsInUnits(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	now := time.Date(2026, 12, 1, 12, 43, 0, 0, time.UTC)
	b := storagetest.Box(t, db, storage.Box{Name: "many"})
	export := []byte(`{}`)
	sum := sha256.Sum256(export)
	excess := 2*storage.StackStatePruneBatch + 5
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for i := 0; i < storage.StackStatesKeep+excess; i++ {
			if _, err := storage.InsertStackState(ctx, tx, storage.StackState{OrganizationID: storage.PlatformOrgID, EnvironmentID: b.EnvironmentID,
				Stack: "many-compute", Export: export, SHA256: sum[:], SizeBytes: int64(len(export))}, now); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r, _ := newRetention(db, now)
	rep, err := r.Tick(ctx, RetentionTriggerAdmin)
	if err != nil || rep.StackStatesPruned != int64(excess) {
		t.Fatalf("pruned %d (%v), want %d", rep.StackStatesPruned, err, excess)
	}
	var n int
	if err := db.Read.QueryRowContext(ctx, `SELECT count(*) FROM stack_states`).Scan(&n); err != nil || n != storage.StackStatesKeep {
		t.Fatalf("%d checkpoints left (%v), want %d", n, err, storage.StackStatesKeep)
	}
}
