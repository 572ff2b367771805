package storage

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
)

// Querier is what the typed queries need: *sql.DB (the read pool) and *sql.Tx
// (inside a Writer unit) both satisfy it.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ms converts t to the schema's unix-millisecond representation.
func ms(t time.Time) int64 { return t.UnixMilli() }

// msPtr converts an optional time; the zero time is NULL.
func msPtr(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// fromMS converts a stored unix-millisecond value back to UTC time; NULL is
// the zero time.
func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// isUniqueViolation reports whether err is SQLite's UNIQUE or PRIMARY KEY
// constraint failure.
func isUniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// notFound maps sql.ErrNoRows to ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}
