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

// foldTo is one fold step of a writer unit: every source window of the
// session before the hour-aligned bound to.
type foldTo struct {
	s  storage.TelemetrySessionRef
	to time.Time
}

// fold runs fold batches until no source window before the cutoff is left
// (drained), FoldDrainDeadline has passed (deadline) or MaxFoldBatches ran
// (batch-limit), and records in rep what the committed units did and
// whether foldable detail was left. A batch is a selection of up to
// BatchRows source windows (whole hour groups); it is folded in writer
// units of at most UnitRows windows each (whole hour groups too), so
// ingest queued behind the fold waits for one short unit, not for the
// batch.
func (r *Retention) fold(ctx context.Context, start time.Time, rep *Report) error {
	before := FoldCutoff(start)
	deadline := r.drainDeadline()
	pending := true
	pace := newPacer()
	for {
		if int(rep.Batches) >= r.maxBatches() {
			rep.DrainStopReason = DrainStopBatchLimit
			break
		}
		if rep.Batches > 0 && r.Clock.Since(start) >= deadline {
			rep.DrainStopReason = DrainStopDeadline
			break
		}
		units, err := r.planBatch(ctx, before)
		if err != nil {
			rep.BacklogPending = true
			return err
		}
		batch := int(rep.Batches)
		for i, u := range units {
			var f storage.TelemetryFold
			_, before := r.DB.Writer.Stats()
			err := r.DB.Writer.Do(ctx, func(tx storage.Tx) error {
				var err error
				f, err = r.foldUnit(ctx, tx, u, batch, i)
				return err
			})
			if err != nil {
				rep.BacklogPending = true
				return err
			}
			rep.MinuteRollups += f.SourceRows
			rep.HourlyRollups += f.HourlyOps
			// Other writes committed while this unit waited or ran: ingest
			// is active, so yield the writer and the CPU.
			if _, after := r.DB.Writer.Stats(); after-before > 1 {
				if err := pace.yield(ctx); err != nil {
					rep.BacklogPending = true
					return err
				}
			}
		}
		if pending, err = storage.TelemetryDetailBefore(ctx, r.DB.Read, before); err != nil {
			rep.BacklogPending = true
			return err
		}
		if len(units) == 0 && !pending {
			rep.DrainStopReason = DrainStopDrained
			break
		}
		rep.Batches++
		if !pending {
			rep.DrainStopReason = DrainStopDrained
			break
		}
	}
	rep.BacklogPending = pending
	return nil
}

// planBatch selects the next batch, read outside the writer: up to
// BatchRows source windows before the cutoff, whole hour groups only, from
// the sessions with the oldest detail; and splits it into writer units of
// at most UnitRows windows of whole hour groups (an hour group larger than
// UnitRows, possible only when UnitRows < 60, is a unit of its own).
//
// The plan only sizes the units: each unit folds every window of a session
// before an hour boundary, so whatever changed since the plan was read, a
// unit folds whole hours, atomically. Foldable hours are older than any
// window ingest admits (2 hours), so in practice nothing changes.
func (r *Retention) planBatch(ctx context.Context, before time.Time) ([][]foldTo, error) {
	q := r.DB.Read
	sessions, err := storage.FoldableTelemetrySessions(ctx, q, before, FoldSessionsPerBatch)
	if err != nil {
		return nil, err
	}
	limit, unitRows := r.batchRows(), r.unitRows()
	var units [][]foldTo
	var cur []foldTo
	planned, curRows := 0, 0
	for _, s := range sessions {
		remaining := limit - planned
		if remaining <= 0 {
			break
		}
		// The window just past this batch's share: fold up to the start of
		// its hour, so the hour it is in is not split.
		to := before
		at, over, err := storage.TelemetryWindowStartAt(ctx, q, s, before, remaining)
		if err != nil {
			return nil, err
		}
		if over {
			to = at.Truncate(time.Hour)
			if first, _, err := storage.TelemetryWindowStartAt(ctx, q, s, before, 0); err != nil {
				return nil, err
			} else if !to.After(first) {
				// The session's first hour alone is more than the share.
				if planned > 0 {
					break
				}
				to = to.Add(time.Hour)
			}
		}
		hours, err := storage.TelemetryHourCounts(ctx, q, s, to)
		if err != nil {
			return nil, err
		}
		for _, h := range hours {
			if curRows > 0 && curRows+h.Windows > unitRows {
				units = append(units, cur)
				cur, curRows = nil, 0
			}
			end := h.Hour.Add(time.Hour)
			if n := len(cur); n > 0 && cur[n-1].s == s {
				cur[n-1].to = end
			} else {
				cur = append(cur, foldTo{s: s, to: end})
			}
			curRows += h.Windows
			planned += h.Windows
		}
	}
	if len(cur) > 0 {
		units = append(units, cur)
	}
	return units, nil
}

// foldUnit is one writer unit of batch: it folds each step of u.
func (r *Retention) foldUnit(ctx context.Context, tx storage.Tx, u []foldTo, batch, unit int) (storage.TelemetryFold, error) {
	var total storage.TelemetryFold
	for _, step := range u {
		f, err := storage.FoldTelemetryWindows(ctx, tx, step.s, step.to)
		if err != nil {
			return total, err
		}
		total.SourceRows += f.SourceRows
		total.HourlyOps += f.HourlyOps
	}
	if r.inUnit != nil {
		if err := r.inUnit(batch, unit); err != nil {
			return total, err
		}
	}
	return total, nil
}

// pacer spaces fold units out while ingest is active: after a unit it
// sleeps FoldYieldFactor times the fold's own working time since the last
// pause (planning included), so the fold takes at most
// 1/(1+FoldYieldFactor) of the wall time, of the writer and of a CPU.
type pacer struct {
	// worked is when the fold last resumed work.
	worked time.Time
}

func newPacer() *pacer { return &pacer{worked: time.Now()} }

// yield sleeps (real time: the pause is for the CPU and the writer, not
// for the injected clock) and restarts the work measure. Errors: ctx's.
func (p *pacer) yield(ctx context.Context) error {
	d := time.Duration(FoldYieldFactor * float64(time.Since(p.worked)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.worked = time.Now()
	return nil
}
