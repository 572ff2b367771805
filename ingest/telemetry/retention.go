package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/internal/schedule"
	"github.com/chalupa-run/chalupa/storage"
)

// Retention defaults (docs/operations.md, "Retention").
const (
	// RetentionMinute is the minute past each hour (UTC) the pass runs at:
	// hourly keeps the detail older than 7 days within an hour of its
	// cutoff, and :43 stays clear of cost reconciliation's quarter hours.
	RetentionMinute = 43
	// DetailRetention is how long minute source windows are kept in detail
	// before they are folded into hourly rollups (kept indefinitely).
	DetailRetention = 7 * 24 * time.Hour
	// FoldBatchRows is the source rows one fold batch selects (whole hour
	// groups; telemetryBatches counts these selections). An hour group is
	// never split, so a batch whose first group alone exceeds the bound
	// carries that group whole (at most 60 minute windows).
	FoldBatchRows = 5000
	// FoldUnitRows bounds the source rows one writer unit of a batch folds
	// (whole hour groups; a batch is folded in several such units). The
	// writer is single, so every heartbeat queued behind a fold unit waits
	// for it: a whole 5,000-row batch held the writer ~100 ms on a 2-vCPU
	// machine, 250 rows hold it ~5 ms (the fold runs ~40,000–50,000
	// rows/s there), a third of the 15 ms ingest p99 budget. Smaller units
	// add a COMMIT (fsync, replication) per fewer rows: over 200,000 rows
	// the fold ran 37,000 rows/s at 250, 45,000 at 500, 73,000 at 5,000
	// (docs/operations.md, "Retention").
	FoldUnitRows = 250
	// FoldYieldFactor is how long the fold pauses after a unit, as a
	// multiple of its own working time, while ingest is active (other
	// writes committed during the unit): at 3 the fold takes at most a
	// quarter of the writer and of a CPU. On a one-vCPU server steady
	// ingest at 1,000 requests/s takes ~0.75 of the core, so a fold at
	// full speed starved it (p99 of seconds); with nothing else writing
	// the fold runs unpaced.
	FoldYieldFactor = 3
	// FoldDrainDeadline bounds the time a pass spends folding; the next
	// pass (or an operator's run) continues a larger backlog.
	FoldDrainDeadline = 20 * time.Second
	// MaxFoldBatches caps the batches of one pass (stop reason
	// "batch-limit"): the bound that holds when the clock does not (a
	// stepped clock, a fake one), 5 M source rows at the default batch.
	MaxFoldBatches = 1000
	// FoldSessionsPerBatch caps the sessions one batch visits, so a batch
	// of many one-window sessions stays as short as one of 5,000 rows.
	FoldSessionsPerBatch = 256
	// FinalizeGrace is how long after its deployment ended a session waits
	// for its terminal summary: final windows are admitted for
	// FinalWindowGrace after the end, so an earlier summary would miss them.
	FinalizeGrace = FinalWindowGrace
	// FinalizeCap bounds the sessions summarized per pass; the rest wait
	// for the next pass.
	FinalizeCap = 500
	// HeartbeatRetention is how long raw heartbeats are kept (each
	// deployment's latest is kept regardless).
	HeartbeatRetention = 7 * 24 * time.Hour
	// HeartbeatPruneBatch is the heartbeats looked at per writer unit.
	HeartbeatPruneBatch = 5000
	// HeartbeatPruneBudget bounds the time a pass spends pruning
	// heartbeats; a larger backlog continues at the next pass.
	HeartbeatPruneBudget = 20 * time.Second
	// StackStatePruneUnits caps the writer units of checkpoint pruning per
	// pass (storage.StackStatePruneBatch rows each, 2,000 rows): a box's
	// two stacks add a few checkpoints a day, so a pass normally needs one
	// unit; a larger backlog continues at the next pass.
	StackStatePruneUnits = 10
)

// Drain stop reasons (retention_runs.drain_stop_reason).
const (
	// DrainStopDrained: no source window older than the cutoff is left.
	DrainStopDrained = "drained"
	// DrainStopDeadline: FoldDrainDeadline passed with work left.
	DrainStopDeadline = "deadline"
	// DrainStopBatchLimit: MaxFoldBatches batches ran with work left.
	DrainStopBatchLimit = "batch-limit"
)

// Retention pass triggers (retention_runs.trigger).
const (
	RetentionTriggerSchedule = "schedule"
	RetentionTriggerAdmin    = "admin"
)

// retentionSchedule is when the loop runs: hourly at RetentionMinute.
var retentionSchedule = schedule.HourlyAt(RetentionMinute)

// Report is what one retention pass did, as stored in retention_runs.
type Report = storage.RetentionRun

// Retention is the retention loop (docs/operations.md, "Retention"): each
// pass folds minute source windows older than DetailRetention into hourly
// rollups, finalizes ended sessions' terminal summaries, prunes raw
// heartbeats older than HeartbeatRetention (keeping each deployment's
// latest), prunes converge checkpoints (pruneStackStates) and stores its
// report. Lifecycle events are never pruned. The
// loop and adminRunRetention share one Retention, whose passes never
// overlap.
type Retention struct {
	// DB is the migrated database; every write goes through its writer.
	DB *storage.DB
	// Clock sets the schedule, the cutoffs and the pass's time bounds.
	Clock clockwork.Clock
	// Log receives one line per pass that did anything, and failures.
	Log zerolog.Logger
	// Metrics records each pass; nil records nothing.
	Metrics *RetentionMetrics

	// BatchRows, UnitRows, DrainDeadline and MaxBatches override
	// FoldBatchRows, FoldUnitRows, FoldDrainDeadline and MaxFoldBatches
	// when positive (tests).
	BatchRows     int
	UnitRows      int
	DrainDeadline time.Duration
	MaxBatches    int

	// mu serializes passes: the loop's and the operator's.
	mu sync.Mutex

	// Test hooks. inUnit runs inside each fold writer unit (unit of batch,
	// both 0-based) after the fold; an error aborts that unit. afterSnapshot runs between a
	// finalizer's snapshot read and its guarded write.
	inUnit        func(batch, unit int) error
	afterSnapshot func(s storage.TelemetrySession)
}

// RetentionMetrics are the retention loop's Prometheus series.
type RetentionMetrics struct {
	// BacklogPending is 1 while the last pass left foldable detail
	// (chalupa_retention_backlog_pending).
	BacklogPending prometheus.Gauge
	// RowsFolded counts source windows folded into hourly rollups
	// (chalupa_retention_rows_folded_total).
	RowsFolded prometheus.Counter
	// LastRun is the start of the last pass, unix seconds
	// (chalupa_retention_last_run_timestamp_seconds).
	LastRun prometheus.Gauge
	// StopReason is 1 for the last pass's drain stop reason and 0 for the
	// others (chalupa_retention_last_stop_reason{reason}).
	StopReason *prometheus.GaugeVec
	// Runs counts passes by result, "ok" or "error"
	// (chalupa_retention_runs_total).
	Runs *prometheus.CounterVec
	// HeartbeatsPruned counts raw heartbeats deleted
	// (chalupa_retention_heartbeats_pruned_total).
	HeartbeatsPruned prometheus.Counter
}

// NewRetentionMetrics creates the retention loop's series and registers
// them with reg. Errors: reg's, such as prometheus.AlreadyRegisteredError
// when reg already holds them (one retention loop per registry).
func NewRetentionMetrics(reg prometheus.Registerer) (*RetentionMetrics, error) {
	m := &RetentionMetrics{
		BacklogPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chalupa_retention_backlog_pending",
			Help: "1 while the last retention pass left telemetry detail older than the fold cutoff.",
		}),
		RowsFolded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_retention_rows_folded_total",
			Help: "Telemetry source windows folded into hourly rollups (and deleted).",
		}),
		LastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chalupa_retention_last_run_timestamp_seconds",
			Help: "Start of the last retention pass, unix seconds.",
		}),
		StopReason: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "chalupa_retention_last_stop_reason",
			Help: "1 for the last retention pass's drain stop reason (drained, deadline, batch-limit), 0 for the others.",
		}, []string{"reason"}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_retention_runs_total",
			Help: "Retention passes by result (ok or error).",
		}, []string{"result"}),
		HeartbeatsPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_retention_heartbeats_pruned_total",
			Help: "Raw heartbeats older than 7 days deleted by retention.",
		}),
	}
	for _, c := range []prometheus.Collector{m.BacklogPending, m.RowsFolded, m.LastRun, m.StopReason, m.Runs, m.HeartbeatsPruned} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register retention metrics: %w", err)
		}
	}
	for _, r := range []string{DrainStopDrained, DrainStopDeadline, DrainStopBatchLimit} {
		m.StopReason.WithLabelValues(r)
	}
	m.Runs.WithLabelValues("ok")
	m.Runs.WithLabelValues("error")
	return m, nil
}

// SetMetrics makes r record its passes in m (nil: nothing), waiting for a
// running pass to end first. The daemon builds r with its admin handlers
// and attaches the metrics when it registers the loop.
func (r *Retention) SetMetrics(m *RetentionMetrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Metrics = m
}

// Name implements daemon.Loop.
func (r *Retention) Name() string { return "retention" }

// Run runs a pass hourly at RetentionMinute past the hour (UTC), on
// r.Clock, until ctx ends; it then returns nil. A failed pass is logged
// (and stored) and the next one runs at the next hour.
func (r *Retention) Run(ctx context.Context) error {
	for {
		if _, err := schedule.Wait(ctx, r.Clock, retentionSchedule); err != nil {
			return nil
		}
		if _, err := r.Tick(ctx, RetentionTriggerSchedule); err != nil && ctx.Err() == nil {
			r.Log.Error().Err(err).Str("loop", r.Name()).Msg("retention pass failed")
		}
	}
}

// Tick runs one retention pass, waiting for a pass already running to end
// first, and returns its report (stored in retention_runs, also when a step
// failed). trigger is RetentionTriggerSchedule or RetentionTriggerAdmin. The
// report's counts cover what was committed before an error. Errors: the
// first step that failed (the pass stops there), or storing the report.
func (r *Retention) Tick(ctx context.Context, trigger string) (Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.Clock.Now().UTC()
	rep := Report{Trigger: trigger, StartedAt: start, DrainStopReason: DrainStopDrained}
	var err error
	step := func(name string, fn func() error) {
		if err != nil {
			return
		}
		if e := fn(); e != nil {
			err = fmt.Errorf("retention %s: %w", name, e)
			rep.Error = name + " failed"
		}
	}
	step("fold", func() error { return r.fold(ctx, start, &rep) })
	step("finalize", func() error { return r.finalize(ctx, start, &rep) })
	step("heartbeat prune", func() error { return r.pruneHeartbeats(ctx, start, &rep) })
	step("checkpoint prune", func() error { return r.pruneStackStates(ctx, start, &rep) })
	rep.Duration = r.Clock.Since(start)
	// The report is evidence of the pass even when ctx ended mid-pass.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if serr := r.DB.Writer.Do(sctx, func(tx storage.Tx) error {
		id, err := storage.InsertRetentionRun(sctx, tx, rep)
		rep.ID = id
		return err
	}); serr != nil {
		err = errors.Join(err, serr)
	}
	r.record(rep, err)
	return rep, err
}

// record updates the metrics and logs the pass.
func (r *Retention) record(rep Report, err error) {
	if m := r.Metrics; m != nil {
		m.RowsFolded.Add(float64(rep.MinuteRollups))
		m.HeartbeatsPruned.Add(float64(rep.HeartbeatsPruned))
		m.LastRun.Set(float64(rep.StartedAt.UnixMilli()) / 1000)
		pending := 0.0
		if rep.BacklogPending {
			pending = 1
		}
		m.BacklogPending.Set(pending)
		for _, reason := range []string{DrainStopDrained, DrainStopDeadline, DrainStopBatchLimit} {
			v := 0.0
			if reason == rep.DrainStopReason {
				v = 1
			}
			m.StopReason.WithLabelValues(reason).Set(v)
		}
		result := "ok"
		if err != nil {
			result = "error"
		}
		m.Runs.WithLabelValues(result).Inc()
	}
	if err == nil && rep.MinuteRollups == 0 && rep.HeartbeatsPruned == 0 && rep.SessionsFinalized == 0 && rep.StackStatesPruned == 0 && !rep.BacklogPending {
		return
	}
	ev := r.Log.Info()
	if err != nil {
		ev = r.Log.Error().Err(err)
	}
	ev.Str("loop", r.Name()).Str("trigger", rep.Trigger).Int64("minuteRollups", rep.MinuteRollups).
		Int64("hourlyRollups", rep.HourlyRollups).Int64("batches", rep.Batches).Bool("backlogPending", rep.BacklogPending).
		Str("drainStopReason", rep.DrainStopReason).Int64("heartbeatsPruned", rep.HeartbeatsPruned).
		Int64("sessionsFinalized", rep.SessionsFinalized).Int64("stackStatesPruned", rep.StackStatesPruned).
		Dur("duration", rep.Duration).Msg("retention pass")
}

// pruneHeartbeats deletes raw heartbeats older than HeartbeatRetention,
// keeping each deployment's latest, in HeartbeatPruneBatch-row writer units
// until none is left or HeartbeatPruneBudget (or the batch cap) is spent.
func (r *Retention) pruneHeartbeats(ctx context.Context, start time.Time, rep *Report) error {
	cutoff := start.Add(-HeartbeatRetention)
	var after int64
	for i := 0; i < r.maxBatches() && (i == 0 || r.Clock.Since(start) < HeartbeatPruneBudget); i++ {
		var n int64
		var done bool
		err := r.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			n, after, done, err = storage.PruneHeartbeats(ctx, tx, after, cutoff, HeartbeatPruneBatch)
			return err
		})
		if err != nil {
			return err
		}
		rep.HeartbeatsPruned += n
		if done {
			return nil
		}
	}
	return nil
}

// pruneStackStates deletes the converge checkpoints retention no longer
// keeps (storage.PruneStackStates: each stack's newest
// storage.StackStatesKeep stay; a box destroyed more than
// storage.DestroyedBoxStackStateRetention ago keeps none), in
// storage.StackStatePruneBatch-row writer units, at most
// StackStatePruneUnits per pass.
func (r *Retention) pruneStackStates(ctx context.Context, start time.Time, rep *Report) error {
	for i := 0; i < StackStatePruneUnits; i++ {
		var n int64
		err := r.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			n, err = storage.PruneStackStates(ctx, tx, start, storage.StackStatePruneBatch)
			return err
		})
		if err != nil {
			return err
		}
		rep.StackStatesPruned += n
		if n < storage.StackStatePruneBatch {
			return nil
		}
	}
	return nil
}

func (r *Retention) batchRows() int {
	if r.BatchRows > 0 {
		return r.BatchRows
	}
	return FoldBatchRows
}

func (r *Retention) unitRows() int {
	if r.UnitRows > 0 {
		return r.UnitRows
	}
	return FoldUnitRows
}

func (r *Retention) drainDeadline() time.Duration {
	if r.DrainDeadline > 0 {
		return r.DrainDeadline
	}
	return FoldDrainDeadline
}

func (r *Retention) maxBatches() int {
	if r.MaxBatches > 0 {
		return r.MaxBatches
	}
	return MaxFoldBatches
}
