package telemetry

import (
	"context"
	"errors"
	"fmt"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// EraseBatchSize is how many rows one writer unit of an erase deletes
// (docs/operations.md, "Erasing telemetry"): the retention loop's batch
// size, a few tens of milliseconds of the writer for the widest table, so
// ingest keeps flowing between an erase's units however large the
// environment.
const EraseBatchSize = 5000

// ErrConfirmationMismatch is returned by Erase when the confirmation is
// not exactly adminapi.EraseTelemetryPhrase(slug); nothing is erased.
var ErrConfirmationMismatch = errors.New("telemetry erase: confirmation does not match")

// Eraser erases one environment's telemetry: its sessions, source windows,
// hourly rollups, retry receipts and anomalies; nothing else
// (docs/operations.md, "Erasing telemetry").
type Eraser struct {
	DB    *storage.DB
	Clock clockwork.Clock
	// BatchSize is the rows one writer unit deletes; 0 means
	// EraseBatchSize.
	BatchSize int

	// afterBatch, when set (tests), runs after each committed batch; an
	// error stops the erase there, as a crash would.
	afterBatch func() error
}

// Erase erases the telemetry of environment slug, in batches of BatchSize
// rows, one writer unit each, table by table (storage.TelemetryEraseOrder),
// and returns the receipt. It is idempotent: erasing an erased environment
// removes nothing and returns zero counts.
//
// Each batch deletes its rows and adds their number to the erasure's
// durable record in one unit, so an erase that stops part-way (a crash, a
// cancelled ctx) leaves only whole batches done and counted; the next
// Erase of the environment resumes that erasure (Resumed is true), and its
// receipt counts every row removed since the erasure began. The erasure
// finishes in one last unit that resets the deployments' receipt counters,
// marks it finished and records the telemetry-erased lifecycle event.
//
// Errors: ErrConfirmationMismatch (nothing read or written);
// ErrUnknownEnvironment; ctx's error, or a
// storage error, with the erasure left to resume.
func (e *Eraser) Erase(ctx context.Context, slug, confirmation string) (adminapi.TelemetryErasure, error) {
	if confirmation != adminapi.EraseTelemetryPhrase(slug) {
		return adminapi.TelemetryErasure{}, ErrConfirmationMismatch
	}
	size := e.BatchSize
	if size <= 0 {
		size = EraseBatchSize
	}
	now := e.Clock.Now()
	id := ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
	var env storage.Environment
	var erasure storage.TelemetryErasure
	var resumed bool
	err := e.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		if env, err = storage.EnvironmentBySlug(ctx, tx, slug); errors.Is(err, storage.ErrNotFound) {
			return ErrUnknownEnvironment
		} else if err != nil {
			return err
		}
		erasure, resumed, err = storage.StartTelemetryErasure(ctx, tx, env.ID, id, now)
		return err
	})
	if err != nil {
		return adminapi.TelemetryErasure{}, err
	}
	batches := int64(1)
	for _, table := range storage.TelemetryEraseOrder {
		for {
			var n int64
			err := e.DB.Writer.Do(ctx, func(tx storage.Tx) error {
				var err error
				n, err = storage.EraseTelemetryBatch(ctx, tx, table, env.ID, erasure.ID, size)
				return err
			})
			if err != nil {
				return adminapi.TelemetryErasure{}, fmt.Errorf("erase %s: %w", table, err)
			}
			batches++
			if e.afterBatch != nil {
				if err := e.afterBatch(); err != nil {
					return adminapi.TelemetryErasure{}, err
				}
			}
			if n < int64(size) {
				break
			}
		}
	}
	var remaining storage.TelemetryCounts
	err = e.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		if erasure, _, err = storage.FinishTelemetryErasure(ctx, tx, env.OrgID, erasure.ID, e.Clock.Now()); err != nil {
			return err
		}
		remaining, err = storage.TelemetryRowCounts(ctx, tx, env.ID)
		return err
	})
	if err != nil {
		return adminapi.TelemetryErasure{}, fmt.Errorf("finish telemetry erasure: %w", err)
	}
	batches++
	return adminapi.TelemetryErasure{
		EnvironmentSlug: env.Slug,
		ErasureID:       erasure.ID,
		StartedAt:       erasure.StartedAt,
		FinishedAt:      erasure.FinishedAt,
		Resumed:         resumed,
		Removed:         apiCounts(erasure.Removed),
		Remaining:       apiCounts(remaining),
		Batches:         batches,
	}, nil
}

// Audit counts the rows each telemetry table holds over every environment,
// in one read transaction (docs/operations.md, "Erasing telemetry").
func (e *Eraser) Audit(ctx context.Context) (adminapi.TelemetryAudit, error) {
	tx, err := e.DB.Read.BeginTx(ctx, nil)
	if err != nil {
		return adminapi.TelemetryAudit{}, fmt.Errorf("telemetry audit: %w", err)
	}
	defer tx.Rollback() // read-only: nothing to undo
	counts, err := storage.TelemetryRowCounts(ctx, tx, 0)
	if err != nil {
		return adminapi.TelemetryAudit{}, err
	}
	out := apiCounts(counts)
	return adminapi.TelemetryAudit{Tables: out, Total: out.Total(), CheckedAt: e.Clock.Now().UTC()}, nil
}

func apiCounts(c storage.TelemetryCounts) adminapi.TelemetryTableCounts {
	return adminapi.TelemetryTableCounts{Sessions: c.Sessions, Windows: c.Windows, Hourly: c.Hourly, Receipts: c.Receipts, Anomalies: c.Anomalies}
}
