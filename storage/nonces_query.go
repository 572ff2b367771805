package storage

import (
	"context"
	"fmt"
	"time"
)

// ClaimNonce records nonce for keyID. Called inside the same transaction as
// the data write it protects, so a refused or failed write claims nothing.
// Errors: ErrConflict when the nonce was already claimed for this key.
func ClaimNonce(ctx context.Context, q Querier, keyID, nonce string, signedAt time.Time) error {
	res, err := q.ExecContext(ctx,
		`INSERT INTO nonces (key_id, nonce, signed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
		keyID, nonce, ms(signedAt))
	if err != nil {
		return fmt.Errorf("claim nonce: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrConflict
	}
	return nil
}

// AnyNonces reports whether any nonce is stored (the nonce pruner sleeps
// without a timer while none is).
func AnyNonces(ctx context.Context, q Querier) (bool, error) {
	var any bool
	if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM nonces)`).Scan(&any); err != nil {
		return false, fmt.Errorf("look for nonces: %w", err)
	}
	return any, nil
}

// PruneNonces deletes at most limit nonces signed before cutoff and returns
// how many it deleted. Such nonces can never match again: their requests are
// already outside the timestamp window.
func PruneNonces(ctx context.Context, q Querier, cutoff time.Time, limit int) (int64, error) {
	res, err := q.ExecContext(ctx,
		`DELETE FROM nonces WHERE (key_id, nonce) IN
		 (SELECT key_id, nonce FROM nonces WHERE signed_at < ? LIMIT ?)`,
		ms(cutoff), limit)
	if err != nil {
		return 0, fmt.Errorf("prune nonces: %w", err)
	}
	return res.RowsAffected()
}
