package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultMaxBatch bounds how many queued writes one transaction commits
// together. Large enough that a burst of concurrent heartbeats shares one WAL
// commit; small enough that the first request in a batch does not wait long
// behind the last.
const DefaultMaxBatch = 256

// maxPrepared bounds the writer's statement cache; chalupa's writes use a few
// dozen distinct statements, so the bound only guards against dynamic SQL.
const maxPrepared = 256

// DefaultGroupWindow is how long the writer holds a transaction open for
// more units, once its first unit has arrived, while writes come from more
// than one caller (the previous COMMIT carried several units). Each COMMIT
// costs an fsync, one WAL frame per page it dirtied and Litestream's copy of
// those frames, whatever it carries: at a steady 1,000 heartbeats/s the
// batches held 1.3 units and each heartbeat cost ~520 µs of CPU; holding
// them 2 ms made batches of ~4.8 and ~360 µs (BenchmarkHeartbeat/1000-per-s,
// one core); with 64 requests in flight batches doubled to ~60 units
// (BenchmarkWriterHeartbeat: 115 -> 78 µs per unit). The cost is up to 2 ms
// (plus timer slack) of latency while under load. A lone caller (a batch of
// one) is never held, so sequential writes (admin operations, loops, tests)
// commit at once.
const DefaultGroupWindow = 2 * time.Millisecond

// busyPoll is how often the writer retries BEGIN while another connection
// (Litestream's checkpoint) holds the write lock. SQLite's own busy handler
// sleeps in steps of 1, 2, 5, 10, 15, 20… ms, which turned a 17–30 ms
// checkpoint into 20–35 ms waits and set the ingest p99; polling every
// 200 µs waits only as long as the lock is actually held.
const busyPoll = 200 * time.Microsecond

// TxFunc is one unit of work run inside the writer's transaction. It returns an
// error to undo exactly its own statements (the writer wraps each TxFunc in a
// savepoint); other units in the same batch are unaffected.
type TxFunc func(tx Tx) error

// Tx is the transaction a TxFunc runs in (see WriteTx).
type Tx = *WriteTx

// WriteTx is the writer's transaction as a Querier. Its statements reuse the
// prepared statements the writer keeps on its connection: a heartbeat runs
// the same handful of statements, and re-parsing them for every unit cost a
// third of the writer's CPU (contrib/load profile, 2026-11-30).
type WriteTx struct {
	tx *sql.Tx
	w  *Writer
	// bound holds this transaction's handles on the writer's prepared
	// statements, shared by every unit of the batch: binding one
	// (Tx.StmtContext) allocates and locks, and a heartbeat runs seven.
	bound map[string]*sql.Stmt
}

// stmt returns the transaction's handle on the prepared statement for query,
// or nil when it is not prepared yet; the writer prepares it after this
// transaction commits (preparing now would need a second connection).
func (t *WriteTx) stmt(query string) *sql.Stmt {
	if st, ok := t.bound[query]; ok {
		return st
	}
	if st, ok := t.w.stmts[query]; ok {
		// Not the unit's context: the handle outlives the unit, and a
		// context that has ended would leave it failing for the rest of
		// the batch. Binding a statement prepared on this very connection
		// does no I/O.
		bst := t.tx.StmtContext(context.Background(), st)
		t.bound[query] = bst
		return bst
	}
	if len(t.w.stmts)+len(t.w.want) < maxPrepared {
		t.w.want[query] = struct{}{}
	}
	return nil
}

// ExecContext runs a statement that returns no rows.
func (t *WriteTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.stmt(query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a statement that returns rows.
func (t *WriteTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.stmt(query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a statement that returns at most one row.
func (t *WriteTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.stmt(query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, query, args...)
}

// Exec is ExecContext with a background context.
func (t *WriteTx) Exec(query string, args ...any) (sql.Result, error) {
	return t.ExecContext(context.Background(), query, args...)
}

type writeReq struct {
	ctx  context.Context
	fn   TxFunc
	done chan error
}

// Writer owns the single write connection. Every write in chalupa is a TxFunc
// submitted with Do. Requests that arrive while a transaction is being
// committed are collected and run together in the next one, each in its own
// savepoint: a refusal (a replayed nonce, say) rolls back only its own unit,
// and one COMMIT makes the whole batch durable. A caller's Do returns only
// after the COMMIT that holds its work, so an acknowledged write is never lost
// to a crash.
type Writer struct {
	db     *sql.DB
	reqs   chan writeReq
	quit   chan struct{}
	wg     sync.WaitGroup
	batch  int
	window time.Duration // DefaultGroupWindow; 0 never holds a batch

	closeMu sync.RWMutex // guards closed against concurrent Do
	closed  bool

	// stmts are statements prepared on the write connection, want the ones
	// to prepare after the current transaction; only the loop touches them.
	stmts    map[string]*sql.Stmt
	want     map[string]struct{}
	prepared atomic.Int64 // len(stmts), readable outside the loop
	held     atomic.Int64 // batches held open for DefaultGroupWindow
	// lockWaits counts BEGINs that found the write lock held by another
	// connection (tests synchronise on it).
	lockWaits atomic.Int64

	// stats, read with Stats.
	mu      sync.Mutex
	commits int64
	units   int64

	// onCommit, when set, is called after every successful COMMIT, before
	// the batch's callers are answered (SetCommitHook).
	onCommit atomic.Pointer[func()]
	// onTiming, when set, is called after every successful COMMIT with
	// how long the batch waited for the write lock and how long its
	// COMMIT took (SetTimingHook).
	onTiming atomic.Pointer[func(BatchTiming)]
	// eventTime, when set, maps the time of every lifecycle event written
	// through the writer (SetEventTime).
	eventTime atomic.Pointer[func(time.Time) time.Time]

	// health is whether commits fail for storage reasons (Failing).
	health writerHealth
}

// BatchTiming is where one committed batch spent its time outside its units
// (docs/operations.md, "Storage and the writer").
type BatchTiming struct {
	// LockWait is how long BEGIN IMMEDIATE waited because another
	// connection held the write lock (Litestream sealing the WAL for its
	// checkpoint); zero when the lock was free.
	LockWait time.Duration
	// Commit is how long COMMIT took: appending the batch's pages to the
	// WAL, the fsync (synchronous=FULL) and any automatic checkpoint.
	Commit time.Duration
}

// SetTimingHook makes the writer call fn after every successful COMMIT, on
// the writer's goroutine, with the batch's BatchTiming; fn must be quick
// (it feeds histograms). nil removes the hook.
func (w *Writer) SetTimingHook(fn func(BatchTiming)) {
	if fn == nil {
		w.onTiming.Store(nil)
		return
	}
	w.onTiming.Store(&fn)
}

// SetCommitHook makes the writer call fn after every successful COMMIT, on
// the writer's goroutine and before the batch's callers hear "ok". fn must
// be quick and must not block (replication records the commit and signals
// its own goroutine). nil removes the hook.
func (w *Writer) SetCommitHook(fn func()) {
	if fn == nil {
		w.onCommit.Store(nil)
		return
	}
	w.onCommit.Store(&fn)
}

func newWriter(db *sql.DB) *Writer {
	w := &Writer{
		db:     db,
		reqs:   make(chan writeReq, DefaultMaxBatch),
		quit:   make(chan struct{}),
		batch:  DefaultMaxBatch,
		window: DefaultGroupWindow,
		stmts:  map[string]*sql.Stmt{},
		want:   map[string]struct{}{},
		health: writerHealth{failing: make(chan struct{}, 1)},
	}
	w.wg.Add(1)
	go w.loop()
	return w
}

// Do runs fn in a write transaction and returns once that transaction has
// committed (nil) or fn's own error. If fn succeeded but the COMMIT failed, Do
// returns the commit error and nothing fn wrote is kept. Errors: ctx's error
// if ctx ends before fn runs, ErrClosed after the writer is closed.
func (w *Writer) Do(ctx context.Context, fn TxFunc) error {
	req := writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	// The read lock spans the enqueue, so close (which takes the write lock
	// before signalling quit) can never slip between a closed check and a
	// send that the exiting loop would then leave unanswered.
	w.closeMu.RLock()
	if w.closed {
		w.closeMu.RUnlock()
		return ErrClosed
	}
	select {
	case w.reqs <- req:
	case <-ctx.Done():
		w.closeMu.RUnlock()
		return ctx.Err()
	}
	w.closeMu.RUnlock()
	// Once queued the request always gets an answer: the loop drains the
	// queue before it exits. Waiting here (not on ctx) keeps the promise that
	// a returned nil means committed and a returned error means not written.
	return <-req.done
}

// Stats reports how many transactions the writer has committed and how many
// units of work they carried; units/commits is the mean batch size.
func (w *Writer) Stats() (commits, units int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.commits, w.units
}

func (w *Writer) close() {
	w.closeMu.Lock()
	if !w.closed {
		w.closed = true
		close(w.quit)
	}
	w.closeMu.Unlock()
	w.wg.Wait()
	for q, st := range w.stmts {
		st.Close()
		delete(w.stmts, q)
	}
}

func (w *Writer) loop() {
	defer w.wg.Done()
	batch := make([]writeReq, 0, w.batch)
	held := time.NewTimer(time.Hour)
	held.Stop()
	grouped := false // the previous COMMIT carried more than one unit
	for {
		batch = batch[:0]
		select {
		case r := <-w.reqs:
			batch = append(batch, r)
		case <-w.quit:
			// Answer everything still queued, then stop.
			for {
				select {
				case r := <-w.reqs:
					w.run([]writeReq{r})
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < w.batch {
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if grouped && w.window > 0 && len(batch) < w.batch {
			w.held.Add(1)
			held.Reset(w.window)
		hold:
			for len(batch) < w.batch {
				select {
				case r := <-w.reqs:
					batch = append(batch, r)
				case <-held.C:
					break hold
				case <-w.quit:
					break hold
				}
			}
			held.Stop()
		}
		grouped = len(batch) > 1
		w.run(batch)
	}
}

// run executes one batch in one transaction.
func (w *Writer) run(batch []writeReq) {
	results := make([]error, len(batch))
	tx, waited, err := w.begin()
	if err != nil {
		err = fmt.Errorf("begin write: %w", err)
		w.noteBatch([]error{err}, false, 0)
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	units, wrote := 0, 0
	wtx := &WriteTx{tx: tx, w: w, bound: make(map[string]*sql.Stmt, 8)}
	// While the writer is failing, only a unit that changed a row proves
	// storage works again: one that changed none (an UPDATE that matched
	// nothing, a read) commits without writing a page, on a full disk too.
	// Rows are counted around each unit then only; while healthy a
	// success would change nothing, so the count is not read. Only this
	// goroutine turns the writer failing (noteBatch), so the state read
	// here holds for the whole batch.
	_, count := w.Failing()
	changes, known := int64(0), false
	if count {
		changes, known = totalChanges(tx)
	}
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		results[i] = w.unit(wtx, r.fn)
		if !count {
			if results[i] == nil {
				units++
				wrote++
			}
			continue
		}
		after, ok := totalChanges(tx)
		if results[i] == nil {
			units++
			// Where the count cannot be read, a success counts as a write.
			if !known || !ok || after != changes {
				wrote++
			}
		}
		changes, known = after, ok
	}
	if units == 0 {
		// Every unit failed or was skipped, so every savepoint was rolled
		// back: nothing to make durable. Roll the transaction back instead
		// of committing it, so a batch of refusals (a flood of requests
		// that each claim their nonce and are refused) appends no WAL
		// frames, costs no fsync and wakes no replication
		// (docs/operations.md, "Storage and the writer").
		if err := tx.Rollback(); err != nil {
			_, _ = w.db.Exec("ROLLBACK")
		}
		w.noteBatch(results, false, 0)
		for i, r := range batch {
			r.done <- results[i]
		}
		w.prepareWanted()
		return
	}
	commitStart := time.Now()
	committed := false
	if err := tx.Commit(); err != nil {
		// SQLite leaves the transaction open after some COMMIT failures
		// (SQLITE_BUSY); database/sql has let go of it either way. Roll it
		// back on the one connection so the next batch can BEGIN.
		_, _ = w.db.Exec("ROLLBACK")
		err = fmt.Errorf("commit write: %w", err)
		for i := range results {
			if results[i] == nil {
				results[i] = err
			}
		}
	} else {
		committed = true
		w.mu.Lock()
		w.commits++
		w.units += int64(units)
		w.mu.Unlock()
		if hook := w.onCommit.Load(); hook != nil {
			(*hook)()
		}
		if hook := w.onTiming.Load(); hook != nil {
			(*hook)(BatchTiming{LockWait: waited, Commit: time.Since(commitStart)})
		}
	}
	w.noteBatch(results, committed, wrote)
	for i, r := range batch {
		r.done <- results[i]
	}
	w.prepareWanted()
}

// begin starts the batch's transaction (BEGIN IMMEDIATE, from the DSN),
// polling every busyPoll while the write lock is held elsewhere, for at most
// DefaultBusyTimeout. waited is how long it polled (zero when the first
// BEGIN succeeded).
func (w *Writer) begin() (tx *sql.Tx, waited time.Duration, err error) {
	var start time.Time
	for {
		tx, err := w.db.BeginTx(context.Background(), nil)
		if err == nil && start.IsZero() {
			return tx, 0, nil
		}
		now := time.Now()
		if start.IsZero() {
			start = now
			if isBusy(err) {
				w.lockWaits.Add(1)
			}
		}
		if err == nil || !isBusy(err) || now.Sub(start) > DefaultBusyTimeout {
			return tx, now.Sub(start), err
		}
		time.Sleep(busyPoll)
	}
}

// totalChanges returns SQLite's total_changes() on the write connection
// inside tx: the rows inserted, updated or deleted since it opened, the
// count the writer's health compares around each unit; ok is false when it
// cannot be read.
func totalChanges(tx *sql.Tx) (n int64, ok bool) {
	if err := tx.QueryRow("SELECT total_changes()").Scan(&n); err != nil {
		return 0, false
	}
	return n, true
}

// prepareWanted prepares, on the now idle write connection, the statements
// the last transaction ran unprepared.
func (w *Writer) prepareWanted() {
	for q := range w.want {
		delete(w.want, q)
		if st, err := w.db.Prepare(q); err == nil {
			w.stmts[q] = st
			w.prepared.Store(int64(len(w.stmts)))
		}
	}
}

// isBusy reports SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// unit runs fn inside a savepoint so that its failure undoes only its own
// statements. A panic in fn is turned into an error for that unit alone.
func (w *Writer) unit(tx *WriteTx, fn TxFunc) (err error) {
	if _, err := tx.Exec("SAVEPOINT unit"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("write panicked: %v", p)
		}
		if err != nil {
			if _, rerr := tx.Exec("ROLLBACK TO unit"); rerr != nil {
				err = errors.Join(err, fmt.Errorf("rollback savepoint: %w", rerr))
			}
		}
		if _, rerr := tx.Exec("RELEASE unit"); rerr != nil && err == nil {
			err = fmt.Errorf("release savepoint: %w", rerr)
		}
	}()
	return fn(tx)
}
