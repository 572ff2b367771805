package storage

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// TrimHistory does at once what Litestream's L0 retention does five
// minutes after an upload (docs/operations.md, "Replication"): compact L0
// into L1, then retire every L0 file L1 holds, locally and in the replica,
// but the newest. Afterwards the local history no longer starts at
// transaction 1. Tests only.
func (r *Replicator) TrimHistory(ctx context.Context) error {
	r.store.SetL0Retention(time.Nanosecond)
	defer r.store.SetL0Retention(litestream.DefaultL0Retention)
	if _, err := r.store.CompactDB(ctx, r.db, compactionLevels[1]); err != nil &&
		!errors.Is(err, litestream.ErrNoCompaction) && !errors.Is(err, litestream.ErrCompactionTooEarly) {
		return err
	}
	return r.db.EnforceL0RetentionByTime(ctx)
}

// LocalHistoryStart is the first transaction of the local L0 history (0
// when there is none). Tests only.
func (r *Replicator) LocalHistoryStart() (uint64, error) {
	return localL0Min(r.db.LTXLevelDir(0))
}

// localL0Min returns the first transaction id of the L0 files in dir (0
// when there are none).
func localL0Min(dir string) (uint64, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	var lowest ltx.TXID
	for _, e := range ents {
		if lo, _, err := ltx.ParseFilename(e.Name()); err == nil && (lowest == 0 || lo < lowest) {
			lowest = lo
		}
	}
	return uint64(lowest), nil
}

// PresenceChecks is how many times the run loop listed the replica for
// its marker. Tests only.
func (r *Replicator) PresenceChecks() int64 { return r.presenceChecks.Load() }
