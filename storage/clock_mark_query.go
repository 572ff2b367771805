package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ClockMark returns the persisted wall-clock high-water mark
// (docs/operations.md, "Signed ingest"); the zero time when none is stored
// (a database that never accepted a signed request).
func ClockMark(ctx context.Context, q Querier) (time.Time, error) {
	var at int64
	err := q.QueryRowContext(ctx, `SELECT mark_at FROM clock_mark WHERE id = 1`).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read clock mark: %w", err)
	}
	return time.UnixMilli(at).UTC(), nil
}

// SetClockMark stores mark as the wall-clock high-water mark. It may move
// the mark back: only the clock guard's override does, and it decides.
func SetClockMark(ctx context.Context, q Querier, mark time.Time) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO clock_mark (id, mark_at) VALUES (1, ?)
		 ON CONFLICT (id) DO UPDATE SET mark_at = excluded.mark_at`, ms(mark)); err != nil {
		return fmt.Errorf("write clock mark: %w", err)
	}
	return nil
}

// SetEventTime makes every lifecycle event written through this writer
// (InsertLifecycleEvent, InsertPlatformEvent, InsertOrgEvent) store
// fn(OccurredAt) instead of OccurredAt: the clock guard's trusted time
// while it suspects the wall clock (docs/operations.md, "Reaper"). fn must
// be quick and must not block; nil stores times as given. A producer's
// event (RecordProducerEvent) keeps its agent's own time.
func (w *Writer) SetEventTime(fn func(time.Time) time.Time) {
	if fn == nil {
		w.eventTime.Store(nil)
		return
	}
	w.eventTime.Store(&fn)
}

// eventTime is the time an event stamped at by its writer's clock is
// stored with: the writer's SetEventTime mapping when q is a unit of a
// writer that has one, else at.
func eventTime(q Querier, at time.Time) time.Time {
	tx, ok := q.(*WriteTx)
	if !ok || tx.w == nil {
		return at
	}
	if fn := tx.w.eventTime.Load(); fn != nil {
		return (*fn)(at)
	}
	return at
}
