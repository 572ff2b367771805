package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// PlatformOrgID is the platform organization created by migration 0001.
const PlatformOrgID = 1

// Environment is one row of environments.
type Environment struct {
	ID        int64
	Slug      string
	Name      string
	Status    string // active | sunk
	OrgID     int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// StorageBytes is the charged bytes of the environment's runs,
	// telemetry and producer lifecycle events, counted in the writer unit
	// that writes or deletes them (docs/operations.md, "Quotas").
	StorageBytes int64
}

const environmentCols = `id, org_id, slug, name, status, created_at, updated_at, storage_bytes`

func scanEnvironment(row interface{ Scan(...any) error }) (Environment, error) {
	var e Environment
	var c, u sql.NullInt64
	if err := row.Scan(&e.ID, &e.OrgID, &e.Slug, &e.Name, &e.Status, &c, &u, &e.StorageBytes); err != nil {
		return Environment{}, err
	}
	e.CreatedAt, e.UpdatedAt = fromMS(c), fromMS(u)
	return e, nil
}

// CreateEnvironment inserts an active environment in the platform
// organization. Errors: ErrConflict when the slug exists.
func CreateEnvironment(ctx context.Context, q Querier, slug, name string, now time.Time) (Environment, error) {
	row := q.QueryRowContext(ctx,
		`INSERT INTO environments (org_id, slug, name, status, created_at, updated_at)
		 VALUES (?, ?, ?, 'active', ?, ?) RETURNING `+environmentCols,
		PlatformOrgID, slug, name, ms(now), ms(now))
	e, err := scanEnvironment(row)
	if isUniqueViolation(err) {
		return Environment{}, ErrConflict
	}
	if err != nil {
		return Environment{}, fmt.Errorf("insert environment: %w", err)
	}
	return e, nil
}

// EnvironmentBySlug returns the environment with slug. Errors: ErrNotFound.
func EnvironmentBySlug(ctx context.Context, q Querier, slug string) (Environment, error) {
	e, err := scanEnvironment(q.QueryRowContext(ctx,
		`SELECT `+environmentCols+` FROM environments WHERE slug = ?`, slug))
	if err != nil {
		return Environment{}, notFound(err)
	}
	return e, nil
}

// ListEnvironments returns every environment ordered by slug.
func ListEnvironments(ctx context.Context, q Querier) ([]Environment, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+environmentCols+` FROM environments ORDER BY slug`)
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	defer rows.Close()
	out := []Environment{}
	for rows.Next() {
		e, err := scanEnvironment(rows)
		if err != nil {
			return nil, fmt.Errorf("list environments: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// SinkEnvironmentIfIdle marks the environment sunk when it has no active
// deployment left, and reports whether it did (docs/operations.md,
// "Heartbeats and deadlines": a first heartbeat sets it back to active).
func SinkEnvironmentIfIdle(ctx context.Context, q Querier, environmentID int64, at time.Time) (sunk bool, err error) {
	res, err := q.ExecContext(ctx,
		`UPDATE environments SET status = 'sunk', updated_at = ?
		 WHERE id = ? AND status = 'active'
		   AND NOT EXISTS (SELECT 1 FROM deployments WHERE environment_id = ? AND status = 'active')`,
		ms(at), environmentID, environmentID)
	if err != nil {
		return false, fmt.Errorf("sink environment: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sink environment: %w", err)
	}
	return n == 1, nil
}
