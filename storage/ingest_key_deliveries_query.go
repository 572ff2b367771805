package storage

import (
	"context"
	"fmt"
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
