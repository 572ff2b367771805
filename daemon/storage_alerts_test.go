package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/alertstest"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// onlyRaised fails t unless every raised call is kind on the platform
// with a detail holding want.
func onlyRaised(t *testing.T, set *alertstest.Recorder, kind, want string) {
	t.Helper()
	for _, c := range set.Raised() {
		if c.Kind != kind || c.Subject != (alerts.Subject{Kind: alerts.SubjectPlatform}) || !strings.Contains(c.Detail, want) {
			t.Errorf("raised %+v, want only %s on the platform with a detail holding %q", c, kind, want)
		}
	}
}

// check runs kind's re-check from checks.
func check(t *testing.T, checks map[string]alerter.Check, kind string) bool {
	t.Helper()
	c, ok := checks[kind]
	if !ok {
		t.Fatalf("no check for %s", kind)
	}
	holds, _, err := c(context.Background(), alerts.Subject{Kind: alerts.SubjectPlatform})
	if err != nil {
		t.Fatal(err)
	}
	return holds
}

// TestStorageHealthAlerts: the storage-health loop raises disk-low while
// the free-space guard holds and storage-unavailable while the writer's
// commits fail, each once however many ticks see it, and clears each when
// it ends (the guard lifts; the probe's commit succeeds); the console's
// storage banner shows each while it holds; each re-check says whether its
// condition holds now (docs/operations.md, "Alerts").
func TestStorageHealthAlerts(t *testing.T) {
	const gib = 1 << 30
	cases := []struct {
		name, kind, detail string
		// banner is in the console's storage banner while it holds.
		banner string
		env    map[string]string
		// start makes the condition hold; end makes it end.
		start func(t *testing.T, h *daemontest.Ingest, free *atomic.Uint64)
		end   func(free *atomic.Uint64)
	}{
		{name: "disk low, then space returns", kind: alerts.KindDiskLow, detail: "CHALUPA_MIN_FREE_BYTES",
			banner: "below CHALUPA_MIN_FREE_BYTES",
			env:    map[string]string{"CHALUPA_MIN_FREE_BYTES": strconv.Itoa(2 * gib)},
			start:  func(_ *testing.T, _ *daemontest.Ingest, free *atomic.Uint64) { free.Store(gib) },
			end:    func(free *atomic.Uint64) { free.Store(3 * gib) }},
		{name: "commits fail, then the probe commits", kind: alerts.KindStorageUnavailable, detail: storage.FaultDiskFull,
			banner: "the database refuses writes (disk full)",
			env:    map[string]string{"CHALUPA_MIN_FREE_BYTES": "0"},
			start: func(t *testing.T, h *daemontest.Ingest, free *atomic.Uint64) {
				free.Store(512 << 10) // under 1 MiB: no probe
				enospc := &os.PathError{Op: "write", Path: "chalupa.db-wal", Err: syscall.ENOSPC}
				if err := h.App.DB.Writer.Do(context.Background(), func(storage.Tx) error { return enospc }); !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("unit error: %v", err)
				}
			},
			end: func(free *atomic.Uint64) { free.Store(gib) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var free atomic.Uint64
			free.Store(3 * gib)
			h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: tc.env,
				Statfs: func(string) (storage.DiskSpace, error) {
					return storage.DiskSpace{Free: free.Load(), Total: 100 * gib}, nil
				}})
			ctx := context.Background()
			set := &alertstest.Recorder{}
			loop := daemon.NewStorageHealthAlerting(h.App, set)
			checks := daemon.StorageAlertChecks(h.App)
			if _, err := loop.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if check(t, checks, tc.kind) {
				t.Fatalf("%s's check holds before the fault", tc.kind)
			}
			tc.start(t, h, &free)
			for range 2 {
				if _, err := loop.Tick(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := fmt.Sprint(set.Holds(tc.kind)); got != "[true]" {
				t.Fatalf("%s reported %s while it holds, want [true]", tc.kind, got)
			}
			onlyRaised(t, set, tc.kind, tc.detail)
			if !check(t, checks, tc.kind) {
				t.Fatalf("%s's check does not hold while the fault lasts", tc.kind)
			}
			banner := func() string {
				r := h.Do("GET", "/", nil, nil)
				body := string(r.Body)
				i := strings.Index(body, `id="storage-warning"`)
				if i < 0 {
					return ""
				}
				return body[i:min(len(body), i+400)]
			}
			if b := banner(); !strings.Contains(b, tc.banner) {
				t.Fatalf("console banner while %s holds: %q, want %q", tc.kind, b, tc.banner)
			}
			tc.end(&free)
			if _, err := loop.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(set.Holds(tc.kind)); got != "[true false]" {
				t.Fatalf("%s reported %s after the fault ended, want [true false]", tc.kind, got)
			}
			if check(t, checks, tc.kind) {
				t.Fatalf("%s's check holds after the fault ended", tc.kind)
			}
			if b := banner(); b != "" {
				t.Fatalf("console banner after %s ended: %q", tc.kind, b)
			}
		})
	}
}

// replicaUnderTest is a real replicator over a test database and a file
// replica in dir, on a fake clock.
type replicaUnderTest struct {
	db    *storage.DB
	repl  *storage.Replicator
	clock *clockwork.FakeClock
}

// startTestReplica starts replication of db to dir (fresh: db was created
// by this start, so a replica holding any history is refused).
func startTestReplica(t *testing.T, db *storage.DB, dir string, fresh bool) *replicaUnderTest {
	t.Helper()
	ctx := context.Background()
	id, err := storage.DatabaseIdentity(ctx, db.Read)
	if err != nil || id == "" {
		t.Fatalf("database identity %q: %v", id, err)
	}
	r := &replicaUnderTest{db: db, clock: clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	r.repl, err = storage.StartReplication(ctx, db.Path, storage.ReplicaConfig{URL: "file://" + dir, Clock: r.clock, Identity: id, Fresh: fresh})
	if err != nil {
		t.Fatal(err)
	}
	db.Writer.SetCommitHook(r.repl.Committed)
	t.Cleanup(func() { _ = db.Close(); _ = r.repl.Close(context.Background()) })
	return r
}

// until advances the clock by step until cond holds on the health.
func (r *replicaUnderTest) until(t *testing.T, what string, step time.Duration, cond func(storage.ReplicationHealth) bool) {
	t.Helper()
	testwait.Eventually(t, testwait.Long, what, func() (bool, string) {
		h := r.repl.Health(r.clock.Now())
		if cond(h) {
			return true, ""
		}
		r.clock.Advance(step)
		return false, fmt.Sprintf("%+v", h)
	})
}

// replicaEvents are the kinds of db's replica-failing events, in order.
func replicaEvents(t *testing.T, db *storage.DB) string {
	t.Helper()
	rows, err := db.Read.Query(`SELECT kind FROM lifecycle_events WHERE kind IN (?, ?) ORDER BY occurred_at, kind`,
		daemon.ReplicaFailingKind, daemon.ReplicaFailingLiftedKind)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// TestReplicaAlerts: the replica watch raises replica-failing when a
// real replicator's attempts have failed past its lag limit (not before),
// with its replica-failing event, and replica-refused when the replica
// path holds another database's history (replica-failing is not raised
// then), each once however many looks see it; each clears when it ends
// (a sync succeeds, with the replica-failing-lifted event; the path is
// emptied and verified again). Each re-check says whether its condition
// holds now (docs/operations.md, "Alerts").
func TestReplicaAlerts(t *testing.T) {
	t.Run("failing past the lag limit", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "replica")
		r := startTestReplica(t, storagetest.NewDB(t), dir, false)
		r.until(t, "the first sync", 100*time.Millisecond, func(h storage.ReplicationHealth) bool {
			return h.LagSeconds == 0 && h.RemoteTXID > 0
		})
		set := &alertstest.Recorder{}
		watch := daemon.NewReplicaWatch(r.repl, r.db, set, r.clock)
		checks := daemon.ReplicaAlertChecks(r.repl, r.clock)
		if next := watch.Tick(context.Background()); !next.IsZero() {
			t.Fatalf("a caught-up replica: next look at %v, want none (no timer)", next)
		}
		// A file where the replica's L0 directory was: uploads fail.
		var l0 string
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == "0" && filepath.Base(filepath.Dir(p)) == "ltx" {
				l0 = p
			}
			return nil
		})
		if l0 == "" {
			t.Fatal("no L0 directory in the replica")
		}
		if err := os.RemoveAll(l0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l0, []byte("not a directory"), 0o600); err != nil {
			t.Fatal(err)
		}
		storagetest.Environment(t, r.db, storage.Environment{Slug: "replica-down"})
		r.until(t, "a failed attempt", 100*time.Millisecond, func(h storage.ReplicationHealth) bool { return !h.FailingSince.IsZero() })
		next := watch.Tick(context.Background())
		if got := fmt.Sprint(set.Holds(alerts.KindReplicaFailing)); got != "[]" || check(t, checks, alerts.KindReplicaFailing) {
			t.Fatalf("within the lag limit: reported %s (check %v), want nothing", got, check(t, checks, alerts.KindReplicaFailing))
		}
		h := r.repl.Health(r.clock.Now())
		if want := h.FailingSince.Add(storage.DefaultLagLimit); next.Before(want) || next.After(want.Add(2*time.Second)) {
			t.Fatalf("next look at %v, want just after the lag limit passes (%v)", next, want)
		}
		r.until(t, "failing past the lag limit", 10*time.Second, func(h storage.ReplicationHealth) bool { return h.Failing })
		watch.Tick(context.Background())
		watch.Tick(context.Background())
		if got := fmt.Sprint(set.Holds(alerts.KindReplicaFailing)); got != "[true]" {
			t.Fatalf("past the lag limit: reported %s, want [true]", got)
		}
		onlyRaised(t, set, alerts.KindReplicaFailing, "lag limit 120 s")
		if got := replicaEvents(t, r.db); got != "[replica-failing]" {
			t.Fatalf("events while failing: %s, want [replica-failing]", got)
		}
		if !check(t, checks, alerts.KindReplicaFailing) || check(t, checks, alerts.KindReplicaRefused) {
			t.Fatal("checks: want replica-failing alone to hold")
		}
		if err := os.Remove(l0); err != nil {
			t.Fatal(err)
		}
		r.until(t, "a sync to succeed again", time.Second, func(h storage.ReplicationHealth) bool { return h.FailingSince.IsZero() && !h.Failing })
		watch.Tick(context.Background())
		if got := fmt.Sprint(set.Holds(alerts.KindReplicaFailing)); got != "[true false]" {
			t.Fatalf("after recovery: reported %s, want [true false]", got)
		}
		if check(t, checks, alerts.KindReplicaFailing) {
			t.Fatal("replica-failing's check holds after recovery")
		}
		if got := replicaEvents(t, r.db); got != "[replica-failing replica-failing-lifted]" {
			t.Fatalf("events after recovery: %s, want [replica-failing replica-failing-lifted]", got)
		}
	})
	t.Run("refused, then the path is emptied", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "replica")
		first := startTestReplica(t, storagetest.NewDB(t), dir, true)
		storagetest.Environment(t, first.db, storage.Environment{Slug: "first"})
		first.until(t, "the first database's replica", 100*time.Millisecond, func(h storage.ReplicationHealth) bool {
			return h.LagSeconds == 0 && h.RemoteTXID > 0
		})
		if err := first.db.Close(); err != nil {
			t.Fatal(err)
		}
		_ = first.repl.Close(context.Background())

		r := startTestReplica(t, storagetest.NewDB(t), dir, true)
		r.until(t, "the replica to be refused", 100*time.Millisecond, func(h storage.ReplicationHealth) bool { return h.Refused != "" })
		set := &alertstest.Recorder{}
		watch := daemon.NewReplicaWatch(r.repl, r.db, set, r.clock)
		checks := daemon.ReplicaAlertChecks(r.repl, r.clock)
		if next := watch.Tick(context.Background()); !next.IsZero() {
			t.Fatalf("refused: next look at %v, want none (the replicator signals the end)", next)
		}
		watch.Tick(context.Background())
		if got := fmt.Sprint(set.Holds(alerts.KindReplicaRefused)); got != "[true]" {
			t.Fatalf("refused: reported %s, want [true]", got)
		}
		onlyRaised(t, set, alerts.KindReplicaRefused, "another database's history")
		if !check(t, checks, alerts.KindReplicaRefused) || check(t, checks, alerts.KindReplicaFailing) {
			t.Fatal("checks: want replica-refused alone to hold")
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		r.until(t, "the emptied path verified", 10*time.Second, func(h storage.ReplicationHealth) bool { return h.Refused == "" })
		select {
		case <-r.repl.Changed():
		default:
			t.Fatal("the refusal ended without a signal on Changed")
		}
		watch.Tick(context.Background())
		if got := fmt.Sprint(set.Holds(alerts.KindReplicaRefused)); got != "[true false]" {
			t.Fatalf("after the path was emptied: reported %s, want [true false]", got)
		}
		if check(t, checks, alerts.KindReplicaRefused) {
			t.Fatal("replica-refused's check holds after the refusal ended")
		}
	})
}

// TestStorageAlertsRecheckAtStart: alerts of the four storage conditions
// left open by an earlier process are evaluated again at start through
// their checks: those whose condition no longer holds resolve, disk-low,
// whose guard still holds, stays open (docs/operations.md, "Alerts").
func TestStorageAlertsRecheckAtStart(t *testing.T) {
	const gib = 1 << 30
	p := daemontest.NewInProcess(t, daemontest.AppOptions{
		Env: map[string]string{"CHALUPA_MIN_FREE_BYTES": strconv.Itoa(2 * gib)},
		Statfs: func(string) (storage.DiskSpace, error) {
			return storage.DiskSpace{Free: gib, Total: 100 * gib}, nil
		},
	})
	ctx := context.Background()
	kinds := []string{alerts.KindStorageUnavailable, alerts.KindDiskLow, alerts.KindReplicaFailing, alerts.KindReplicaRefused}
	for _, kind := range kinds {
		if err := daemon.Alerter(p.App.Server).Set(ctx, kind, alerts.Subject{Kind: alerts.SubjectPlatform}, true, "left open"); err != nil {
			t.Fatal(err)
		}
	}
	n, err := daemon.RecheckAlerts(ctx, p.App.Server)
	if err != nil || n != 3 {
		t.Fatalf("re-check resolved %d, %v; want 3", n, err)
	}
	open, err := storage.OpenAlerts(ctx, p.App.DB.Read)
	if err != nil || len(open) != 1 || open[0].Kind != alerts.KindDiskLow {
		t.Fatalf("open after the re-check: %+v, %v; want disk-low alone", open, err)
	}
}
