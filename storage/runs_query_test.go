package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestRunAndEventCaps: a deployment's runs and producer events are capped
// (ErrRunQuota, ErrEventQuota) with nothing written; a retry of a stored
// run or event is still answered (deduplicated) at the cap, and another
// deployment is not affected.
func TestRunAndEventCaps(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	dep := storagetest.Deployment(t, db, storage.Deployment{})
	other := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: dep.EnvironmentID})
	now := time.Now().UTC().Truncate(time.Millisecond)
	run := func(depID, id string, fp byte) (storage.RunRecorded, error) {
		var res storage.RunRecorded
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			res, err = storage.RecordRun(ctx, tx, storage.Run{EnvironmentID: dep.EnvironmentID, RunID: id, DeploymentID: depID,
				Suite: "s", Status: "passed", StartedAt: now, FinishedAt: now, Fingerprint: [32]byte{fp}, ReceivedAt: now,
				Artifacts: []storage.Artifact{{Name: "a", MediaType: "text/plain", SHA256: "00", LocatorKind: "local", LocatorID: "a"}}}, 2)
			return err
		})
		return res, err
	}
	event := func(depID, id string, h byte) (bool, error) {
		var dedup bool
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			dedup, err = storage.RecordProducerEvent(ctx, tx, storage.LifecycleEvent{ID: id, EnvironmentID: dep.EnvironmentID,
				DeploymentID: depID, Kind: "booted", OccurredAt: now}, [32]byte{h}, 2)
			return err
		})
		return dedup, err
	}
	count := func(q string) int {
		var n int
		if err := db.Read.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Run("runs", func(t *testing.T) {
		for _, id := range []string{"r1", "r2"} {
			if _, err := run(dep.ID, id, 1); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := run(dep.ID, "r3", 1); !errors.Is(err, storage.ErrRunQuota) {
			t.Fatalf("third run: %v, want ErrRunQuota", err)
		}
		if res, err := run(dep.ID, "r1", 1); err != nil || !res.Deduplicated {
			t.Fatalf("retry at the cap: %+v, %v", res, err)
		}
		if _, err := run(dep.ID, "r1", 2); !errors.Is(err, storage.ErrConflict) {
			t.Fatalf("changed retry: %v, want ErrConflict", err)
		}
		if _, err := run(other.ID, "r4", 1); err != nil {
			t.Fatalf("another deployment: %v", err)
		}
		if _, err := run("dep-none", "r5", 1); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("unknown deployment: %v, want ErrNotFound", err)
		}
		if r, a := count(`SELECT count(*) FROM runs`), count(`SELECT count(*) FROM run_artifacts`); r != 3 || a != 3 {
			t.Fatalf("%d runs, %d artifacts stored, want 3 and 3", r, a)
		}
	})
	t.Run("events", func(t *testing.T) {
		for _, id := range []string{"e1", "e2"} {
			if _, err := event(dep.ID, id, 1); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := event(dep.ID, "e3", 1); !errors.Is(err, storage.ErrEventQuota) {
			t.Fatalf("third event: %v, want ErrEventQuota", err)
		}
		if dedup, err := event(dep.ID, "e1", 1); err != nil || !dedup {
			t.Fatalf("retry at the cap: %v, %v", dedup, err)
		}
		if _, err := event(dep.ID, "e1", 2); !errors.Is(err, storage.ErrConflict) {
			t.Fatalf("changed retry: %v, want ErrConflict", err)
		}
		if n := count(`SELECT count(*) FROM lifecycle_events WHERE body_sha256 IS NOT NULL`); n != 2 {
			t.Fatalf("%d producer events stored, want 2", n)
		}
	})
}
