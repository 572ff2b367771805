package ingest

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage"
)

// Nonce pruning defaults.
const (
	// PruneInterval is how often nonces are pruned: low frequency, so an
	// idle daemon stays quiet (seed 002, "Low-cost Postgres baseline").
	PruneInterval = 10 * time.Minute
	// PruneBatch bounds the rows deleted per statement, so one prune never
	// holds the write lock long enough to delay heartbeats.
	PruneBatch = 5000
	// PruneBudget bounds one tick's wall time; the next tick continues. A
	// budget rather than a batch count: at 1,000 heartbeats/s a 10-minute
	// tick has 600,000 expired nonces to delete, more than any fixed count
	// chosen for a quiet fleet.
	PruneBudget = 2 * time.Minute
	// pruneMargin is kept beyond the skew window so that a nonce is never
	// pruned while a request bearing it could still pass the timestamp
	// check (server clock adjustments included).
	pruneMargin = time.Minute
)

// NoncePruner deletes nonces whose signed timestamp is older than the skew
// window: such requests are refused by the timestamp check before the nonce
// is consulted, so forgetting them cannot admit a replay.
type NoncePruner struct {
	DB    *storage.DB
	Clock clockwork.Clock
	Log   zerolog.Logger
}

// Name implements daemon.Loop.
func (p *NoncePruner) Name() string { return "nonce-prune" }

// Run prunes every PruneInterval until ctx ends.
func (p *NoncePruner) Run(ctx context.Context) error {
	t := p.Clock.NewTicker(PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Chan():
			if _, err := p.Tick(ctx); err != nil && ctx.Err() == nil {
				p.Log.Error().Err(err).Str("loop", p.Name()).Msg("tick failed")
			}
		}
	}
}

// Tick deletes expired nonces in PruneBatch-row transactions until none is
// left or PruneBudget has passed, and returns how many rows it deleted.
func (p *NoncePruner) Tick(ctx context.Context) (int64, error) {
	start := p.Clock.Now()
	cutoff := start.Add(-SkewWindow - pruneMargin)
	var total int64
	for p.Clock.Since(start) < PruneBudget {
		var n int64
		err := p.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			n, err = storage.PruneNonces(ctx, tx, cutoff, PruneBatch)
			return err
		})
		total += n
		if err != nil {
			return total, err
		}
		if n < PruneBatch {
			break
		}
	}
	if total > 0 {
		p.Log.Info().Int64("deleted", total).Msg("pruned expired nonces")
	}
	return total, nil
}
