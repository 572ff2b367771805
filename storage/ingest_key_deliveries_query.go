package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// RecordKeyIssued records that converge issued ingest key keyID for the
// droplet dropletID of box boxID, before the key travels
// (ingest_key_deliveries; docs/operations.md, "SSH key delivery").
func RecordKeyIssued(ctx context.Context, q Querier, keyID, boxID string, dropletID int64, now time.Time) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO ingest_key_deliveries (key_id, box_id, droplet_id, issued_at) VALUES (?, ?, ?, ?)`,
		keyID, boxID, dropletID, ms(now)); err != nil {
		return fmt.Errorf("record issued key: %w", err)
	}
	return nil
}

// MarkKeyDelivered records that keyID was written to its droplet and
// returns the other keys recorded for the same box's droplet that are still
// active or rotating: the droplet no longer holds them, so the caller
// revokes them. Errors: ErrNotFound when keyID was never recorded.
func MarkKeyDelivered(ctx context.Context, q Querier, keyID string, now time.Time) ([]string, error) {
	var boxID string
	var dropletID int64
	if err := q.QueryRowContext(ctx,
		`UPDATE ingest_key_deliveries SET delivered_at = ? WHERE key_id = ? RETURNING box_id, droplet_id`,
		ms(now), keyID).Scan(&boxID, &dropletID); err != nil {
		return nil, notFound(err)
	}
	rows, err := q.QueryContext(ctx,
		`SELECT d.key_id FROM ingest_key_deliveries d JOIN ingest_keys k ON k.key_id = d.key_id
		 WHERE d.box_id = ? AND d.droplet_id = ? AND d.key_id <> ? AND k.status IN ('active', 'rotating')
		 ORDER BY d.issued_at, d.key_id`, boxID, dropletID, keyID)
	if err != nil {
		return nil, fmt.Errorf("earlier keys of the droplet: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("earlier keys of the droplet: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// RecordRotationKeyIssued records that a rotation issued ingest key keyID
// for the droplet dropletID of box boxID, before the key travels, as
// awaiting its first heartbeat (confirm_pending): the heartbeat signed
// with it revokes the droplet's earlier keys (ConfirmDeliveredKey;
// docs/operations.md, "Ingest keys").
func RecordRotationKeyIssued(ctx context.Context, q Querier, keyID, boxID string, dropletID int64, now time.Time) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO ingest_key_deliveries (key_id, box_id, droplet_id, issued_at, confirm_pending) VALUES (?, ?, ?, ?, 1)`,
		keyID, boxID, dropletID, ms(now)); err != nil {
		return fmt.Errorf("record issued key: %w", err)
	}
	return nil
}

// MarkRotationKeyWritten records that a rotation wrote keyID to its
// droplet, and marks the droplet's earlier keys that are still active
// rotating (they keep verifying until the heartbeat signed with keyID
// revokes them). It returns those earlier keys, active or rotating: the
// ones that heartbeat will revoke. A key confirmed already (its heartbeat
// beat this call) has no earlier keys left. Errors: ErrNotFound when keyID
// was never recorded.
func MarkRotationKeyWritten(ctx context.Context, q Querier, keyID string, now time.Time) ([]string, error) {
	var boxID string
	var dropletID, seq int64
	if err := q.QueryRowContext(ctx,
		`UPDATE ingest_key_deliveries SET delivered_at = ? WHERE key_id = ? RETURNING box_id, droplet_id, rowid`,
		ms(now), keyID).Scan(&boxID, &dropletID, &seq); err != nil {
		return nil, notFound(err)
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE ingest_keys SET status = 'rotating', rotated_at = ? WHERE status = 'active' AND key_id IN
		 (SELECT key_id FROM ingest_key_deliveries WHERE box_id = ? AND droplet_id = ? AND rowid < ?)`,
		ms(now), boxID, dropletID, seq); err != nil {
		return nil, fmt.Errorf("mark earlier keys rotating: %w", err)
	}
	return keyIDs(ctx, q,
		`SELECT d.key_id FROM ingest_key_deliveries d JOIN ingest_keys k ON k.key_id = d.key_id
		 WHERE d.box_id = ? AND d.droplet_id = ? AND d.rowid < ? AND k.status IN ('active', 'rotating')
		 ORDER BY d.rowid`, boxID, dropletID, seq)
}

// KeyAwaitsConfirmation reports whether keyID is a rotation's key still
// waiting for its first heartbeat (the keyring reads it when it loads a
// key, so a restart keeps a rotation going).
func KeyAwaitsConfirmation(ctx context.Context, q Querier, keyID string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM ingest_key_deliveries WHERE key_id = ? AND confirm_pending = 1`, keyID).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("key confirmation: %w", err)
	}
	return n > 0, nil
}

// KeyConfirmation is what ConfirmDeliveredKey did.
type KeyConfirmation struct {
	// Confirmed is true when this call confirmed the key (it was pending).
	Confirmed bool
	// BoxID and DropletID are where the key was delivered.
	BoxID     string
	DropletID int64
	// Revoked are the droplet's earlier keys this call revoked.
	Revoked []string
}

// ConfirmDeliveredKey records the first heartbeat signed with keyID, a
// rotation's key awaiting it: it clears confirm_pending, sets
// confirmed_at and revokes every key recorded earlier for the same box's
// droplet that is not revoked yet (the droplet's files hold keyID, and its
// agent signs with it). A key not pending is left alone (Confirmed false).
// The caller runs it inside the heartbeat's writer unit, so the
// confirmation and the revocations commit with the heartbeat or not at all
// (docs/operations.md, "Ingest keys").
func ConfirmDeliveredKey(ctx context.Context, q Querier, keyID string, now time.Time) (KeyConfirmation, error) {
	var c KeyConfirmation
	var seq int64
	err := q.QueryRowContext(ctx,
		`UPDATE ingest_key_deliveries SET confirm_pending = 0, confirmed_at = ? WHERE key_id = ? AND confirm_pending = 1
		 RETURNING box_id, droplet_id, rowid`, ms(now), keyID).Scan(&c.BoxID, &c.DropletID, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("confirm delivered key: %w", err)
	}
	c.Confirmed = true
	c.Revoked, err = keyIDs(ctx, q,
		`UPDATE ingest_keys SET status = 'revoked', revoked_at = coalesce(revoked_at, ?)
		 WHERE status <> 'revoked' AND key_id IN
		 (SELECT key_id FROM ingest_key_deliveries WHERE box_id = ? AND droplet_id = ? AND rowid < ?)
		 RETURNING key_id`, ms(now), c.BoxID, c.DropletID, seq)
	slices.Sort(c.Revoked)
	return c, err
}

// DropletKeys returns the keys recorded for the box's droplet that are not
// revoked (active or rotating), oldest first: the keys a rotation of that
// droplet replaces.
func DropletKeys(ctx context.Context, q Querier, boxID string, dropletID int64) ([]string, error) {
	return keyIDs(ctx, q,
		`SELECT d.key_id FROM ingest_key_deliveries d JOIN ingest_keys k ON k.key_id = d.key_id
		 WHERE d.box_id = ? AND d.droplet_id = ? AND k.status IN ('active', 'rotating') ORDER BY d.rowid`, boxID, dropletID)
}

// keyIDs runs a query whose rows are one key id each.
func keyIDs(ctx context.Context, q Querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("key ids: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("key ids: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
