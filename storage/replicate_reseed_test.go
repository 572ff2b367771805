package storage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// replicaRun is one replicator over a database in a test, with the events
// it raised.
type replicaRun struct {
	db    *storage.DB
	repl  *storage.Replicator
	clock clockwork.Clock
	mu    sync.Mutex
	kinds []string
}

// testIdleCheck is the idle check (and marker check) interval of these
// tests: a replica emptied while running is noticed within it.
const testIdleCheck = 200 * time.Millisecond

// startReplica starts replication of db to the file replica dir, with db's
// identity, on the real clock (lag is measured, so "caught up" means it)
// and an idle check every testIdleCheck.
func startReplica(t *testing.T, db *storage.DB, dir string, fresh bool) *replicaRun {
	t.Helper()
	ctx := context.Background()
	id, err := storage.DatabaseIdentity(ctx, db.Read)
	if err != nil || id == "" {
		t.Fatalf("database identity %q: %v", id, err)
	}
	run := &replicaRun{db: db, clock: clockwork.NewRealClock()}
	run.repl, err = storage.StartReplication(ctx, db.Path, storage.ReplicaConfig{
		URL: "file://" + dir, Clock: run.clock, Identity: id, Fresh: fresh, IdleCheckInterval: testIdleCheck,
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
	return run
}

// closeReplicaAtCleanup closes db, then repl (as stop does), when the test
// ends and before the temporary directory holding a file replica is removed
// (cleanups run last first): a replicator left running syncs into the
// directory while it is removed, and the removal fails with "directory not
// empty". Both closes are no-ops after stop.
func closeReplicaAtCleanup(t *testing.T, db *storage.DB, repl *storage.Replicator) {
	t.Helper()
	t.Cleanup(func() {
		_ = db.Close()
		_ = repl.Close(context.Background())
	})
}

// events returns the kinds of the events raised so far.
func (r *replicaRun) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.kinds)
}

// caughtUp waits until the replica confirms every commit: no commit
// waits (lag 0) and the replica holds a history. The replica's position
// may stay one behind the local one: Litestream's checkpoint writes a
// bookkeeping transaction of its own (_litestream_seq), which is no
// commit of chalupa's and is uploaded with the next commit's sync. What
// the replica holds is checked by restoring it (restoredSlugs).
func (r *replicaRun) caughtUp(t *testing.T, what string) storage.ReplicationHealth {
	t.Helper()
	var h storage.ReplicationHealth
	testwait.Eventually(t, testwait.Long, what, func() (bool, string) {
		h = r.repl.Health(r.clock.Now())
		return h.LagSeconds == 0 && h.RemoteTXID > 0 && h.Refused == "", fmt.Sprintf("%+v", h)
	})
	return h
}

// stop closes the database, then replication; the final sync must succeed.
func (r *replicaRun) stop(t *testing.T) {
	t.Helper()
	if err := r.db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.repl.Close(context.Background()); err != nil {
		t.Fatalf("final sync: %v", err)
	}
}

// writeEnvs creates n environments prefix-0… and returns their slugs.
func writeEnvs(t *testing.T, db *storage.DB, prefix string, n int) []string {
	t.Helper()
	var slugs []string
	for i := range n {
		e := storagetest.Environment(t, db, storage.Environment{Slug: fmt.Sprintf("%s-%02d", prefix, i)})
		slugs = append(slugs, e.Slug)
	}
	return slugs
}

// restoredSlugs restores the file replica at dir with the real litestream
// CLI and returns the environments the restored file holds.
func restoredSlugs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	out := proctest.Restore(t, proctest.ToolPath(t, "litestream"), "file://"+dir, nil)
	db, err := storage.OpenReadOnly(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	envs, err := storage.ListEnvironments(ctx, db.Read)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range envs {
		have[e.Slug] = true
	}
	return have
}

// trim runs Litestream's L0 retention at once and checks the local history
// no longer starts at transaction 1.
func trim(t *testing.T, r *replicaRun) {
	t.Helper()
	if err := r.repl.TrimHistory(context.Background()); err != nil {
		t.Fatal(err)
	}
	if start, err := r.repl.LocalHistoryStart(); err != nil || start <= 1 {
		t.Fatalf("local history starts at txid %d after trimming (%v), want > 1", start, err)
	}
}

// TestEmptiedReplicaIsReseeded: a replica emptied after the local history
// was trimmed (so Litestream alone can never upload transaction 1 again)
// is re-seeded with a fresh snapshot and a replica-reseeded event, both
// when it was emptied while serve was stopped and while it ran; a
// `litestream restore` then holds every acknowledged write.
func TestEmptiedReplicaIsReseeded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		running bool
	}{{"while stopped", false}, {"while running", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "replica")
			db := storagetest.NewDB(t)
			run := startReplica(t, db, dir, true)
			// Several syncs, so the history has several transactions.
			var acked []string
			for round := range 3 {
				acked = append(acked, writeEnvs(t, db, fmt.Sprintf("first%d", round), 3)...)
				run.caughtUp(t, "the first writes to reach the replica")
			}
			trim(t, run)
			acked = append(acked, writeEnvs(t, db, "trimmed", 3)...)
			run.caughtUp(t, "the writes after trimming to reach the replica")

			if !tc.running {
				run.stop(t)
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				reopened, err := storage.Open(context.Background(), db.Path)
				if err != nil {
					t.Fatal(err)
				}
				run = startReplica(t, reopened, dir, false)
				db = reopened
			} else {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			acked = append(acked, writeEnvs(t, db, "after-loss", 3)...)
			testwait.Eventually(t, testwait.Long, "the replica to be re-seeded", func() (bool, string) {
				h := run.repl.Health(run.clock.Now())
				return h.Reseeds == 1, fmt.Sprintf("%+v", h)
			})
			h := run.caughtUp(t, "the replica to catch up after re-seeding")
			if h.Failing || h.Refused != "" {
				t.Errorf("health after re-seeding: %+v", h)
			}
			if ev := run.events(); !slices.Contains(ev, storage.ReplicaReseededKind) {
				t.Errorf("events %v lack %s", ev, storage.ReplicaReseededKind)
			}
			run.stop(t)
			have := restoredSlugs(t, dir)
			for _, s := range acked {
				if !have[s] {
					t.Errorf("restored replica lacks acknowledged %s", s)
				}
			}
		})
	}
}

// TestReplicaOfAnotherDatabaseIsRefused: a replica path whose marker names
// another database, or (for a database created by this start) one that
// holds any history, is never written: health says refused and failing, a
// replica-refused event is raised, the replica's files stay as they were,
// and Close reports the commits the replica lacks.
func TestReplicaOfAnotherDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// legacy removes the first database's marker (a replica written
		// before markers existed).
		legacy bool
	}{{"marker of another database", false}, {"history without a marker, new database", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "replica")
			first := startReplica(t, storagetest.NewDB(t), dir, true)
			writeEnvs(t, first.db, "first", 3)
			first.caughtUp(t, "the first database's replica")
			first.stop(t)
			if tc.legacy {
				if err := os.RemoveAll(filepath.Join(dir, storage.IdentityMarkerDir)); err != nil {
					t.Fatal(err)
				}
			}
			before := listFiles(t, dir)

			second := startReplica(t, storagetest.NewDB(t), dir, true)
			writeEnvs(t, second.db, "second", 2)
			testwait.Eventually(t, testwait.Long, "the replica to be refused", func() (bool, string) {
				h := second.repl.Health(second.clock.Now())
				return h.Refused != "" && h.Failing, fmt.Sprintf("%+v", h)
			})
			if ev := second.events(); !slices.Equal(ev, []string{storage.ReplicaRefusedKind}) {
				t.Errorf("events %v, want one %s", ev, storage.ReplicaRefusedKind)
			}
			if err := second.db.Close(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := second.repl.Close(ctx)
			var fe *storage.FinalSyncError
			if !errors.As(err, &fe) || !errors.Is(err, storage.ErrReplicaBehind) || fe.Missing < 2 {
				t.Errorf("Close of a refused replica: %v, want a FinalSyncError counting ≥ 2 missing commits", err)
			}
			if after := listFiles(t, dir); !slices.Equal(before, after) {
				t.Errorf("the refused replica changed:\nbefore %v\nafter  %v", before, after)
			}
			if err := storage.CheckReplicaUnused(context.Background(), "file://"+dir, "", ""); !errors.Is(err, storage.ErrReplicaForeign) {
				t.Errorf("CheckReplicaUnused on a replica with a history: %v", err)
			}
		})
	}
}

// TestFinalSyncCountsWhatTheReplicaLacks: when the replica cannot be
// written at stop, Close returns a FinalSyncError counting the
// acknowledged commits the replica lacks.
func TestFinalSyncCountsWhatTheReplicaLacks(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "replica")
	run := startReplica(t, storagetest.NewDB(t), dir, true)
	writeEnvs(t, run.db, "before", 2)
	run.caughtUp(t, "the replica before it breaks")
	// A file where the replica directory was: every write fails (ENOTDIR),
	// even for root.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeEnvs(t, run.db, "lost", 4)
	if err := run.db.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := run.repl.Close(ctx)
	var fe *storage.FinalSyncError
	if !errors.As(err, &fe) || fe.Missing < 4 {
		t.Fatalf("Close with an unwritable replica: %v, want a FinalSyncError counting 4 missing commits", err)
	}
	if fe.LocalTXID <= fe.RemoteTXID {
		t.Errorf("local txid %d, replica txid %d: want the replica behind", fe.LocalTXID, fe.RemoteTXID)
	}
}

// listFiles lists every file under dir (relative paths, sorted).
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
