package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
)

func openTestDB(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Writer.Do(context.Background(), func(tx Tx) error {
		_, err := tx.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY) STRICT`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return db
}

func count(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A failing unit undoes only its own statements, even when it shares a
// transaction with units that succeed.
func TestWriterUnitIsolation(t *testing.T) {
	db := openTestDB(t)
	var wg sync.WaitGroup
	errs := make([]error, 200)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = db.Writer.Do(context.Background(), func(tx Tx) error {
				if _, err := tx.Exec(`INSERT INTO t (k) VALUES (?)`, fmt.Sprint("a", i)); err != nil {
					return err
				}
				if i%2 == 1 {
					// Writes something, then refuses: both must vanish.
					if _, err := tx.Exec(`INSERT INTO t (k) VALUES (?)`, fmt.Sprint("b", i)); err != nil {
						return err
					}
					return errors.New("refused")
				}
				return nil
			})
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if (i%2 == 1) != (err != nil) {
			t.Fatalf("unit %d: err = %v", i, err)
		}
	}
	if n := count(t, db); n != 100 {
		t.Fatalf("rows = %d, want 100 (only the successful units)", n)
	}
	commits, units := db.Writer.Stats()
	if units != 101 { // 100 inserts + the CREATE TABLE
		t.Fatalf("units = %d, want 101", units)
	}
	if commits < 1 || commits > units {
		t.Fatalf("commits = %d", commits)
	}
}

// A batch whose units all fail commits nothing: no COMMIT, no commit hook
// (which wakes replication), no WAL frames. A flood of refused requests,
// each claiming its nonce inside a unit and rolled back, costs the disk
// nothing; one unit that succeeds commits its batch as before.
func TestWriterCommitsNothingWhenEveryUnitFails(t *testing.T) {
	db := openTestDB(t)
	hooked := 0
	db.Writer.SetCommitHook(func() { hooked++ })
	wal := func() int64 {
		fi, err := os.Stat(db.Path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	commits0, _ := db.Writer.Stats()
	wal0 := wal()
	refused := errors.New("refused")
	for i := range 50 {
		err := db.Writer.Do(context.Background(), func(tx Tx) error {
			if _, err := tx.Exec(`INSERT INTO t (k) VALUES (?)`, fmt.Sprint("nonce-", i)); err != nil {
				return err
			}
			return refused
		})
		if !errors.Is(err, refused) {
			t.Fatalf("unit %d: err = %v, want its refusal", i, err)
		}
	}
	if commits, _ := db.Writer.Stats(); commits != commits0 || hooked != 0 {
		t.Fatalf("50 refused units: %d commits and %d commit hooks, want none", commits-commits0, hooked)
	}
	if w := wal(); w != wal0 {
		t.Fatalf("50 refused units grew the WAL from %d to %d bytes", wal0, w)
	}
	if n := count(t, db); n != 0 {
		t.Fatalf("rows = %d, want none", n)
	}
	if err := db.Writer.Do(context.Background(), func(tx Tx) error {
		_, err := tx.Exec(`INSERT INTO t (k) VALUES ('kept')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if commits, _ := db.Writer.Stats(); commits != commits0+1 || hooked != 1 || count(t, db) != 1 {
		t.Fatalf("a unit that succeeds: %d commits, %d hooks, %d rows; want 1, 1, 1", commits-commits0, hooked, count(t, db))
	}
}

// A unique violation inside a unit is that unit's error; the batch commits.
func TestWriterConstraintErrorIsPerUnit(t *testing.T) {
	db := openTestDB(t)
	ins := func(k string) error {
		return db.Writer.Do(context.Background(), func(tx Tx) error {
			_, err := tx.Exec(`INSERT INTO t (k) VALUES (?)`, k)
			return err
		})
	}
	if err := ins("x"); err != nil {
		t.Fatal(err)
	}
	if err := ins("x"); err == nil || !isUniqueViolation(err) {
		t.Fatalf("duplicate insert: err = %v, want a UNIQUE violation", err)
	}
	if err := ins("y"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db); n != 2 {
		t.Fatalf("rows = %d, want 2", n)
	}
}

// A panicking unit becomes that unit's error and does not stop the writer.
func TestWriterPanicIsContained(t *testing.T) {
	db := openTestDB(t)
	err := db.Writer.Do(context.Background(), func(tx Tx) error {
		if _, err := tx.Exec(`INSERT INTO t (k) VALUES ('p')`); err != nil {
			return err
		}
		panic("boom")
	})
	if err == nil {
		t.Fatal("panicking unit returned nil")
	}
	if err := db.Writer.Do(context.Background(), func(tx Tx) error {
		_, err := tx.Exec(`INSERT INTO t (k) VALUES ('q')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db); n != 1 {
		t.Fatalf("rows = %d, want 1 (the panicking unit's insert rolled back)", n)
	}
}

// After Close, Do refuses with ErrClosed; a cancelled context refuses before
// running the unit.
func TestWriterClosedAndCancelled(t *testing.T) {
	db := openTestDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := db.Writer.Do(ctx, func(tx Tx) error { ran = true; return nil })
	if err == nil || ran {
		t.Fatalf("cancelled Do: err=%v ran=%v", err, ran)
	}
	db.Writer.close()
	if err := db.Writer.Do(context.Background(), func(tx Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after close: %v, want ErrClosed", err)
	}
}

// The writer prepares a statement after its first use and reuses it; the
// prepared path keeps savepoint semantics.
func TestWriterReusesPreparedStatements(t *testing.T) {
	db := openTestDB(t)
	const q = `INSERT INTO t (k) VALUES (?)`
	before := db.Writer.prepared.Load()
	for i := 0; i < 3; i++ {
		if i == 1 {
			// The statement is prepared once the first batch has answered.
			testwait.Eventually(t, testwait.Short, "the statement prepared after its first use", func() (bool, string) {
				n := db.Writer.prepared.Load()
				return n != before, fmt.Sprintf("%d prepared", n)
			})
		}
		err := db.Writer.Do(context.Background(), func(tx Tx) error {
			if _, err := tx.Exec(q, fmt.Sprint("k", i)); err != nil {
				return err
			}
			if i == 2 {
				return errors.New("refused")
			}
			return nil
		})
		if (i == 2) != (err != nil) {
			t.Fatalf("unit %d: %v", i, err)
		}
	}
	if n := count(t, db); n != 2 {
		t.Fatalf("rows = %d, want 2", n)
	}
}

// With the write lock held by another connection (as Litestream's
// checkpoint does), the writer waits for it instead of failing: its
// connection has busy_timeout 0 and it polls BEGIN itself.
func TestWriterWaitsForWriteLock(t *testing.T) {
	db := openTestDB(t)
	timings := make(chan BatchTiming, 4)
	db.Writer.SetTimingHook(func(bt BatchTiming) { timings <- bt })
	other, err := sql.Open("sqlite", dsn(db.Path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin() // BEGIN IMMEDIATE via _txlock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO t (k) VALUES ('held')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- db.Writer.Do(context.Background(), func(tx Tx) error {
			_, err := tx.Exec(`INSERT INTO t (k) VALUES ('after')`)
			return err
		})
	}()
	select {
	case err := <-done:
		t.Fatalf("writer finished while the lock was held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer after the lock was released: %v", err)
	}
	if n := count(t, db); n != 2 {
		t.Fatalf("rows = %d, want 2", n)
	}
	// The timing hook saw the wait; a batch with the lock free waits 0.
	if bt := <-timings; bt.LockWait <= 0 || bt.Commit <= 0 {
		t.Errorf("timing of the batch that waited: %+v, want LockWait and Commit > 0", bt)
	}
	if err := db.Writer.Do(context.Background(), func(tx Tx) error {
		_, err := tx.Exec(`INSERT INTO t (k) VALUES ('free')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if bt := <-timings; bt.LockWait != 0 || bt.Commit <= 0 {
		t.Errorf("timing of a batch with the lock free: %+v, want LockWait 0 and Commit > 0", bt)
	}
}

// Do racing close never hangs: every call either commits or gets ErrClosed.
func TestWriterCloseRacesDo(t *testing.T) {
	for round := 0; round < 20; round++ {
		db := openTestDB(t)
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				err := db.Writer.Do(context.Background(), func(tx Tx) error {
					_, err := tx.Exec(`INSERT INTO t (k) VALUES (?)`, fmt.Sprint(round, "-", i))
					return err
				})
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("Do: %v", err)
				}
			}(i)
		}
		db.Writer.close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a Do racing close never returned")
		}
	}
}

// Units of one batch share the transaction's statement handles; a unit
// whose context ends while it runs fails alone, even when it is the first
// to use a statement, and leaves the shared handle working for the units
// after it.
func TestWriterSharedStatementsOutliveAUnitsContext(t *testing.T) {
	db := openTestDB(t)
	const q = `INSERT INTO t (k) VALUES (?)`
	// Use the statement once so that the writer prepares it.
	if err := db.Writer.Do(context.Background(), func(tx Tx) error { _, err := tx.Exec(q, "warm"); return err }); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, testwait.Short, "the statement prepared after its first use", func() (bool, string) {
		n := db.Writer.prepared.Load()
		return n > 0, fmt.Sprintf("%d prepared", n)
	})
	// Hold the write lock so that both units queue into one batch.
	other, err := sql.Open("sqlite", dsn(db.Path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(`INSERT INTO t (k) VALUES ('held')`); err != nil {
		t.Fatal(err)
	}
	// A first unit waits for the lock in BEGIN; A and B queue behind it
	// and form the next batch together. queued waits until the writer's
	// queue holds n requests: Z taken into its batch (0), then A (1), then
	// A and B (2), in that order.
	queued := func(what string, n int) {
		t.Helper()
		testwait.Eventually(t, testwait.Short, what, func() (bool, string) {
			got := len(db.Writer.reqs)
			return got == n, fmt.Sprintf("%d queued", got)
		})
	}
	errZ := make(chan error, 1)
	go func() {
		errZ <- db.Writer.Do(context.Background(), func(tx Tx) error { _, err := tx.Exec(q, "z"); return err })
	}()
	testwait.Eventually(t, testwait.Short, "Z waiting in BEGIN for the held lock", func() (bool, string) {
		waits := db.Writer.lockWaits.Load()
		return waits > 0, fmt.Sprintf("%d BEGINs found the lock held", waits)
	})
	ctxA, cancelA := context.WithCancel(context.Background())
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() {
		errA <- db.Writer.Do(ctxA, func(tx Tx) error {
			cancelA() // its caller gives up while the unit runs
			_, err := tx.ExecContext(ctxA, q, "a")
			return err
		})
	}()
	queued("A queued", 1)
	go func() {
		errB <- db.Writer.Do(context.Background(), func(tx Tx) error {
			_, err := tx.ExecContext(context.Background(), q, "b")
			return err
		})
	}()
	queued("A and B queued", 2)
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-errZ; err != nil {
		t.Fatal(err)
	}
	if err := <-errA; err == nil {
		t.Fatal("unit A ran a statement with its context cancelled")
	}
	if err := <-errB; err != nil {
		t.Fatalf("unit B after A's context ended: %v", err)
	}
	if n := count(t, db); n != 3 { // warm, z, b
		t.Fatalf("rows = %d, want 3", n)
	}
	if commits, _ := db.Writer.Stats(); commits != 4 { // create, warm, z, a+b
		t.Logf("A and B did not share a batch (%d commits); the test proved less than it should", commits)
	}
}

// A lone caller's writes are never held for the group window (admin
// operations, loops and tests commit at once); once a COMMIT carried
// several units the next batch is held, and every unit is still answered
// after the COMMIT that holds it.
func TestWriterHoldsBatchesOnlyUnderConcurrency(t *testing.T) {
	db := openTestDB(t)
	for i := 0; i < 20; i++ {
		if err := db.Writer.Do(context.Background(), func(tx Tx) error {
			_, err := tx.Exec(`INSERT INTO t (k) VALUES (?)`, fmt.Sprint("seq-", i))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.Writer.held.Load(); n != 0 {
		t.Fatalf("sequential writes were held %d times", n)
	}
	const callers = 32
	for round := 0; round < 20 && db.Writer.held.Load() == 0; round++ {
		var wg sync.WaitGroup
		for i := 0; i < callers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if err := db.Writer.Do(context.Background(), func(tx Tx) error {
					_, err := tx.Exec(`INSERT INTO t (k) VALUES (?)`, fmt.Sprint("par-", round, "-", i))
					return err
				}); err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
	}
	if db.Writer.held.Load() == 0 {
		t.Fatal("concurrent writes were never held for the group window")
	}
	commits, units := db.Writer.Stats()
	if got := count(t, db); int64(got) != units-1 { // the CREATE TABLE unit wrote no row
		t.Fatalf("rows = %d, units = %d (commits %d)", got, units, commits)
	}
}
