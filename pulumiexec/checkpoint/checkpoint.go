// Package checkpoint keeps Pulumi stack state in the database
// (docs/operations.md, "Checkpoints"). The state backend is wipe-safe
// working memory on the control plane's disk; the database is replicated.
// After each step group and at completion converge saves the stack's export
// as a new version; on start with an empty backend (a database restored on
// a new droplet) RestoreMissing imports every missing stack from its newest
// checkpoint before any job runs. An existing stack is never overwritten.
// An import leaves a marker until the stack's export after the import
// matches the checkpoint; while it is there, uploads of that stack are
// refused and the next start imports it again.
package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/storage"
)

// MaxExportBytes is the largest export a checkpoint holds (4 MiB; docs/operations.md,
// "Checkpoints"): a box's two stacks export a few KiB, so a larger one is a runaway
// state, and SQLite keeps blobs this size in its pages without trouble.
const MaxExportBytes = 4 << 20

// Errors. None of them carries export content.
var (
	// ErrTooLarge: the export exceeds MaxExportBytes; nothing is stored.
	ErrTooLarge = errors.New("checkpoint: the stack export exceeds the 4 MiB limit")
	// ErrEmpty: the export is empty or not JSON.
	ErrEmpty = errors.New("checkpoint: the stack export is empty or not JSON")
	// ErrImportPending: the stack's import from its checkpoint is not
	// finished; nothing is stored (storage.ErrStackImportPending).
	ErrImportPending = storage.ErrStackImportPending
	// ErrMissingStack: a stack to checkpoint does not exist in the backend.
	ErrMissingStack = errors.New("checkpoint: the stack does not exist in the backend")
	// ErrVerify: after an import the backend's export differs from the
	// checkpoint; the marker stays.
	ErrVerify = errors.New("checkpoint: the imported stack does not match its checkpoint")
)

// Backend is the state backend as checkpoints need it; *pulumiexec.Engine
// implements it.
type Backend interface {
	// ExportStack returns the stack's export and whether the stack exists
	// (a missing stack is not created).
	ExportStack(ctx context.Context, name string) ([]byte, bool, error)
	// ImportStack replaces the stack's state with export, creating it.
	ImportStack(ctx context.Context, name string, export []byte) error
}

// Ref names a stack and who it belongs to.
type Ref struct {
	OrganizationID, EnvironmentID int64
	Stack                         string
}

// Store saves and restores checkpoints. It holds the database only (no
// provider token: exports never carry one).
type Store struct {
	db    *storage.DB
	clock clockwork.Clock
}

// New returns a Store; clock stamps checkpoints and markers (nil: the real
// clock).
func New(db *storage.DB, clock clockwork.Clock) *Store {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Store{db: db, clock: clock}
}

// Save stores export as ref's next version and returns the version.
// Errors: ErrTooLarge, ErrEmpty, ErrImportPending (nothing is stored).
func (s *Store) Save(ctx context.Context, ref Ref, export []byte) (int64, error) {
	if len(export) > MaxExportBytes {
		return 0, fmt.Errorf("%w (%d bytes, stack %s)", ErrTooLarge, len(export), ref.Stack)
	}
	if len(export) == 0 || !json.Valid(export) {
		return 0, ErrEmpty
	}
	sum := sha256.Sum256(export)
	var v int64
	err := s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		v, err = storage.InsertStackState(ctx, tx, storage.StackState{
			OrganizationID: ref.OrganizationID, EnvironmentID: ref.EnvironmentID, Stack: ref.Stack,
			Export: export, SHA256: sum[:], SizeBytes: int64(len(export)),
		}, s.clock.Now())
		return err
	})
	return v, err
}

// Checkpoint exports ref's stack from b and saves it: what converge calls
// after each step group and at completion. Errors: ErrMissingStack, Save's,
// or the backend's.
func (s *Store) Checkpoint(ctx context.Context, b Backend, ref Ref) (int64, error) {
	export, ok, err := b.ExportStack(ctx, ref.Stack)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, ErrMissingStack
	}
	return s.Save(ctx, ref, export)
}

// Restored reports what RestoreMissing did.
type Restored struct {
	// Imported are the stacks imported from their checkpoints (a pending
	// import finished counts here too).
	Imported []string
	// Kept are the stacks that exist in the backend and were left alone.
	Kept []string
	// Wiped are the missing stacks whose newest checkpoint records a wipe:
	// they stay missing, so the next up adopts.
	Wiped []string
}

// MarkWiped records, in one transaction, that each of stacks is being
// removed from the state backend (a state wipe, or crash recovery removing
// a stack that disagrees with the provider): a wiped checkpoint becomes
// its newest version and its import marker is cleared, so RestoreMissing
// leaves it missing and the next up adopts what the oracle records
// (docs/operations.md, "Checkpoints"). Call it before removing the stacks:
// a stack still in the backend is kept whatever its checkpoints say, and
// its next checkpoint supersedes the mark. It returns the stacks marked (a
// stack without checkpoints needs none). Errors: the database's.
func (s *Store) MarkWiped(ctx context.Context, stacks ...string) ([]string, error) {
	var marked []string
	err := s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		marked = marked[:0]
		now := s.clock.Now()
		for _, st := range stacks {
			ok, err := storage.MarkStackWiped(ctx, tx, st, now)
			if err != nil {
				return err
			}
			if ok {
				marked = append(marked, st)
			}
		}
		return nil
	})
	return marked, err
}

// RestoreMissing imports every stack that has a checkpoint and is missing
// from b (or whose earlier import was interrupted) from its newest
// checkpoint, verifying each: the marker is set before the import and
// cleared only when the export after the import matches the checkpoint.
// A stack whose newest checkpoint records a wipe (MarkWiped) stays
// missing. Existing stacks are never touched. Run it before any job runs. Errors:
// ErrVerify, the backend's (the marker stays; the next start retries).
func (s *Store) RestoreMissing(ctx context.Context, b Backend) (Restored, error) {
	var res Restored
	latest, err := storage.LatestStackStates(ctx, s.db.Read)
	if err != nil {
		return res, err
	}
	pending, err := storage.ListStackImportMarkers(ctx, s.db.Read)
	if err != nil {
		return res, err
	}
	for _, cp := range latest {
		if storage.IsWipedStackState(cp.SHA256) {
			res.Wiped = append(res.Wiped, cp.Stack)
			continue
		}
		if _, marked := pending[cp.Stack]; !marked {
			_, exists, err := b.ExportStack(ctx, cp.Stack)
			if err != nil {
				return res, fmt.Errorf("checkpoint: look up stack %s: %w", cp.Stack, err)
			}
			if exists {
				res.Kept = append(res.Kept, cp.Stack)
				continue
			}
		}
		if err := s.restore(ctx, b, cp); err != nil {
			return res, err
		}
		res.Imported = append(res.Imported, cp.Stack)
	}
	return res, nil
}

// restore imports cp under a marker and clears the marker once verified.
func (s *Store) restore(ctx context.Context, b Backend, cp storage.StackState) error {
	if err := s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.PutStackImportMarker(ctx, tx, cp.Stack, cp.Version, s.clock.Now())
	}); err != nil {
		return err
	}
	if sum := sha256.Sum256(cp.Export); !bytes.Equal(sum[:], cp.SHA256) {
		return fmt.Errorf("%w: stack %s version %d fails its sha256", ErrVerify, cp.Stack, cp.Version)
	}
	if err := b.ImportStack(ctx, cp.Stack, cp.Export); err != nil {
		return fmt.Errorf("checkpoint: import stack %s: %w", cp.Stack, err)
	}
	got, ok, err := b.ExportStack(ctx, cp.Stack)
	if err != nil {
		return fmt.Errorf("checkpoint: verify stack %s: %w", cp.Stack, err)
	}
	if !ok || !sameState(got, cp.Export) {
		return fmt.Errorf("%w (stack %s version %d)", ErrVerify, cp.Stack, cp.Version)
	}
	return s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.ClearStackImportMarker(ctx, tx, cp.Stack)
	})
}

// sameState compares two exports as JSON values: the CLI may re-indent or
// reorder keys, never change a value.
func sameState(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
