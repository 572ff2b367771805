package storage_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestReplicatorFollowsCommits drives the replicator on a fake clock: idle,
// it holds exactly one timer (the idle check, a minute away); a commit
// wakes it, is stamped, shows as lag until synced, and is in the replica
// after the coalescing gap, with the lag back to zero; an idle check that
// comes due leaves it idle again with one timer.
func TestReplicatorFollowsCommits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	db := storagetest.NewDB(t)
	repl, err := storage.StartReplication(ctx, db.Path, storage.ReplicaConfig{
		URL:   (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "replica")}).String(),
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); _ = repl.Close(context.Background()) })
	db.Writer.SetCommitHook(repl.Committed)

	caughtUp := func(what string) {
		t.Helper()
		testwait.Eventually(t, testwait.Short, what, func() (bool, string) {
			h := repl.Health(clock.Now())
			return h.LagSeconds == 0 && h.RemoteTXID > 0 && h.RemoteTXID == h.LocalTXID, fmt.Sprintf("%+v", h)
		})
	}
	caughtUp("the first sync (migrations) without any clock advance")
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("idle replicator should wait on one timer: %v", err)
	}

	// A commit is stamped now: five (fake) seconds later it is 5 s of lag.
	storagetest.Environment(t, db, storage.Environment{Slug: "after-idle"})
	clock.Advance(5 * time.Second)
	if h := repl.Health(clock.Now()); h.LagSeconds < 4.9 || h.LagSeconds > 5.1 {
		t.Errorf("lag of an unsynced commit 5 s old: %.2fs (%+v)", h.LagSeconds, h)
	}
	caughtUp("the commit to reach the replica")

	// Idle again: the only timer is the next idle check.
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	before := repl.Health(clock.Now()).LastSyncAt
	clock.Advance(storage.DefaultIdleCheckInterval)
	testwait.Eventually(t, testwait.Short, "the idle check to run", func() (bool, string) {
		h := repl.Health(clock.Now())
		return h.LastSyncAt.After(before), fmt.Sprintf("%+v", h)
	})
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if h := repl.Health(clock.Now()); h.Failing || h.SyncErrors != 0 || h.LagSeconds != 0 {
		t.Errorf("after an idle check: %+v", h)
	}
}
