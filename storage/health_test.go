package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sqliteFull returns a real SQLITE_FULL from modernc.org/sqlite: a database
// capped by max_page_count refuses a row that needs more pages.
func sqliteFull(t *testing.T) error {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "full.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{`CREATE TABLE b (v BLOB)`, `PRAGMA max_page_count = 8`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_, err = db.Exec(`INSERT INTO b VALUES (zeroblob(1 << 20))`)
	if err == nil {
		t.Fatal("a 1 MiB row fit into 8 pages")
	}
	return fmt.Errorf("commit write: %w", err)
}

// sqliteReadOnly returns a real SQLITE_READONLY: a write on a database
// opened read-only.
func sqliteReadOnly(t *testing.T) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ro.db")
	rw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Exec(`CREATE TABLE b (v BLOB)`); err != nil {
		t.Fatal(err)
	}
	rw.Close()
	ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = ro.Exec(`INSERT INTO b VALUES (1)`)
	if err == nil {
		t.Fatal("a read-only database took a write")
	}
	return err
}

// sqliteConstraint returns a real SQLITE_CONSTRAINT: not a storage fault.
func sqliteConstraint(t *testing.T) error {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE u (k TEXT PRIMARY KEY); INSERT INTO u VALUES ('a')`); err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`INSERT INTO u VALUES ('a')`)
	if err == nil {
		t.Fatal("a duplicate key was taken")
	}
	return err
}

func TestFaultKind(t *testing.T) {
	pathErr := func(errno syscall.Errno) error {
		return fmt.Errorf("write restore point: %w", &os.PathError{Op: "write", Path: "/data/x", Err: errno})
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"SQLITE_FULL", sqliteFull(t), FaultDiskFull},
		{"SQLITE_READONLY", sqliteReadOnly(t), FaultReadOnly},
		{"SQLITE_CONSTRAINT", sqliteConstraint(t), ""},
		{"ENOSPC", pathErr(syscall.ENOSPC), FaultDiskFull},
		{"EDQUOT", pathErr(syscall.EDQUOT), FaultDiskFull},
		{"EIO", pathErr(syscall.EIO), FaultIO},
		{"bare EIO", syscall.EIO, FaultIO},
		{"EROFS", pathErr(syscall.EROFS), FaultReadOnly},
		{"EACCES", pathErr(syscall.EACCES), ""},
		{"text that reads like a fault", errors.New("no space left on device"), ""},
		{"not found", ErrNotFound, ""},
		{"closed", ErrClosed, ""},
		{"cancelled", fmt.Errorf("unit: %w", context.Canceled), ""},
		{"joined with a fault", errors.Join(errors.New("refused"), pathErr(syscall.ENOSPC)), FaultDiskFull},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FaultKind(c.err); got != c.want {
				t.Fatalf("FaultKind(%v) = %q, want %q", c.err, got, c.want)
			}
			if got := IsStorageFault(c.err); got != (c.want != "") {
				t.Fatalf("IsStorageFault(%v) = %v", c.err, got)
			}
		})
	}
}

// The writer turns failing at a storage fault (a real SQLITE_FULL from a
// page-capped connection), signals it once, keeps failing through refusals
// and a unit's own fault and commits of units that changed nothing, and
// turns healthy at the next COMMIT that carried a unit that wrote a row.
func TestWriterFailingUntilACommitSucceeds(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	w := db.Writer
	if _, failing := w.Failing(); failing {
		t.Fatal("a fresh writer is failing")
	}
	var pages int
	if err := db.Read.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := w.Do(ctx, func(tx Tx) error {
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	err := w.Do(ctx, func(tx Tx) error {
		_, err := tx.Exec(`INSERT INTO t (k) VALUES (hex(zeroblob(1 << 20)))`)
		return err
	})
	if FaultKind(err) != FaultDiskFull {
		t.Fatalf("a row beyond max_page_count: %v, want a disk-full fault", err)
	}
	since, failing := w.Failing()
	if !failing || since.Before(before) {
		t.Fatalf("Failing() = %v, %v after SQLITE_FULL", since, failing)
	}
	select {
	case <-w.FailingSignal():
	default:
		t.Fatal("no signal when the writer turned failing")
	}
	// A refusal is no storage fault and no proof of health either.
	if err := w.Do(ctx, func(tx Tx) error { return errors.New("refused") }); err == nil {
		t.Fatal("refusal answered nil")
	}
	// A unit's own file fault (a restore point, say) counts too.
	_ = w.Do(ctx, func(tx Tx) error { return &os.PathError{Op: "write", Path: "x", Err: syscall.EIO} })
	h := w.StorageHealth()
	if !h.Failing || !h.Since.Equal(since) || h.LastFault != FaultIO || h.Faults != 2 {
		t.Fatalf("StorageHealth = %+v, want failing since %v, last fault %q, 2 faults", h, since, FaultIO)
	}
	select {
	case <-w.FailingSignal():
		t.Fatal("signalled again while still failing")
	default:
	}
	// A unit that changes no row commits without writing a page, on a
	// full disk too: no proof of health (it cleared the flag, and
	// /api/ready answered 200 on a full disk between two real writes).
	for _, q := range []string{`UPDATE t SET k = k WHERE 0`, `SELECT count(*) FROM t`} {
		if err := w.Do(ctx, func(tx Tx) error { _, err := tx.ExecContext(ctx, q); return err }); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if _, failing := w.Failing(); !failing {
			t.Fatalf("no longer failing after a committed unit that changed nothing (%s)", q)
		}
	}
	if err := w.Do(ctx, func(tx Tx) error { return writeSmallRow(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	if _, failing := w.Failing(); failing {
		t.Fatal("still failing after a committed write")
	}
	if h := w.StorageHealth(); h.LastFault != FaultIO || !h.Since.IsZero() {
		t.Fatalf("after recovery: %+v, want the last fault kept and no since", h)
	}
}

// writeSmallRow writes a small row into the test table t (the
// test database has no migrations, so no storage_probe table).
func writeSmallRow(ctx context.Context, tx Tx) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO t (k) VALUES ('probe')`)
	return err
}

func TestMinFreeFor(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		name       string
		configured int64
		total      uint64
		want       uint64
	}{
		{"off", 0, 100 * gib, 0},
		{"set", 12345, 100 * gib, 12345},
		{"default on a 10 GiB disk: 1 GiB", MinFreeAuto, 10 * gib, gib},
		{"default on a 25 GiB disk: 1.25 GiB", MinFreeAuto, 25 * gib, 25 * gib / 100 * 5},
		{"default on a 1 TiB disk: 5 %", MinFreeAuto, 1024 * gib, 1024 * gib / 100 * 5},
		{"default on a tiny disk: 1 GiB, so always low", MinFreeAuto, 64 << 20, gib},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := MinFreeFor(c.configured, c.total); got != c.want {
				t.Fatalf("MinFreeFor(%d, %d) = %d, want %d", c.configured, c.total, got, c.want)
			}
		})
	}
}

// The guard measures at most once per interval, turns low below the floor
// and lifts by itself when space returns, signalling each change; a failed
// measurement refuses nothing.
func TestDiskGuard(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	space := DiskSpace{Free: 10 << 30, Total: 20 << 30}
	var statErr error
	calls := 0
	g := NewDiskGuard(DiskGuardConfig{Path: "/data", MinFreeBytes: 2 << 30, Now: func() time.Time { return now },
		Statfs: func(path string) (DiskSpace, error) {
			if path != "/data" {
				t.Errorf("statfs(%q)", path)
			}
			calls++
			return space, statErr
		}})
	if st := g.Check(); st.Low || st.FreeBytes != 10<<30 || st.MinFreeBytes != 2<<30 || calls != 1 {
		t.Fatalf("first check: %+v after %d statfs", st, calls)
	}
	space.Free = 1 << 30
	if st := g.Check(); st.Low || calls != 1 {
		t.Fatalf("within the interval: %+v after %d statfs, want the cached measurement", st, calls)
	}
	now = now.Add(DiskCheckInterval)
	st := g.Check()
	if !st.Low || st.FreeBytes != 1<<30 || !st.LowSince.Equal(now) || calls != 2 {
		t.Fatalf("after the interval: %+v after %d statfs, want low since now", st, calls)
	}
	select {
	case <-g.Changed():
	default:
		t.Fatal("no signal when the guard turned low")
	}
	lowSince := now
	now = now.Add(time.Minute)
	if st := g.Refresh(); !st.Low || !st.LowSince.Equal(lowSince) {
		t.Fatalf("still low: %+v, want low since %v", st, lowSince)
	}
	space.Free = 3 << 30
	if st := g.Refresh(); st.Low || !st.LowSince.IsZero() {
		t.Fatalf("space returned: %+v, want lifted", st)
	}
	select {
	case <-g.Changed():
	default:
		t.Fatal("no signal when the guard lifted")
	}
	space.Free, statErr = 0, fmt.Errorf("statfs: %w", syscall.EIO)
	if st := g.Refresh(); st.Low || st.Err != FaultIO {
		t.Fatalf("failed measurement: %+v, want not low and the fault's kind", st)
	}
	if st := g.Refresh(); strings.Contains(st.Err, "/data") {
		t.Fatalf("error names the path: %q", st.Err)
	}
}

// TestDiskGuardLiftsAboveAMargin: free space that hovers at the floor does
// not flip the guard at every measurement. Once low, it lifts only when
// free space is back to the floor plus its margin (1/16 of the floor, at
// most 256 MiB), and each episode signals once on and once off.
func TestDiskGuardLiftsAboveAMargin(t *testing.T) {
	for _, tc := range []struct {
		name          string
		floor, margin uint64
	}{
		{"default 1 GiB floor", 1 << 30, 64 << 20},
		{"large floor, capped", 64 << 30, 256 << 20},
		{"small floor", 1 << 20, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LiftMarginFor(tc.floor); got != tc.margin {
				t.Fatalf("LiftMarginFor(%d) = %d, want %d", tc.floor, got, tc.margin)
			}
			var free uint64
			g := NewDiskGuard(DiskGuardConfig{Path: "/data", MinFreeBytes: int64(tc.floor), Interval: -1,
				Statfs: func(string) (DiskSpace, error) { return DiskSpace{Free: free, Total: 1 << 50}, nil }})
			signals := func() int {
				n := 0
				for {
					select {
					case <-g.Changed():
						n++
					default:
						return n
					}
				}
			}
			free = tc.floor - 1
			if !g.Check().Low {
				t.Fatal("below the floor: not low")
			}
			// Hovering just above and below the floor, within the margin.
			for _, f := range []uint64{tc.floor + 1, tc.floor - 4096, tc.floor + tc.margin/2, tc.floor + tc.margin - 1} {
				free = f
				if st := g.Check(); !st.Low {
					t.Fatalf("free %d (floor %d, margin %d): lifted, want low until the floor plus the margin", f, tc.floor, tc.margin)
				}
			}
			if n := signals(); n != 1 {
				t.Fatalf("%d signals while hovering, want the one of turning low", n)
			}
			free = tc.floor + tc.margin
			if g.Check().Low {
				t.Fatal("at the floor plus the margin: still low")
			}
			// Lifted, it turns low again only below the floor itself.
			free = tc.floor
			if g.Check().Low {
				t.Fatal("at the floor after lifting: low, want low only below it")
			}
			if n := signals(); n != 1 {
				t.Fatalf("%d signals after lifting, want one", n)
			}
		})
	}
}

// Statfs measures a real filesystem.
func TestStatfs(t *testing.T) {
	sp, err := Statfs(t.TempDir())
	if err != nil {
		t.Fatalf("statfs: %v", err)
	}
	if sp.Total == 0 || sp.Free > sp.Total {
		t.Fatalf("Statfs = %+v", sp)
	}
}
