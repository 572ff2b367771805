package ingest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/internal/schedule"
	"github.com/chalupa-run/chalupa/storage"
)

// Nonce pruning defaults.
const (
	// PruneInterval is the pause from the end of one prune to the start of
	// the next: low frequency, so an idle daemon stays quiet
	// (docs/operations.md, "Background loops").
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

// pruneSchedule is when nonces are pruned: PruneInterval after the end of
// the previous tick. Relative, not aligned: there is nothing to line up with,
// and a slow tick pushes the next one back rather than queueing it.
var pruneSchedule = schedule.Every(PruneInterval)

// NoncePruner deletes nonces held at least NonceHold on both clocks: signed
// more than NonceHold before wall time (such requests are refused by the
// timestamp check before the nonce is consulted) and claimed more than
// NonceHold ago by the monotonic clock, so a wall-clock step either way
// cannot forget a nonce whose request could pass the check again
// (docs/operations.md, "Signed ingest").
type NoncePruner struct {
	// DB is the migrated database; pruning goes through its writer.
	DB *storage.DB
	// Clock sets the schedule, the cutoff and the tick budget.
	Clock clockwork.Clock
	// Log receives one line per tick that deleted rows and any tick error.
	Log zerolog.Logger
	// Metrics records each tick; nil records nothing.
	Metrics *PruneMetrics
	// Activity, when set, signals that a nonce was stored
	// (Service.NonceActivity). While the nonces table is empty the pruner
	// waits on it with no timer at all; nil keeps the plain schedule.
	Activity <-chan struct{}
	// Ledger is ingest's record of claims (Service.NonceLedger), which
	// holds every nonce NonceHold by the monotonic clock. nil: a ledger
	// of the pruner's own, started at its first Run or Tick, that knows no
	// claims (tests that claim nonces directly).
	Ledger *NonceLedger

	ledgerOnce sync.Once
	idleWaits  atomic.Int64
}

// IdleWaits counts the times Run waited for Activity with no timer (no
// nonce stored); tests synchronise on it.
func (p *NoncePruner) IdleWaits() int64 { return p.idleWaits.Load() }

// ledger returns p.Ledger, or the pruner's own started now.
func (p *NoncePruner) ledger() *NonceLedger {
	p.ledgerOnce.Do(func() {
		if p.Ledger == nil {
			p.Ledger = NewNonceLedger(p.Clock)
		}
	})
	return p.Ledger
}

// PruneMetrics are the nonce pruner's Prometheus series.
type PruneMetrics struct {
	// Pruned counts deleted nonces (chalupa_nonces_pruned_total).
	Pruned prometheus.Counter
	// Ticks counts finished ticks by result, "ok" or "error"
	// (chalupa_nonce_prune_ticks_total).
	Ticks *prometheus.CounterVec
	// LastTickSeconds is the duration of the last tick in seconds, on the
	// pruner's clock (chalupa_nonce_prune_last_tick_duration_seconds); near
	// PruneBudget means the backlog outgrows a tick.
	LastTickSeconds prometheus.Gauge
}

// NewPruneMetrics creates the pruner's series and registers them with reg.
// Errors: reg's, such as prometheus.AlreadyRegisteredError when reg already
// holds them (one pruner per registry).
func NewPruneMetrics(reg prometheus.Registerer) (*PruneMetrics, error) {
	m := &PruneMetrics{
		Pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_nonces_pruned_total",
			Help: "Expired ingest nonces deleted by the nonce pruner.",
		}),
		Ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_nonce_prune_ticks_total",
			Help: "Nonce pruner ticks by result (ok or error).",
		}, []string{"result"}),
		LastTickSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chalupa_nonce_prune_last_tick_duration_seconds",
			Help: "Duration of the nonce pruner's last tick in seconds (bounded by its budget).",
		}),
	}
	for _, c := range []prometheus.Collector{m.Pruned, m.Ticks, m.LastTickSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register nonce pruner metrics: %w", err)
		}
	}
	// Both results exist from the start, so a rate() or an alert on errors
	// sees zero rather than no series.
	m.Ticks.WithLabelValues("ok")
	m.Ticks.WithLabelValues("error")
	return m, nil
}

// Name implements daemon.Loop.
func (p *NoncePruner) Name() string { return "nonce-prune" }

// Run prunes PruneInterval after the end of each tick, on p.Clock, until ctx
// ends; it then returns nil. A failed tick is logged and retried at the next
// run time. With Activity set, while no nonce is stored (an empty or idle
// fleet) it waits for the next stored nonce without any timer: the first
// prune comes PruneInterval after activity resumes.
func (p *NoncePruner) Run(ctx context.Context) error {
	p.ledger()
	for {
		if p.Activity != nil {
			if any, err := storage.AnyNonces(ctx, p.DB.Read); err == nil && !any {
				p.idleWaits.Add(1)
				select {
				case <-ctx.Done():
					p.persistMarkAtStop()
					return nil
				case <-p.Activity:
				}
			}
		}
		if _, err := schedule.Wait(ctx, p.Clock, pruneSchedule); err != nil {
			p.persistMarkAtStop()
			return nil
		}
		if _, err := p.Tick(ctx); err != nil && ctx.Err() == nil {
			p.Log.Error().Err(err).Str("loop", p.Name()).Msg("tick failed")
		}
	}
}

// Tick deletes expired nonces (held NonceHold on both clocks; none in the
// process's first NonceHold) in PruneBatch-row transactions until none is
// left or PruneBudget has passed, and returns how many rows it deleted. The
// count covers batches committed before an error.
func (p *NoncePruner) Tick(ctx context.Context) (int64, error) {
	start := p.Clock.Now()
	total, err := p.prune(ctx, start)
	if m := p.Metrics; m != nil {
		m.Pruned.Add(float64(total))
		result := "ok"
		if err != nil {
			result = "error"
		}
		m.Ticks.WithLabelValues(result).Inc()
		m.LastTickSeconds.Set(p.Clock.Since(start).Seconds())
	}
	if total > 0 {
		p.Log.Info().Str("loop", p.Name()).Int64("deleted", total).Msg("pruned expired nonces")
	}
	return total, err
}

// markStopTimeout bounds the mark's last write at shutdown: one small
// unit, which the writer, still open until the loops have stopped,
// commits at once.
const markStopTimeout = 5 * time.Second

// persistMarkAtStop writes the high-water mark's last advance when the
// loop stops, so a clean shutdown loses none of it (docs/operations.md,
// "Background loops").
func (p *NoncePruner) persistMarkAtStop() {
	ctx, cancel := context.WithTimeout(context.Background(), markStopTimeout)
	defer cancel()
	if err := PersistMark(ctx, p.DB, p.ledger().mark); err != nil {
		p.Log.Error().Err(err).Str("loop", p.Name()).Msg("writing the clock mark at shutdown failed")
	}
}

func (p *NoncePruner) prune(ctx context.Context, start time.Time) (int64, error) {
	ledger := p.ledger()
	// The mark bounds the delete as persisted, not as held in memory: a
	// crash that loses the mark's last advance then only keeps nonces
	// longer. Write any advance first.
	if err := PersistMark(ctx, p.DB, ledger.mark); err != nil {
		return 0, err
	}
	var total int64
	for p.Clock.Since(start) < PruneBudget {
		var n int64
		err := p.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			// The bound is taken inside the unit: claims run in writer
			// units too, so none comes between it and the delete.
			cutoff, ok := ledger.Cutoff(p.Clock.Now())
			if !ok {
				return nil
			}
			if ledger.mark != nil {
				// Only nonces whose requests the mark refuses, whatever
				// the wall clock does (docs/operations.md, "Signed ingest").
				mark, err := storage.ClockMark(ctx, tx)
				if err != nil {
					return err
				}
				if mark.IsZero() {
					return nil
				}
				if floor := mark.Add(-SkewWindow); floor.Before(cutoff) {
					cutoff = floor
				}
			}
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
	return total, nil
}
