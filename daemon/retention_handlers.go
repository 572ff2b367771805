package daemon

import (
	"context"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/storage"
)

// retentionRunsShown is how many passes adminListRetentionRuns returns:
// two days of hourly runs, enough to see a backlog draining.
const retentionRunsShown = 48

// retentionHandlers run and list retention passes (docs/operations.md,
// "Retention").
type retentionHandlers struct {
	db *storage.DB
	// retention is the loop's own worker: a run waits for the loop's pass
	// (and the loop for the run), never overlapping it.
	retention *telemetry.Retention
}

func (h *retentionHandlers) register(o *operations) {
	handleOp(o, adminapi.OpRunRetention, h.run)
	handleOp(o, adminapi.OpListRetentionRuns, h.list)
}

func (h *retentionHandlers) run(ctx context.Context, _ none) (adminapi.RetentionRun, error) {
	rep, err := h.retention.Tick(ctx, telemetry.RetentionTriggerAdmin)
	if err != nil {
		return adminapi.RetentionRun{}, err
	}
	return toAPIRetentionRun(rep), nil
}

func (h *retentionHandlers) list(ctx context.Context, _ none) (adminapi.RetentionRunList, error) {
	runs, err := storage.RecentRetentionRuns(ctx, h.db.Read, retentionRunsShown)
	if err != nil {
		return adminapi.RetentionRunList{}, err
	}
	out := adminapi.RetentionRunList{Runs: make([]adminapi.RetentionRun, 0, len(runs))}
	for _, r := range runs {
		out.Runs = append(out.Runs, toAPIRetentionRun(r))
	}
	return out, nil
}

// toAPIRetentionRun is the wire form of a stored retention pass.
func toAPIRetentionRun(r storage.RetentionRun) adminapi.RetentionRun {
	return adminapi.RetentionRun{
		ID: r.ID, Trigger: r.Trigger, StartedAt: r.StartedAt, DurationMs: r.Duration.Milliseconds(),
		TelemetryMinuteRollups: r.MinuteRollups, TelemetryHourlyRollups: r.HourlyRollups, TelemetryBatches: r.Batches,
		TelemetryBacklogPending: r.BacklogPending, TelemetryDrainStopReason: r.DrainStopReason,
		HeartbeatsPruned: r.HeartbeatsPruned, SessionsFinalized: r.SessionsFinalized, StackStatesPruned: r.StackStatesPruned, Error: r.Error,
	}
}
