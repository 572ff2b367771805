package telemetry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// TerminalSummary is an ended session's terminal summary, stored as JSON
// in telemetry_sessions.summary (docs/operations.md, "Retention"). It is
// computed from the session's detail windows and hourly rollups together,
// so it covers the whole history whether or not retention folded it.
type TerminalSummary struct {
	// StartedAt is the first window's start; EndedAt the end of the last
	// window (its start + 60 s). Both RFC 3339 UTC.
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt"`
	// DurationSeconds is EndedAt − StartedAt in seconds: the minutes the
	// windows span, WindowsSeen + GapMinutes of them.
	DurationSeconds int64 `json:"durationSeconds"`
	// WindowsSeen counts the accepted windows.
	WindowsSeen int64 `json:"windowsSeen"`
	// GapMinutes counts the minutes between the first and last window
	// that have no window.
	GapMinutes int64 `json:"gapMinutes"`
	// GPUIdleMinutes counts the windows whose gpuUtilPct max was under 5
	// (0 when the session sent no gpuUtilPct).
	GPUIdleMinutes int64 `json:"gpuIdleMinutes"`
	// Metrics holds, per metric of the fixed set that had samples, the
	// mean of every sample and the largest one, in the metric's unit.
	Metrics map[string]MetricSummary `json:"metrics"`
	// EndReason is the session's: "final" or "deployment-ended".
	EndReason string `json:"endReason"`
}

// MetricSummary is one metric's part of a TerminalSummary.
type MetricSummary struct {
	// Samples is the number of samples behind Mean and Max.
	Samples int64 `json:"samples"`
	// Mean is the sum of all samples over Samples.
	Mean float64 `json:"mean"`
	// Max is the largest sample.
	Max float64 `json:"max"`
}

// Summarize builds a session's terminal summary from the totals of its
// detail and hourly rows (storage.TelemetrySessionTotals).
func Summarize(endReason string, detail, hourly storage.TelemetryTotals) TerminalSummary {
	t := detail
	t.Add(hourly)
	s := TerminalSummary{WindowsSeen: t.Windows, GPUIdleMinutes: t.GPUIdleWindows, EndReason: endReason,
		Metrics: map[string]MetricSummary{}}
	if t.Windows > 0 {
		s.StartedAt = t.First.UTC()
		s.EndedAt = t.Last.Add(time.Minute).UTC()
		s.DurationSeconds = int64(s.EndedAt.Sub(s.StartedAt) / time.Second)
		s.GapMinutes = int64(s.EndedAt.Sub(s.StartedAt)/time.Minute) - t.Windows
	}
	for i, m := range storage.TelemetryMetrics {
		if t.N[i] == 0 {
			continue
		}
		s.Metrics[m.Name] = MetricSummary{Samples: t.N[i], Mean: t.Sum[i] / float64(t.N[i]), Max: t.Max[i]}
	}
	return s
}

// finalize writes the terminal summary of up to FinalizeCap ended sessions
// that have none: those ended by a final window at once, those ended with
// their deployment once FinalizeGrace has passed since the end. Each
// summary is computed from one read snapshot and written only if the
// session's version is unchanged: a window accepted meanwhile bumps the
// version and clears any summary, so the stale write is a no-op and a
// later pass recomputes.
func (r *Retention) finalize(ctx context.Context, start time.Time, rep *Report) error {
	due, err := storage.TelemetrySessionsToFinalize(ctx, r.DB.Read, start.Add(-FinalizeGrace), FinalizeCap)
	if err != nil {
		return err
	}
	for _, s := range due {
		ref := storage.TelemetrySessionRef{EnvironmentID: s.EnvironmentID, DeploymentID: s.DeploymentID, ID: s.ID}
		snap, summary, err := r.summarize(ctx, ref)
		if errors.Is(err, storage.ErrNotFound) {
			continue // erased since it was listed
		}
		if err != nil {
			return err
		}
		if snap.Summary != "" || snap.EndedAt.IsZero() {
			continue // finalized (or changed) since it was listed
		}
		if r.afterSnapshot != nil {
			r.afterSnapshot(snap)
		}
		body, err := json.Marshal(summary)
		if err != nil {
			// One session that cannot be summarized (a value out of JSON's
			// range) must not stop the pass: every other session, and the
			// heartbeat pruning after this step, still run.
			r.Log.Error().Err(err).Int64("environmentId", ref.EnvironmentID).Str("deploymentId", ref.DeploymentID).
				Str("sessionId", ref.ID).Msg("terminal summary skipped")
			continue
		}
		var wrote bool
		if err := r.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			wrote, err = storage.SetTelemetrySessionSummary(ctx, tx, ref, snap.Version, string(body), r.Clock.Now())
			return err
		}); err != nil {
			return err
		}
		if wrote {
			rep.SessionsFinalized++
		}
	}
	return nil
}

// summarize reads the session, its detail totals and its hourly totals in
// one read transaction (one snapshot: a fold committing meanwhile moves
// windows atomically, so each is counted on exactly one side), and builds
// the summary.
func (r *Retention) summarize(ctx context.Context, ref storage.TelemetrySessionRef) (storage.TelemetrySession, TerminalSummary, error) {
	var s storage.TelemetrySession
	tx, err := r.DB.Read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s, TerminalSummary{}, fmt.Errorf("begin summary snapshot: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to undo
	if s, err = storage.TelemetrySessionByID(ctx, tx, ref.EnvironmentID, ref.DeploymentID, ref.ID); err != nil {
		return s, TerminalSummary{}, err
	}
	detail, hourly, err := storage.TelemetrySessionTotals(ctx, tx, ref)
	if err != nil {
		return s, TerminalSummary{}, err
	}
	return s, Summarize(s.EndReason, detail, hourly), nil
}
