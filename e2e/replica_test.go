package e2e

// End-to-end tests of "the replica never stops silently" (docs/operations.md,
// "Replication", "Start-up and shutdown", "Backup and restore"): the built
// binary, versitygw as S3, file replicas and the real `litestream restore`.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// e2eReplication returns the daemon's replication status.
func e2eReplication(d *proctest.Daemon) (adminapi.ReplicationHealth, string) {
	st, err := d.Admin().GetStatus(context.Background())
	if err != nil {
		return adminapi.ReplicationHealth{}, err.Error()
	}
	return st.Replication, fmt.Sprintf("%+v", st.Replication)
}

// e2eCaughtUp waits until the replica confirms every commit.
func e2eCaughtUp(t *testing.T, d *proctest.Daemon, what string) {
	t.Helper()
	testwait.Eventually(t, testwait.Long, what, func() (bool, string) {
		h, s := e2eReplication(d)
		return h.LagSeconds == 0 && h.RemoteTXID > 0 && h.RemoteTXID == h.LocalTXID && !h.Failing, s
	})
}

// e2eTrimLocalHistory removes every local L0 file but the newest from the
// stopped daemon's Litestream state: what Litestream's L0 retention does
// five minutes after an upload, done at once. Afterwards the local history
// no longer starts at transaction 1.
func e2eTrimLocalHistory(t *testing.T, dataDir string) {
	t.Helper()
	dir := filepath.Join(dataDir, ".chalupa.db-litestream", "ltx", "0")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) < 2 {
		t.Fatalf("local history has %d L0 files, want several to trim", len(ents))
	}
	for _, e := range ents[:len(ents)-1] { // ReadDir sorts by name: txid order
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// e2eExitLastLine stops d with SIGTERM and returns its exit status and its
// last log line.
func e2eExitLastLine(t *testing.T, d *proctest.Daemon) (int, string) {
	t.Helper()
	d.Signal(syscall.SIGTERM)
	code := d.WaitTimeout(90 * time.Second)
	// The last JSON line (stderr's "chalupa: …" repeats the error after it).
	lines := strings.Split(strings.TrimSpace(d.Logs()), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			return code, lines[i]
		}
	}
	return code, ""
}

// TestReplicaReseededAfterLoss: the versitygw replica path is wiped after
// the local history was trimmed, once while serve is stopped and once while
// it runs; serve re-seeds it by itself (status reseeds, a replica-reseeded
// event) and a `litestream restore` holds every acknowledged write.
func TestReplicaReseededAfterLoss(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	for _, running := range []bool{false, true} {
		name := map[bool]string{false: "while stopped", true: "while running"}[running]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s3 := proctest.StartVersityGW(t)
			path := "reseed"
			d := proctest.StartDaemon(t, bin, s3.DaemonEnv(path))
			var acked []string
			for round := range 3 { // several syncs: several transactions
				acked = append(acked, e2eCreateMany(t, d, fmt.Sprintf("first%d", round), 3)...)
				e2eCaughtUp(t, d, "the first writes to reach the replica")
			}
			wipe := func() {
				if err := os.RemoveAll(filepath.Join(s3.Root, s3.Bucket, path)); err != nil {
					t.Fatal(err)
				}
			}
			if !running {
				e2eStop(t, d)
				e2eTrimLocalHistory(t, d.DataDir)
				wipe()
				d = proctest.StartDaemon(t, bin, d.EnvCopy())
			} else {
				wipe()
			}
			acked = append(acked, e2eCreateMany(t, d, "after-loss", 3)...)
			// The marker is checked once a minute (the idle check) even
			// while commits flow: within the 2-minute lag limit.
			testwait.Eventually(t, testwait.Long, "the replica to be re-seeded", func() (bool, string) {
				h, s := e2eReplication(d)
				return h.Reseeds >= 1, s
			})
			e2eCaughtUp(t, d, "the replica to catch up after re-seeding")
			ev, err := d.Admin().ListEvents(context.Background(), adminapi.ListEventsRequest{Kind: "replica-reseeded"})
			if err != nil || len(ev.Events) == 0 {
				t.Errorf("replica-reseeded events: %+v, %v", ev, err)
			}
			e2eStop(t, d)
			restored := proctest.Restore(t, litestream, s3.ReplicaURL(path), s3.Credentials())
			e2eRequireAll(t, "the re-seeded replica", e2eInFile(t, restored), acked)
		})
	}
}

// TestServeExitsWhenTheReplicaLacksCommits: serve exits 3 when its final
// sync leaves acknowledged commits out of the replica, and its last log
// line counts them: versitygw stopped before the stop, a file replica
// replaced by a file, and a wrong secret from the first start.
func TestServeExitsWhenTheReplicaLacksCommits(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	for _, tc := range []struct {
		name  string
		env   func(t *testing.T) (map[string]string, func())
		first int // commits acknowledged before the replica breaks
	}{
		{"versitygw stopped", func(t *testing.T) (map[string]string, func()) {
			s3 := proctest.StartVersityGW(t)
			return s3.DaemonEnv("stopped"), s3.Stop
		}, 3},
		{"file replica replaced by a file", func(t *testing.T) (map[string]string, func()) {
			dir := filepath.Join(t.TempDir(), "replica")
			return map[string]string{"CHALUPA_REPLICA_URL": e2eFileURL(dir)}, func() {
				replaceWithFile(t, dir)
			}
		}, 3},
		{"wrong secret from the first start", func(t *testing.T) (map[string]string, func()) {
			s3 := proctest.StartVersityGW(t)
			env := s3.DaemonEnv("wrong-secret")
			env["CHALUPA_SPACES_SECRET"] = "wrong" + s3.SecretKey
			return env, func() {}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, breakReplica := tc.env(t)
			d := proctest.StartDaemon(t, bin, env)
			if tc.first > 0 {
				e2eCreateMany(t, d, "before", tc.first)
				e2eCaughtUp(t, d, "the replica before it breaks")
			}
			breakReplica()
			e2eCreateMany(t, d, "lost", 4)
			code, last := e2eExitLastLine(t, d)
			if code != 3 {
				t.Errorf("serve exited %d, want 3; last line %s", code, last)
			}
			if !strings.Contains(last, `"missing_commits":`) || !strings.Contains(last, "replica lacks acknowledged commits") ||
				strings.Contains(last, `"missing_commits":0,`) {
				t.Errorf("last log line does not count the missing commits: %s", last)
			}
		})
	}
}

// TestServeRefusesTwoHistories: serve on an empty data dir refuses a
// replica that already holds another database's history, naming the cure
// and creating nothing; the runbook cure (`litestream restore` into the
// data dir, then serve) continues the same history.
func TestServeRefusesTwoHistories(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	replica := e2eFileURL(filepath.Join(t.TempDir(), "replica"))
	first := proctest.StartDaemon(t, bin, map[string]string{"CHALUPA_REPLICA_URL": replica})
	acked := e2eCreateMany(t, first, "first", 5)
	e2eCaughtUp(t, first, "the first database's replica")
	e2eStop(t, first)

	env := e2eSecrets(first.Env)
	env["CHALUPA_REPLICA_URL"] = replica
	env["CHALUPA_LISTEN"] = proctest.FreeAddr(t)
	env["CHALUPA_DATA_DIR"] = t.TempDir()
	out, code := proctest.RunCommand(t, bin, t.TempDir(), env, "serve")
	if code != 1 || !strings.Contains(out, "litestream restore") || !strings.Contains(out, "new, empty path") {
		t.Fatalf("serve on an empty data dir with a used replica: exit %d, want 1 naming the cure:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(env["CHALUPA_DATA_DIR"], "chalupa.db")); !os.IsNotExist(err) {
		t.Errorf("a refused serve created a database: %v", err)
	}

	// The cure: restore the replica into the data dir and serve it.
	restored := proctest.Restore(t, litestream, replica, nil)
	e2eCopyFile(t, restored, filepath.Join(env["CHALUPA_DATA_DIR"], "chalupa.db"))
	second := proctest.StartDaemon(t, bin, maps.Clone(env))
	acked = append(acked, e2eCreateMany(t, second, "second", 3)...)
	e2eCaughtUp(t, second, "the restored database to continue the replica")
	if h, s := e2eReplication(second); h.Refused != "" || h.Reseeds != 0 {
		t.Errorf("the restored database's own replica: %s", s)
	}
	e2eStop(t, second)
	again := proctest.Restore(t, litestream, replica, nil)
	e2eRequireAll(t, "the continued history", e2eInFile(t, again), acked)
}

// replaceWithFile replaces the directory dir, which a running daemon's
// replication may be writing into, with a file. The daemon can add a file
// between RemoveAll's listing and its last unlink ("directory not empty"),
// or make the directory again before the file is written: each is tried
// again, at most replaceAttempts times.
func replaceWithFile(t *testing.T, dir string) {
	t.Helper()
	const replaceAttempts = 100
	for attempt := 1; ; attempt++ {
		err := os.RemoveAll(dir)
		if err == nil {
			err = os.WriteFile(dir, []byte("not a directory"), 0o600)
		}
		if err == nil {
			return
		}
		if attempt == replaceAttempts {
			t.Fatalf("replace %s with a file: %v", dir, err)
		}
	}
}
