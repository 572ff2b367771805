package storage_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
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

// TestHousekeepingFailureIsAFailedAttempt: compaction talks to the replica
// too. With the replica's L1 level unwritable (its directory replaced by a
// file) the L0 syncs succeed but the L1 compaction that falls due fails:
// that is counted as a failed attempt, with its kind, and starts a failing
// run, as a failed sync does (an outage that begins under housekeeping is
// not hidden); once the level is writable again the retry compacts it and
// the run ends.
func TestHousekeepingFailureIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	db := storagetest.NewDB(t)
	root := filepath.Join(t.TempDir(), "replica")
	repl, err := storage.StartReplication(ctx, db.Path, storage.ReplicaConfig{
		URL:   (&url.URL{Scheme: "file", Path: root}).String(),
		Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); _ = repl.Close(context.Background()) })
	db.Writer.SetCommitHook(repl.Committed)
	testwait.Eventually(t, testwait.Short, "the first sync", func() (bool, string) {
		h := repl.Health(clock.Now())
		return h.LagSeconds == 0 && h.RemoteTXID > 0 && h.RemoteTXID == h.LocalTXID, fmt.Sprintf("%+v", h)
	})
	var l0 string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "0" && filepath.Base(filepath.Dir(p)) == "ltx" {
			l0 = p
		}
		return nil
	})
	if l0 == "" {
		t.Fatal("no L0 directory in the replica after the first sync")
	}
	l1 := filepath.Join(filepath.Dir(l0), "1")
	if err := os.RemoveAll(l1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l1, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}

	// L1 falls due 30 s on; a commit brings a round that syncs, then compacts.
	clock.Advance(31 * time.Second)
	storagetest.Environment(t, db, storage.Environment{Slug: "compaction-blocked"})
	testwait.Eventually(t, testwait.Short, "the failed compaction counted", func() (bool, string) {
		clock.Advance(100 * time.Millisecond)
		h := repl.Health(clock.Now())
		return h.SyncErrors > 0 && !h.FailingSince.IsZero() && h.LastError != "", fmt.Sprintf("%+v", h)
	})

	if err := os.Remove(l1); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, testwait.Short, "the retry to compact L1 and clear failing", func() (bool, string) {
		clock.Advance(time.Second)
		h := repl.Health(clock.Now())
		entries, _ := os.ReadDir(l1)
		return h.FailingSince.IsZero() && len(entries) > 0, fmt.Sprintf("%+v, %d L1 files", h, len(entries))
	})
}
