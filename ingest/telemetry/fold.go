package telemetry

import (
	"context"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// FoldCutoff returns the fold bound of a pass starting at now: every
// source window starting before it lies in an hour that ended at or before
// now − DetailRetention, so whole hours are folded and no window is
// folded before it is 7 days old (docs/operations.md, "Retention").
func FoldCutoff(now time.Time) time.Time {
	return now.Add(-DetailRetention).Truncate(time.Hour).UTC()
}

// fold runs fold batches until no source window before the cutoff is left
// (drained), FoldDrainDeadline has passed (deadline) or MaxFoldBatches ran
// (batch-limit), and records in rep what the committed batches did and
// whether foldable detail was left.
func (r *Retention) fold(ctx context.Context, start time.Time, rep *Report) error {
	before := FoldCutoff(start)
	deadline := r.drainDeadline()
	pending := true
	for {
		if int(rep.Batches) >= r.maxBatches() {
			rep.DrainStopReason = DrainStopBatchLimit
			break
		}
		if rep.Batches > 0 && r.Clock.Since(start) >= deadline {
			rep.DrainStopReason = DrainStopDeadline
			break
		}
		var f storage.TelemetryFold
		err := r.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			f, pending, err = r.foldBatch(ctx, tx, before, int(rep.Batches))
			return err
		})
		if err != nil {
			rep.BacklogPending = true
			return err
		}
		if f.SourceRows == 0 && f.HourlyOps == 0 && !pending {
			rep.DrainStopReason = DrainStopDrained
			break
		}
		rep.Batches++
		rep.MinuteRollups += f.SourceRows
		rep.HourlyRollups += f.HourlyOps
		if !pending {
			rep.DrainStopReason = DrainStopDrained
			break
		}
	}
	rep.BacklogPending = pending
	return nil
}

// foldBatch is one writer unit: it folds up to BatchRows source windows
// before the cutoff, whole hour groups only, from the sessions with the
// oldest detail, and reports whether foldable detail is left.
func (r *Retention) foldBatch(ctx context.Context, tx storage.Tx, before time.Time, batch int) (storage.TelemetryFold, bool, error) {
	var total storage.TelemetryFold
	sessions, err := storage.FoldableTelemetrySessions(ctx, tx, before, FoldSessionsPerBatch)
	if err != nil {
		return total, false, err
	}
	limit := r.batchRows()
	for _, s := range sessions {
		remaining := limit - int(total.SourceRows)
		if remaining <= 0 {
			break
		}
		// The window just past this batch's share: fold up to the start of
		// its hour, so the hour it is in is not split.
		to := before
		at, over, err := storage.TelemetryWindowStartAt(ctx, tx, s, before, remaining)
		if err != nil {
			return total, false, err
		}
		if over {
			to = at.Truncate(time.Hour)
			if first, _, err := storage.TelemetryWindowStartAt(ctx, tx, s, before, 0); err != nil {
				return total, false, err
			} else if !to.After(first) {
				// The session's first hour alone is more than the share.
				if total.SourceRows > 0 {
					break
				}
				to = to.Add(time.Hour)
			}
		}
		f, err := storage.FoldTelemetryWindows(ctx, tx, s, to)
		if err != nil {
			return total, false, err
		}
		total.SourceRows += f.SourceRows
		total.HourlyOps += f.HourlyOps
	}
	if r.inBatch != nil {
		if err := r.inBatch(batch); err != nil {
			return total, false, err
		}
	}
	pending, err := storage.TelemetryDetailBefore(ctx, tx, before)
	return total, pending, err
}
