package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Provider token statuses (docs/operations.md, "Customer organizations").
const (
	// TokenActive: the customer sweep and inventory use it.
	TokenActive = "active"
	// TokenInvalid: DigitalOcean answered 401/403 on a droplet call.
	TokenInvalid = "invalid"
	// TokenRevoked: the operator revoked it.
	TokenRevoked = "revoked"
)

// ProviderToken is one row of org_provider_tokens with its organization's
// slug. Envelope is the sealed token; it is never returned by any API.
type ProviderToken struct {
	OrgID            int64
	OrgSlug          string
	Status           string
	Generation       int64
	MasterKeyVersion uint32
	Envelope         []byte
	CreatedAt        time.Time
	RotatedAt        time.Time
	InvalidAt        time.Time
	RevokedAt        time.Time
}

const providerTokenCols = `t.org_id, o.slug, t.status, t.generation, t.master_key_version, t.envelope,
	t.created_at, t.rotated_at, t.invalid_at, t.revoked_at`

func scanProviderToken(row interface{ Scan(...any) error }) (ProviderToken, error) {
	var t ProviderToken
	var c, r, i, v sql.NullInt64
	if err := row.Scan(&t.OrgID, &t.OrgSlug, &t.Status, &t.Generation, &t.MasterKeyVersion, &t.Envelope, &c, &r, &i, &v); err != nil {
		return ProviderToken{}, err
	}
	t.CreatedAt, t.RotatedAt, t.InvalidAt, t.RevokedAt = fromMS(c), fromMS(r), fromMS(i), fromMS(v)
	return t, nil
}

// ProviderTokenByOrg returns organization orgID's token row. Errors:
// ErrNotFound when it never stored one.
func ProviderTokenByOrg(ctx context.Context, q Querier, orgID int64) (ProviderToken, error) {
	t, err := scanProviderToken(q.QueryRowContext(ctx,
		`SELECT `+providerTokenCols+` FROM org_provider_tokens t JOIN organizations o ON o.id = t.org_id WHERE t.org_id = ?`, orgID))
	if err != nil {
		return ProviderToken{}, notFound(err)
	}
	return t, nil
}

// NextProviderTokenGeneration is the generation the next PutProviderToken
// of orgID stores: 1 for a first token, the current one plus one after.
func NextProviderTokenGeneration(ctx context.Context, q Querier, orgID int64) (int64, error) {
	var g int64
	if err := q.QueryRowContext(ctx,
		`SELECT coalesce(max(generation), 0) + 1 FROM org_provider_tokens WHERE org_id = ?`, orgID).Scan(&g); err != nil {
		return 0, fmt.Errorf("provider token generation: %w", err)
	}
	return g, nil
}

// PutProviderToken stores t (OrgID, Generation, MasterKeyVersion,
// Envelope) as organization's active token, replacing any previous one
// (a rotation): the caller seals the envelope for t.Generation, read with
// NextProviderTokenGeneration in the same transaction.
func PutProviderToken(ctx context.Context, q Querier, t ProviderToken, now time.Time) error {
	_, err := q.ExecContext(ctx,
		`INSERT INTO org_provider_tokens (org_id, status, generation, master_key_version, envelope, created_at, rotated_at)
		 VALUES (?1, 'active', ?2, ?3, ?4, ?5, ?5)
		 ON CONFLICT (org_id) DO UPDATE SET status = 'active', generation = excluded.generation,
		   master_key_version = excluded.master_key_version, envelope = excluded.envelope,
		   rotated_at = excluded.rotated_at, invalid_at = NULL, revoked_at = NULL`,
		t.OrgID, t.Generation, t.MasterKeyVersion, t.Envelope, ms(now))
	if err != nil {
		return fmt.Errorf("store provider token: %w", err)
	}
	return nil
}

// RevokeProviderToken marks orgID's token revoked and reports whether it
// changed a row (false: already revoked). Errors: ErrNotFound when the
// organization never stored a token.
func RevokeProviderToken(ctx context.Context, q Querier, orgID int64, now time.Time) (changed bool, err error) {
	res, err := q.ExecContext(ctx,
		`UPDATE org_provider_tokens SET status = 'revoked', revoked_at = ? WHERE org_id = ? AND status != 'revoked'`, ms(now), orgID)
	if err != nil {
		return false, fmt.Errorf("revoke provider token: %w", err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		if _, err := ProviderTokenByOrg(ctx, q, orgID); err != nil {
			return false, err
		}
	}
	return n == 1, nil
}

// InvalidateProviderToken marks orgID's token invalid only if it is still
// active at generation (compare-and-set: a token rotated since the caller
// read it is kept) and reports whether it did.
func InvalidateProviderToken(ctx context.Context, q Querier, orgID, generation int64, now time.Time) (bool, error) {
	res, err := q.ExecContext(ctx,
		`UPDATE org_provider_tokens SET status = 'invalid', invalid_at = ?
		 WHERE org_id = ? AND generation = ? AND status = 'active'`, ms(now), orgID, generation)
	if err != nil {
		return false, fmt.Errorf("invalidate provider token: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("invalidate provider token: %w", err)
	}
	return n == 1, nil
}

// ListProviderTokens returns every token row (all statuses) ordered by
// organization id: rewrap and the organization list read it.
func ListProviderTokens(ctx context.Context, q Querier) ([]ProviderToken, error) {
	return listProviderTokens(ctx, q, `SELECT `+providerTokenCols+` FROM org_provider_tokens t JOIN organizations o ON o.id = t.org_id ORDER BY t.org_id`)
}

// ListActiveProviderTokens returns the active tokens ordered by
// organization id (inventory's customer accounts).
func ListActiveProviderTokens(ctx context.Context, q Querier) ([]ProviderToken, error) {
	return listProviderTokens(ctx, q, `SELECT `+providerTokenCols+` FROM org_provider_tokens t JOIN organizations o ON o.id = t.org_id
		WHERE t.status = 'active' AND o.kind = 'customer' ORDER BY t.org_id`)
}

func listProviderTokens(ctx context.Context, q Querier, query string) ([]ProviderToken, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("list provider tokens: %w", err)
	}
	defer rows.Close()
	var out []ProviderToken
	for rows.Next() {
		t, err := scanProviderToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list provider tokens: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// UpdateProviderTokenEnvelope replaces orgID's envelope and master-key
// version (rewrap). Errors: ErrNotFound.
func UpdateProviderTokenEnvelope(ctx context.Context, q Querier, orgID int64, version uint32, envelope []byte) error {
	res, err := q.ExecContext(ctx,
		`UPDATE org_provider_tokens SET envelope = ?, master_key_version = ? WHERE org_id = ?`, envelope, version, orgID)
	if err != nil {
		return fmt.Errorf("update provider token envelope: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}
