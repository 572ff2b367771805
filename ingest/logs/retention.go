package logs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/internal/schedule"
	"github.com/chalupa-run/chalupa/storage"
)

// Retention and erase bounds (docs/operations.md, "Logs").
const (
	// RetentionMinute is the minute past each hour (UTC) the log
	// retention pass runs at: off telemetry retention's minute (43) and
	// cost reconciliation's quarter hours.
	RetentionMinute = 29
	// MaxRetentionChunks caps the chunks one retention tick removes: a
	// thousand DELETEs to the store take well under a minute, and a
	// backlog drains over the following hours without holding the
	// writer.
	MaxRetentionChunks = 1000
	// removeBatch is how many chunk rows one writer unit deletes, after
	// their objects were deleted outside it.
	removeBatch = 100
)

// ErrConfirmationMismatch: an erase's confirmation is not exactly
// "erase logs <slug>"; nothing is erased.
var ErrConfirmationMismatch = errors.New("log erase: confirmation does not match")

// ErrUnknownEnvironment: no environment has the slug.
var ErrUnknownEnvironment = errors.New("environment does not exist")

// removeChunks deletes each chunk's object and then, in writer units of
// removeBatch, its row, and returns how many rows it removed. Objects go
// first: a crash between the two leaves a row whose object is gone, which
// the next pass removes again (Delete of a missing key succeeds), never
// an object no row points to. afterUnit, when set, runs in each unit.
func removeChunks(ctx context.Context, db *storage.DB, store Store, refs []storage.LogChunkRef,
	afterUnit func(tx storage.Tx, removed int64) error) (int64, error) {
	var total int64
	for len(refs) > 0 {
		n := min(removeBatch, len(refs))
		batch := refs[:n]
		refs = refs[n:]
		for _, r := range batch {
			if err := store.Delete(ctx, r.ObjectKey); err != nil {
				return total, err
			}
		}
		var removed int64
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			removed = 0
			for _, r := range batch {
				ok, err := storage.DeleteLogChunk(ctx, tx, r)
				if err != nil {
					return err
				}
				if ok {
					removed++
				}
			}
			if afterUnit != nil {
				return afterUnit(tx, removed)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += removed
	}
	return total, nil
}

// Retention removes log chunks — objects, then rows — planned longer ago
// than Age, and the empty sessions that expired or finished before then
// (docs/operations.md, "Logs"). It holds only the log store's
// credentials.
type Retention struct {
	DB    *storage.DB
	Store Store
	Clock clockwork.Clock
	Log   zerolog.Logger
	// Age is CHALUPA_LOGS_RETENTION (0: DefaultRetention).
	Age time.Duration
	// Cap is the chunks one tick removes (0: MaxRetentionChunks).
	Cap int

	mu sync.Mutex
}

// RetentionResult is what one tick removed.
type RetentionResult struct {
	Chunks   int64
	Sessions int64
	// Capped is true when the tick stopped at its cap with more to do.
	Capped bool
}

// Name identifies the loop in logs.
func (r *Retention) Name() string { return "log-retention" }

// Run ticks hourly at RetentionMinute on r.Clock until ctx ends (then nil).
func (r *Retention) Run(ctx context.Context) error {
	s := schedule.HourlyAt(RetentionMinute)
	for {
		if _, err := schedule.Wait(ctx, r.Clock, s); err != nil {
			return nil
		}
		res, err := r.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			r.Log.Error().Err(err).Str("loop", r.Name()).Msg("log retention failed")
		} else if res.Chunks > 0 || res.Sessions > 0 {
			r.Log.Info().Str("loop", r.Name()).Int64("chunks", res.Chunks).Int64("sessions", res.Sessions).Bool("capped", res.Capped).Msg("log retention")
		}
	}
}

// Tick removes up to Cap chunks older than Age and then the empty expired
// sessions; one tick runs at a time. Errors: the store's or the database's,
// with what was removed before it counted.
func (r *Retention) Tick(ctx context.Context) (RetentionResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	age, limit := r.Age, r.Cap
	if age <= 0 {
		age = DefaultRetention
	}
	if limit <= 0 {
		limit = MaxRetentionChunks
	}
	before := r.Clock.Now().Add(-age)
	var res RetentionResult
	refs, err := storage.LogChunksPlannedBefore(ctx, r.DB.Read, before, limit+1)
	if err != nil {
		return res, err
	}
	if len(refs) > limit {
		refs, res.Capped = refs[:limit], true
	}
	if res.Chunks, err = removeChunks(ctx, r.DB, r.Store, refs, nil); err != nil {
		return res, fmt.Errorf("log retention: %w", err)
	}
	err = r.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		res.Sessions, err = storage.DeleteEmptyLogSessions(ctx, tx, 0, before, limit)
		return err
	})
	return res, err
}

// ErasePhrase is the confirmation adminEraseLogs requires, exactly.
func ErasePhrase(slug string) string { return "erase logs " + slug }

// ErasedEventKind is the lifecycle event kind an erase records when it
// finishes; the event's id is the erasure id and its message holds the
// counts (docs/operations.md, "Logs").
const ErasedEventKind = "logs-erased"

// Eraser removes an environment's logs: every chunk's object and row, its
// sessions, and its deployments' quota counters (docs/operations.md,
// "Logs").
type Eraser struct {
	DB    *storage.DB
	Store Store
	Clock clockwork.Clock
}

// Erasure is an erase's receipt: counts only.
type Erasure struct {
	EnvironmentSlug string
	ErasureID       string
	StartedAt       time.Time
	FinishedAt      time.Time
	// Resumed is true when this call finished an erasure an interrupted
	// call began; the counts cover both.
	Resumed         bool
	SessionsRemoved int64
	ChunksRemoved   int64
	// RemainingSessions and RemainingChunks are the environment's rows
	// left at the end: zero unless agents wrote during the erase.
	RemainingSessions int64
	RemainingChunks   int64
}

// Erase erases the logs of environment slug and returns the receipt. It
// is idempotent, and resumable like telemetry erase: each unit removes
// rows and adds them to the erasure's durable record. Errors:
// ErrConfirmationMismatch (nothing read or written), ErrUnknownEnvironment,
// or the store's or database's (the erasure resumes on the next call).
func (e *Eraser) Erase(ctx context.Context, slug, confirmation string) (Erasure, error) {
	if confirmation != ErasePhrase(slug) {
		return Erasure{}, ErrConfirmationMismatch
	}
	now := e.Clock.Now().UTC()
	out := Erasure{EnvironmentSlug: slug}
	var env storage.Environment
	err := e.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		if env, err = storage.EnvironmentBySlug(ctx, tx, slug); errors.Is(err, storage.ErrNotFound) {
			return ErrUnknownEnvironment
		} else if err != nil {
			return err
		}
		id := ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
		out.ErasureID, out.StartedAt, out.Resumed, err = storage.StartLogErasure(ctx, tx, env.ID, id, now)
		return err
	})
	if err != nil {
		return Erasure{}, err
	}
	for {
		refs, err := storage.LogChunksOfEnvironment(ctx, e.DB.Read, env.ID, MaxRetentionChunks)
		if err != nil {
			return Erasure{}, err
		}
		if len(refs) == 0 {
			break
		}
		if _, err := removeChunks(ctx, e.DB, e.Store, refs, func(tx storage.Tx, n int64) error {
			return storage.CountLogErasure(ctx, tx, out.ErasureID, 0, n)
		}); err != nil {
			return Erasure{}, fmt.Errorf("erase logs: %w", err)
		}
	}
	err = e.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		n, err := storage.DeleteEmptyLogSessions(ctx, tx, env.ID, farFuture, 1<<30)
		if err != nil {
			return err
		}
		if err := storage.CountLogErasure(ctx, tx, out.ErasureID, n, 0); err != nil {
			return err
		}
		if err := storage.ResetLogCounters(ctx, tx, env.ID); err != nil {
			return err
		}
		rec, err := storage.FinishLogErasure(ctx, tx, out.ErasureID, e.Clock.Now().UTC())
		if err != nil {
			return err
		}
		out.FinishedAt, out.SessionsRemoved, out.ChunksRemoved = rec.FinishedAt, rec.Sessions, rec.Chunks
		// The erase itself is on record, once: the event's id is the
		// erasure's, so a retried unit inserts nothing more.
		if _, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: out.ErasureID, EnvironmentID: env.ID,
			Kind: ErasedEventKind, OccurredAt: rec.FinishedAt,
			Message: fmt.Sprintf("logs erased: %d sessions, %d chunks (objects and rows)", rec.Sessions, rec.Chunks)}); err != nil {
			return err
		}
		out.RemainingSessions, out.RemainingChunks, err = storage.LogRowCounts(ctx, tx, env.ID)
		return err
	})
	if err != nil {
		return Erasure{}, fmt.Errorf("finish log erasure: %w", err)
	}
	return out, nil
}

// farFuture removes every session whatever its expiry (an erase).
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
