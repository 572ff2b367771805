package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// StackState is one row of stack_states: a saved Pulumi stack export
// (docs/operations.md, "Checkpoints"). Export is the stack's state; it
// holds resource inputs and outputs and is never logged or returned by an
// API.
type StackState struct {
	ID             int64
	OrganizationID int64
	EnvironmentID  int64
	Stack          string
	Version        int64
	Export         []byte
	SHA256         []byte
	SizeBytes      int64
	CreatedAt      time.Time
}

// ErrStackImportPending is returned by InsertStackState while the stack has
// an unfinished import marker.
var ErrStackImportPending = errors.New("an import of this stack from its checkpoint is not finished")

// InsertStackState stores s as stack s.Stack's next version (its newest
// plus one) and returns that version. It re-checks the import marker inside
// the caller's transaction. Errors: ErrStackImportPending.
func InsertStackState(ctx context.Context, q Querier, s StackState, now time.Time) (int64, error) {
	if _, err := StackImportMarker(ctx, q, s.Stack); err == nil {
		return 0, ErrStackImportPending
	} else if !errors.Is(err, ErrNotFound) {
		return 0, err
	}
	var v int64
	err := q.QueryRowContext(ctx,
		`INSERT INTO stack_states (organization_id, environment_id, stack, version, export, sha256, size_bytes, created_at)
		 VALUES (?1, ?2, ?3, (SELECT coalesce(max(version), 0) + 1 FROM stack_states WHERE stack = ?3), ?4, ?5, ?6, ?7)
		 RETURNING version`,
		s.OrganizationID, s.EnvironmentID, s.Stack, s.Export, s.SHA256, s.SizeBytes, ms(now)).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("insert stack state: %w", err)
	}
	return v, nil
}

// WipedStackExport is the export of a wiped checkpoint: the version a state
// wipe (or crash recovery removing a stack) records, so that restoring
// missing stacks from their newest checkpoint leaves a wiped stack gone and
// the next up adopts what the oracle records instead (docs/operations.md,
// "Checkpoints"). No Pulumi export is this document.
var WipedStackExport = []byte(`{"chalupa":"stack wiped from the state cache; not restored"}`)

// wipedStackSHA256 is WipedStackExport's digest.
var wipedStackSHA256 = func() []byte { s := sha256.Sum256(WipedStackExport); return s[:] }()

// IsWipedStackState reports whether a checkpoint's sha256 is that of
// WipedStackExport.
func IsWipedStackState(sum []byte) bool { return bytes.Equal(sum, wipedStackSHA256) }

// MarkStackWiped records a wiped checkpoint (WipedStackExport) as stack's
// next version, with the organization and environment of its newest
// checkpoint, and clears its import marker: the stack is gone by the
// operator's (or recovery's) decision. A stack without checkpoints, or
// whose newest is wiped already, gets no row. It reports whether it
// inserted one.
func MarkStackWiped(ctx context.Context, q Querier, stack string, now time.Time) (bool, error) {
	if err := ClearStackImportMarker(ctx, q, stack); err != nil {
		return false, err
	}
	res, err := q.ExecContext(ctx,
		`INSERT INTO stack_states (organization_id, environment_id, stack, version, export, sha256, size_bytes, created_at)
		 SELECT organization_id, environment_id, stack, version + 1, ?2, ?3, ?4, ?5 FROM stack_states
		 WHERE stack = ?1 AND version = (SELECT max(version) FROM stack_states WHERE stack = ?1) AND sha256 <> ?3`,
		stack, WipedStackExport, wipedStackSHA256, len(WipedStackExport), ms(now))
	if err != nil {
		return false, fmt.Errorf("mark stack wiped: %w", err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

const stackStateCols = `id, organization_id, environment_id, stack, version, export, sha256, size_bytes, created_at`

func scanStackState(row interface{ Scan(...any) error }) (StackState, error) {
	var s StackState
	var c sql.NullInt64
	if err := row.Scan(&s.ID, &s.OrganizationID, &s.EnvironmentID, &s.Stack, &s.Version, &s.Export, &s.SHA256, &s.SizeBytes, &c); err != nil {
		return StackState{}, err
	}
	s.CreatedAt = fromMS(c)
	return s, nil
}

// LatestStackStates returns the newest checkpoint of every stack, ordered
// by stack name.
func LatestStackStates(ctx context.Context, q Querier) ([]StackState, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+stackStateCols+` FROM stack_states s
		WHERE version = (SELECT max(version) FROM stack_states WHERE stack = s.stack) ORDER BY stack`)
	if err != nil {
		return nil, fmt.Errorf("list stack states: %w", err)
	}
	defer rows.Close()
	var out []StackState
	for rows.Next() {
		s, err := scanStackState(rows)
		if err != nil {
			return nil, fmt.Errorf("list stack states: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// StackStateByVersion returns stack's checkpoint version. Errors:
// ErrNotFound.
func StackStateByVersion(ctx context.Context, q Querier, stack string, version int64) (StackState, error) {
	s, err := scanStackState(q.QueryRowContext(ctx,
		`SELECT `+stackStateCols+` FROM stack_states WHERE stack = ? AND version = ?`, stack, version))
	if err != nil {
		return StackState{}, notFound(err)
	}
	return s, nil
}

// StackImportMarker returns the checkpoint version whose import into stack
// began and is not finished. Errors: ErrNotFound when none is pending.
func StackImportMarker(ctx context.Context, q Querier, stack string) (int64, error) {
	var v int64
	if err := q.QueryRowContext(ctx, `SELECT version FROM stack_state_imports WHERE stack = ?`, stack).Scan(&v); err != nil {
		return 0, notFound(err)
	}
	return v, nil
}

// ListStackImportMarkers returns every pending import: stack → version.
func ListStackImportMarkers(ctx context.Context, q Querier) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT stack, version FROM stack_state_imports`)
	if err != nil {
		return nil, fmt.Errorf("list stack import markers: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var v int64
		if err := rows.Scan(&s, &v); err != nil {
			return nil, fmt.Errorf("list stack import markers: %w", err)
		}
		out[s] = v
	}
	return out, rows.Err()
}

// PutStackImportMarker records that stack's import of checkpoint version
// began (replacing an older marker of the stack).
func PutStackImportMarker(ctx context.Context, q Querier, stack string, version int64, now time.Time) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO stack_state_imports (stack, version, started_at) VALUES (?, ?, ?)
		 ON CONFLICT (stack) DO UPDATE SET version = excluded.version, started_at = excluded.started_at`,
		stack, version, ms(now)); err != nil {
		return fmt.Errorf("mark stack import: %w", err)
	}
	return nil
}

// ClearStackImportMarker removes stack's marker once its import is
// verified.
func ClearStackImportMarker(ctx context.Context, q Querier, stack string) error {
	if _, err := q.ExecContext(ctx, `DELETE FROM stack_state_imports WHERE stack = ?`, stack); err != nil {
		return fmt.Errorf("clear stack import marker: %w", err)
	}
	return nil
}

// StackCheckpoint is a checkpoint's metadata: a stack_states row without
// its export (docs/operations.md, "Checkpoints"), for pages that list
// versions.
type StackCheckpoint struct {
	Stack   string
	Version int64
	// SHA256 is the export's digest; SizeBytes its length in bytes.
	SHA256    []byte
	SizeBytes int64
	CreatedAt time.Time
	// Wiped is true for the version a state wipe recorded
	// (WipedStackExport).
	Wiped bool
}

// StackCheckpoints returns the newest perStack (> 0) checkpoints of each
// of stacks, by stack name then newest version first, without their
// exports. A stack with no checkpoint has no rows.
func StackCheckpoints(ctx context.Context, q Querier, stacks []string, perStack int) ([]StackCheckpoint, error) {
	out := []StackCheckpoint{}
	for _, st := range stacks {
		rows, err := q.QueryContext(ctx,
			`SELECT stack, version, sha256, size_bytes, created_at FROM stack_states WHERE stack = ? ORDER BY version DESC LIMIT ?`,
			st, perStack)
		if err != nil {
			return nil, fmt.Errorf("list stack checkpoints: %w", err)
		}
		for rows.Next() {
			var c StackCheckpoint
			var at sql.NullInt64
			if err := rows.Scan(&c.Stack, &c.Version, &c.SHA256, &c.SizeBytes, &at); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list stack checkpoints: %w", err)
			}
			c.CreatedAt, c.Wiped = fromMS(at), IsWipedStackState(c.SHA256)
			out = append(out, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("list stack checkpoints: %w", err)
		}
	}
	return out, nil
}

// Retention of checkpoints (docs/operations.md, "Retention").
const (
	// StackStatesKeep is how many checkpoints of each stack are kept: the
	// newest is what a restore imports; the nine before it are history
	// for an operator comparing states after a surprise (a box's stacks
	// take a few per day, so ten cover days, not months).
	StackStatesKeep = 10
	// DestroyedBoxStackStateRetention is how long the checkpoints of a box
	// with nothing left at the provider (no droplet, firewall or volume
	// recorded) are kept after its resources were last recorded: a month
	// to look back at what was destroyed, after which the stacks hold
	// nothing worth restoring.
	DestroyedBoxStackStateRetention = 30 * 24 * time.Hour
	// StackStatePruneBatch bounds the checkpoints one writer unit deletes:
	// an export is up to 4 MiB, so a unit frees at most 800 MiB of pages
	// and usually a few MiB.
	StackStatePruneBatch = 200
)

// PruneStackStates deletes up to limit checkpoints, oldest first, that
// retention no longer keeps: every checkpoint of a stack older than its
// StackStatesKeep newest, and every checkpoint of a stack of a box that
// has no recorded droplet, firewall or volume since before
// now − DestroyedBoxStackStateRetention and no queued or running job. A
// checkpoint a pending import names (stack_state_imports) is never
// deleted. A stack pruned whole starts again at version 1. It returns the
// rows deleted; fewer than limit means none is left.
func PruneStackStates(ctx context.Context, q Querier, now time.Time, limit int) (int64, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM stack_states WHERE id IN (
		SELECT s.id FROM stack_states s
		WHERE NOT EXISTS (SELECT 1 FROM stack_state_imports m WHERE m.stack = s.stack AND m.version = s.version)
		  AND ((SELECT count(*) FROM stack_states n WHERE n.stack = s.stack AND n.version > s.version) >= ?1
		    OR EXISTS (SELECT 1 FROM cloud_resource b
		      WHERE s.stack IN (b.name || '-compute', b.name || '-data')
		        AND b.droplet_id IS NULL AND b.firewall_id IS NULL AND b.volume_id IS NULL
		        AND b.resources_at < ?2
		        AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.scope_kind = 'box' AND j.scope_id = b.id AND j.status IN ('queued', 'running'))))
		ORDER BY s.id LIMIT ?3)`,
		StackStatesKeep, ms(now.Add(-DestroyedBoxStackStateRetention)), limit)
	if err != nil {
		return 0, fmt.Errorf("prune stack states: %w", err)
	}
	return res.RowsAffected()
}
