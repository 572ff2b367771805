package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Ingest key statuses (docs/operations.md, "Ingest keys").
const (
	KeyActive   = "active"
	KeyRotating = "rotating"
	KeyRevoked  = "revoked"
)

// IngestKey is one row of ingest_keys joined with its environment's slug.
// Envelope is the sealed key material; it is never returned by any API.
type IngestKey struct {
	KeyID            string
	EnvironmentID    int64
	EnvironmentSlug  string
	Status           string
	MasterKeyVersion uint32
	Envelope         []byte
	CreatedAt        time.Time
	RotatedAt        time.Time
	RevokedAt        time.Time
}

const ingestKeyCols = `k.key_id, k.environment_id, e.slug, k.status, k.master_key_version, k.envelope, k.created_at, k.rotated_at, k.revoked_at`

func scanIngestKey(row interface{ Scan(...any) error }) (IngestKey, error) {
	var k IngestKey
	var c, ro, rv sql.NullInt64
	if err := row.Scan(&k.KeyID, &k.EnvironmentID, &k.EnvironmentSlug, &k.Status, &k.MasterKeyVersion, &k.Envelope, &c, &ro, &rv); err != nil {
		return IngestKey{}, err
	}
	k.CreatedAt, k.RotatedAt, k.RevokedAt = fromMS(c), fromMS(ro), fromMS(rv)
	return k, nil
}

// InsertIngestKey stores a new active key. Errors: ErrConflict on a
// duplicate key id.
func InsertIngestKey(ctx context.Context, q Querier, k IngestKey, now time.Time) error {
	_, err := q.ExecContext(ctx,
		`INSERT INTO ingest_keys (key_id, environment_id, status, master_key_version, envelope, created_at)
		 VALUES (?, ?, 'active', ?, ?, ?)`,
		k.KeyID, k.EnvironmentID, k.MasterKeyVersion, k.Envelope, ms(now))
	if isUniqueViolation(err) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("insert ingest key: %w", err)
	}
	return nil
}

// IngestKeyByID returns the key with keyID. Errors: ErrNotFound.
func IngestKeyByID(ctx context.Context, q Querier, keyID string) (IngestKey, error) {
	k, err := scanIngestKey(q.QueryRowContext(ctx,
		`SELECT `+ingestKeyCols+` FROM ingest_keys k JOIN environments e ON e.id = k.environment_id WHERE k.key_id = ?`, keyID))
	if err != nil {
		return IngestKey{}, notFound(err)
	}
	return k, nil
}

// IngestKeyStatus returns only the status of keyID (the cheap recheck the
// ingest write makes inside its transaction). Errors: ErrNotFound.
func IngestKeyStatus(ctx context.Context, q Querier, keyID string) (string, error) {
	var s string
	if err := q.QueryRowContext(ctx, `SELECT status FROM ingest_keys WHERE key_id = ?`, keyID).Scan(&s); err != nil {
		return "", notFound(err)
	}
	return s, nil
}

// RotateEnvironmentKeys marks every active key of the environment rotating
// and returns their ids (they keep verifying during the overlap window).
func RotateEnvironmentKeys(ctx context.Context, q Querier, environmentID int64, now time.Time) ([]string, error) {
	rows, err := q.QueryContext(ctx,
		`UPDATE ingest_keys SET status = 'rotating', rotated_at = ?
		 WHERE environment_id = ? AND status = 'active' RETURNING key_id`, ms(now), environmentID)
	if err != nil {
		return nil, fmt.Errorf("rotate ingest keys: %w", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("rotate ingest keys: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// RevokeIngestKey marks keyID revoked (idempotent: revoking a revoked key
// keeps its first revocation time). Errors: ErrNotFound.
func RevokeIngestKey(ctx context.Context, q Querier, keyID string, now time.Time) error {
	res, err := q.ExecContext(ctx,
		`UPDATE ingest_keys SET status = 'revoked', revoked_at = coalesce(revoked_at, ?) WHERE key_id = ?`, ms(now), keyID)
	if err != nil {
		return fmt.Errorf("revoke ingest key: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// ListIngestKeyEnvelopes returns every key (all statuses), for rewrap.
func ListIngestKeyEnvelopes(ctx context.Context, q Querier) ([]IngestKey, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT `+ingestKeyCols+` FROM ingest_keys k JOIN environments e ON e.id = k.environment_id ORDER BY k.key_id`)
	if err != nil {
		return nil, fmt.Errorf("list ingest keys: %w", err)
	}
	defer rows.Close()
	var out []IngestKey
	for rows.Next() {
		k, err := scanIngestKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list ingest keys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// UpdateIngestKeyEnvelope replaces a key's envelope and master-key version.
func UpdateIngestKeyEnvelope(ctx context.Context, q Querier, keyID string, version uint32, envelope []byte) error {
	res, err := q.ExecContext(ctx,
		`UPDATE ingest_keys SET envelope = ?, master_key_version = ? WHERE key_id = ?`, envelope, version, keyID)
	if err != nil {
		return fmt.Errorf("update ingest key envelope: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// MasterKeyCheck returns the stored check envelope and its master-key
// version. Errors: ErrNotFound when the database has none yet.
func MasterKeyCheck(ctx context.Context, q Querier) (uint32, []byte, error) {
	var v uint32
	var envelope []byte
	err := q.QueryRowContext(ctx, `SELECT master_key_version, envelope FROM master_key_check WHERE id = 1`).Scan(&v, &envelope)
	if err != nil {
		return 0, nil, notFound(err)
	}
	return v, envelope, nil
}

// PutMasterKeyCheck inserts or replaces the check envelope.
func PutMasterKeyCheck(ctx context.Context, q Querier, version uint32, envelope []byte, now time.Time) error {
	_, err := q.ExecContext(ctx,
		`INSERT INTO master_key_check (id, master_key_version, envelope, created_at) VALUES (1, ?, ?, ?)
		 ON CONFLICT (id) DO UPDATE SET master_key_version = excluded.master_key_version, envelope = excluded.envelope`,
		version, envelope, ms(now))
	if err != nil {
		return fmt.Errorf("store master key check: %w", err)
	}
	return nil
}

// RotateEnvironmentKeysExcept marks every active key of the environment
// rotating but those in except (the keys of running boxes, which a
// rotation replaces over SSH instead) and returns their ids
// (docs/operations.md, "Ingest keys").
func RotateEnvironmentKeysExcept(ctx context.Context, q Querier, environmentID int64, except []string, now time.Time) ([]string, error) {
	keep := map[string]bool{}
	for _, id := range except {
		keep[id] = true
	}
	active, err := keyIDs(ctx, q, `SELECT key_id FROM ingest_keys WHERE environment_id = ? AND status = 'active' ORDER BY key_id`, environmentID)
	if err != nil {
		return nil, err
	}
	ids := []string{}
	for _, id := range active {
		if keep[id] {
			continue
		}
		if _, err := q.ExecContext(ctx, `UPDATE ingest_keys SET status = 'rotating', rotated_at = ? WHERE key_id = ?`, ms(now), id); err != nil {
			return nil, fmt.Errorf("rotate ingest keys: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// CountActiveKeys counts the environment's active keys.
func CountActiveKeys(ctx context.Context, q Querier, environmentID int64) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM ingest_keys WHERE environment_id = ? AND status = 'active'`, environmentID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count active keys: %w", err)
	}
	return n, nil
}

// SigningDeployment is an active deployment whose newest heartbeat was
// signed with a given key, and the box whose current droplet it is ("" for
// a producer that is no box).
type SigningDeployment struct {
	DeploymentID string
	DropletID    int64
	Box          string
}

// DeploymentsSigningWith returns the active deployments of keyID's
// environment whose newest heartbeat was signed with keyID, with the box
// each one is the current droplet of: the producers a revocation of keyID
// silences (docs/operations.md, "Ingest keys"). One index lookup per
// active deployment of the environment.
func DeploymentsSigningWith(ctx context.Context, q Querier, keyID string) ([]SigningDeployment, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT d.id, coalesce(d.droplet_id, 0), coalesce((SELECT r.name FROM cloud_resource r
		     WHERE r.environment_id = d.environment_id AND r.droplet_id = d.droplet_id AND d.droplet_id IS NOT NULL ORDER BY r.name LIMIT 1), '')
		 FROM deployments d JOIN ingest_keys k ON k.environment_id = d.environment_id
		 WHERE k.key_id = ? AND d.status = 'active'
		   AND (SELECT h.key_id FROM heartbeats h WHERE h.environment_id = d.environment_id AND h.deployment_id = d.id
		        ORDER BY h.received_at DESC, h.id DESC LIMIT 1) = k.key_id
		 ORDER BY d.id`, keyID)
	if err != nil {
		return nil, fmt.Errorf("deployments signing with a key: %w", err)
	}
	defer rows.Close()
	var out []SigningDeployment
	for rows.Next() {
		var s SigningDeployment
		if err := rows.Scan(&s.DeploymentID, &s.DropletID, &s.Box); err != nil {
			return nil, fmt.Errorf("deployments signing with a key: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
