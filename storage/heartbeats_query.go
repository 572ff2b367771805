package storage

import (
	"context"
	"fmt"
	"time"
)

// pruneHeartbeatsSQL deletes one rowid range's prunable heartbeats; each
// row's deployment is found by the deployments primary key.
const pruneHeartbeatsSQL = `DELETE FROM heartbeats AS h
	WHERE h.id > ? AND h.id <= ? AND h.received_at < ?
	  AND h.received_at < (SELECT d.last_heartbeat_at FROM deployments AS d
	                       WHERE d.environment_id = h.environment_id AND d.id = h.deployment_id)`

// PruneHeartbeats is one bounded step of raw heartbeat pruning
// (docs/operations.md, "Retention"). It looks at up to limit heartbeats in
// rowid order after the rowid after, and deletes those received before
// cutoff that are not their deployment's latest heartbeat; a deployment's
// latest heartbeat is kept however old it is. It returns the rows deleted,
// the rowid to pass as after on the next step, and done when the walk
// reached a heartbeat received at or after cutoff, or the end of the table.
//
// The latest heartbeat is the one received at the deployment's
// last_heartbeat_at, which every accepted heartbeat sets in the same
// transaction that stores it: a heartbeat is deleted only when it was
// received strictly before that. heartbeats has no index but its rowid (an
// index per deployment cost every insert a random page: see
// schema/0009_heartbeats_unindexed.sql), so each candidate looks its
// deployment up by primary key. If the server clock stepped back, a row
// received "after" last_heartbeat_at is kept until a later heartbeat passes
// it: pruning errs on keeping.
//
// Why rowid order: rowids are assigned in insertion order and received_at
// is the server's clock at insertion, so walking up from the oldest rowid
// walks up in received_at. The walk stops at the first row at or after
// cutoff, so a pass reads only what it may delete plus the kept latest rows
// before it, never the recent bulk of the table. A row stored while the
// server clock was stepped back sits behind a newer one and is pruned once
// everything before it is old enough.
func PruneHeartbeats(ctx context.Context, q Querier, after int64, cutoff time.Time, limit int) (deleted, next int64, done bool, err error) {
	rows, err := q.QueryContext(ctx, `SELECT id, received_at FROM heartbeats WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return 0, after, false, fmt.Errorf("read heartbeats to prune: %w", err)
	}
	next = after
	seen := 0
	for rows.Next() {
		var id, received int64
		if err := rows.Scan(&id, &received); err != nil {
			rows.Close()
			return 0, after, false, fmt.Errorf("read heartbeats to prune: %w", err)
		}
		seen++
		if received >= ms(cutoff) {
			done = true
			break
		}
		next = id
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, after, false, fmt.Errorf("read heartbeats to prune: %w", err)
	}
	if seen < limit {
		done = true
	}
	if next == after {
		return 0, next, done, nil
	}
	res, err := q.ExecContext(ctx, pruneHeartbeatsSQL, after, next, ms(cutoff))
	if err != nil {
		return 0, after, false, fmt.Errorf("prune heartbeats: %w", err)
	}
	if deleted, err = res.RowsAffected(); err != nil {
		return 0, after, false, fmt.Errorf("prune heartbeats: %w", err)
	}
	return deleted, next, done, nil
}
