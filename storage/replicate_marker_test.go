package storage_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestDeletedReplicaNoticedWhileWritesFlow: with the default intervals
// (idle check 1 min, marker check 10 s; docs/operations.md, "Replication"),
// an idle daemon does not list the replica for its marker in 11 s, and a
// replica deleted right after a marker check while writes flow is noticed
// by the next marker listing within 10 s plus one sync gap, and re-seeded
// after exactly that one listing.
func TestDeletedReplicaNoticedWhileWritesFlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "replica")
	db := storagetest.NewDB(t)
	id, err := storage.DatabaseIdentity(ctx, db.Read)
	if err != nil {
		t.Fatal(err)
	}
	run := &replicaRun{db: db, clock: clockwork.NewRealClock()}
	run.repl, err = storage.StartReplication(ctx, db.Path, storage.ReplicaConfig{
		URL: "file://" + dir, Clock: run.clock, Identity: id, Fresh: true,
		OnEvent: func(ev storage.ReplicaEvent) {
			run.mu.Lock()
			run.kinds = append(run.kinds, ev.Kind)
			run.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	closeReplicaAtCleanup(t, db, run.repl)
	db.Writer.SetCommitHook(run.repl.Committed)
	run.caughtUp(t, "the migrations to reach the replica")

	// Idle: the loop sleeps until its idle check, and lists nothing on
	// the marker's 10 s cadence. The wait is the measured interval itself.
	idleFrom := run.repl.PresenceChecks()
	time.Sleep(storage.DefaultMarkerCheckInterval + time.Second)
	if n := run.repl.PresenceChecks() - idleFrom; n != 0 {
		t.Fatalf("idle for 11 s: %d marker listings, want none before the idle check", n)
	}

	// Writes flow: an environment every 100 ms until the test ends.
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				writerDone <- nil
				return
			case <-time.After(100 * time.Millisecond):
			}
			err := db.Writer.Do(ctx, func(tx storage.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO environments (org_id, slug, name, status, created_at, updated_at)
					VALUES (?, ?, ?, 'active', 0, 0)`, storage.PlatformOrgID, fmt.Sprintf("flow-%d", i), "flow")
				return err
			})
			if err != nil {
				writerDone <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-writerDone; err != nil {
			t.Errorf("writes: %v", err)
		}
	}()

	// The first commit after the idle spell is past the marker's due time:
	// wait for that check, then delete the replica at once, the worst case.
	var checked int64
	testwait.Eventually(t, testwait.Short, "a marker check while writes flow", func() (bool, string) {
		checked = run.repl.PresenceChecks()
		return checked > idleFrom, fmt.Sprintf("%d listings", checked)
	})
	// Syncs keep writing into it meanwhile: RemoveAll can find a file
	// created after it listed a directory, so it tries again.
	testwait.Eventually(t, testwait.Short, "the replica deleted", func() (bool, string) {
		err := os.RemoveAll(dir)
		return err == nil, fmt.Sprint(err)
	})
	deleted := time.Now()
	var noticed time.Duration
	testwait.Eventually(t, testwait.Short, "the next marker check", func() (bool, string) {
		noticed = time.Since(deleted)
		return run.repl.PresenceChecks() > checked, "no check yet"
	})
	// Polling sees the check within 100 ms (testwait's longest pause).
	if limit := storage.DefaultMarkerCheckInterval + storage.DefaultSyncGap + 100*time.Millisecond; noticed > limit {
		t.Errorf("the deletion was noticed after %v, want within %v", noticed, limit)
	}
	testwait.Eventually(t, testwait.Short, "the deleted replica to be re-seeded", func() (bool, string) {
		h := run.repl.Health(run.clock.Now())
		return h.Reseeds == 1, fmt.Sprintf("%+v", h)
	})
	reseeded := time.Since(deleted)
	if n := run.repl.PresenceChecks() - checked; n != 1 {
		t.Errorf("%d marker listings from the deletion to the re-seed %v later, want 1 (at most one each 10 s)", n, reseeded)
	}
	if ev := run.events(); !slices.Contains(ev, storage.ReplicaReseededKind) {
		t.Errorf("events %v lack %s", ev, storage.ReplicaReseededKind)
	}
	t.Logf("deleted replica noticed %v and re-seeded %v after the deletion", noticed, reseeded)
	run.caughtUp(t, "the replica to catch up after re-seeding")
}
