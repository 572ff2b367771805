package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// RunnerConfig is a Runner's dependencies.
type RunnerConfig struct {
	// DB is the migrated database.
	DB *storage.DB
	// Clock stamps the lease and schedules its deadline.
	Clock clockwork.Clock
	// Log receives a line per job and per failure.
	Log zerolog.Logger
	// Executor runs the jobs (required).
	Executor Executor
	// InstanceID identifies this process (jobs.locked_by, workers.worker_id).
	InstanceID string
	// Version is the build's version, reported in workers.
	Version string
	// Alerts receives job-failed (nil: none; alerts.go,
	// docs/operations.md "Alerts").
	Alerts alerts.Setter
	// AfterJob, when set, is called with the box after each job's end is
	// recorded (succeeded, failed or requeued), outside the writer unit:
	// the daemon re-evaluates the box's other conditions with it (an
	// agent upgrade's failure ends with the droplet it was on).
	AfterJob func(ctx context.Context, box storage.Box)
}

// Runner is the one job lane. Create it with NewRunner; Run it as a
// background loop; Notify it on enqueue.
type Runner struct {
	db       *storage.DB
	clock    clockwork.Clock
	log      zerolog.Logger
	exec     Executor
	instance string
	version  string
	wake     chan struct{}

	// tickMu serialises ticks; claimMu is held while a job is claimed, and
	// by the Service while it proves a scope idle and cancels its lock, so
	// no job of that scope starts in between.
	tickMu  sync.Mutex
	claimMu sync.Mutex

	// prepared is set once the executor's Prepare succeeded (or it has
	// none); guarded by tickMu.
	prepared bool

	// alerts receives job-failed; failed is what was last reported per
	// box (alerts.go); afterJob is RunnerConfig.AfterJob.
	alerts   alerts.Setter
	failed   reported
	afterJob func(ctx context.Context, box storage.Box)

	// idleWaits counts waits without a timer (tests synchronise on it).
	idleWaits atomic.Int64
}

// NewRunner returns a Runner. It panics without an Executor: a lane with
// nothing to run is not built (the Service answers ErrNotConfigured).
func NewRunner(c RunnerConfig) *Runner {
	if c.Executor == nil {
		panic("jobs: NewRunner without an Executor")
	}
	r := &Runner{db: c.DB, clock: c.Clock, log: c.Log.With().Str("loop", "jobs").Logger(), exec: c.Executor,
		instance: c.InstanceID, version: c.Version, wake: make(chan struct{}, 1), alerts: c.Alerts, afterJob: c.AfterJob}
	if r.clock == nil {
		r.clock = clockwork.NewRealClock()
	}
	return r
}

// Name implements daemon.Loop.
func (r *Runner) Name() string { return "jobs" }

// InstanceID is the id this runner locks jobs with.
func (r *Runner) InstanceID() string { return r.instance }

// Notify wakes the runner (a job was enqueued). Signals coalesce.
func (r *Runner) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// IdleWaits counts the times Run waited for an enqueue (an empty queue).
func (r *Runner) IdleWaits() int64 { return r.idleWaits.Load() }

// Run works until ctx ends, then returns nil. It records the worker row at
// start; each pass recovers dead jobs and runs at most one job; with nothing
// queued it waits for Notify, recording the worker row every
// IdleWorkerHeartbeat meanwhile (its only timer); after a failed recovery or
// a database fault it waits RecoverRetry (or a Notify).
func (r *Runner) Run(ctx context.Context) error {
	r.touch(ctx, "")
	for {
		res, err := r.Tick(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.log.Error().Err(err).Msg("jobs tick failed; retrying")
			t := r.clock.NewTimer(RecoverRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.Chan():
			case <-r.wake:
				t.Stop()
			}
			continue
		}
		if res.Ran != nil || res.More {
			continue
		}
		if !r.idle(ctx) {
			return nil
		}
	}
}

// idle waits for a Notify, recording the worker row every
// IdleWorkerHeartbeat; false when ctx ended.
func (r *Runner) idle(ctx context.Context) bool {
	r.idleWaits.Add(1)
	for {
		t := r.clock.NewTimer(IdleWorkerHeartbeat)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-r.wake:
			t.Stop()
			return true
		case <-t.Chan():
			r.touch(ctx, "")
		}
	}
}

// Recovered is a dead job a tick settled.
type Recovered struct {
	// JobID names it; Status is what the attempt rule made it (queued or
	// failed).
	JobID, Status string
}

// Ran is the job a tick ran.
type Ran struct {
	// JobID and Action name it.
	JobID, Action string
	// Status is its status after the run: succeeded, failed, queued
	// (lease expired, requeued) or running (the daemon stopped mid-run:
	// recovered at the next start).
	Status string
	// Error is the failure or requeue reason.
	Error string
	// TimedOut is set when the lease deadline cancelled the run.
	TimedOut bool
}

// TickResult is what one tick did.
type TickResult struct {
	// Recovered lists the dead jobs handed to Recover and settled.
	Recovered []Recovered
	// Ran is the job run (nil: none was queued, or recovery left dead jobs
	// for the next tick).
	Ran *Ran
	// More is set when more dead jobs remain than MaxRecoverPerTick: the
	// next tick recovers them before any claim.
	More bool
}

// Tick recovers the jobs left running by a process that is gone (at most
// MaxRecoverPerTick; every running job is one: a run always ends within
// the tick that claimed it), then claims the oldest queued job and runs it
// to its end or its lease deadline. Errors: a database fault, or a failed
// Recover (nothing is claimed then).
func (r *Runner) Tick(ctx context.Context) (TickResult, error) {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()
	var res TickResult
	if !r.prepared {
		if p, ok := r.exec.(Preparer); ok {
			if err := p.Prepare(ctx); err != nil {
				return res, fmt.Errorf("prepare the executor: %w", err)
			}
		}
		r.prepared = true
	}
	more, err := r.recover(ctx, &res)
	if err != nil || more {
		res.More = more
		return res, err
	}
	var job Job
	var box storage.Box
	r.claimMu.Lock()
	err = r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		now := r.clock.Now()
		var err error
		if job, err = storage.ClaimNextJob(ctx, tx, r.instance, now); err != nil {
			return err
		}
		if box, err = storage.BoxByRef(ctx, tx, job.ScopeID); err != nil {
			return fmt.Errorf("job %s: box: %w", job.ID, err)
		}
		return storage.TouchWorker(ctx, tx, storage.Worker{WorkerID: r.instance, Version: r.version, LastSeenAt: now, CurrentJobID: job.ID})
	})
	r.claimMu.Unlock()
	if errors.Is(err, storage.ErrNotFound) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	ran := r.run(ctx, job, box)
	res.Ran = &ran
	if ran.Status != storage.JobRunning {
		r.jobAlert(ctx, box, job.ID, ran.Status)
	}
	return res, nil
}

// recover settles every running job (all belong to dead processes at the
// start of a tick). more is set when the cap left some.
func (r *Runner) recover(ctx context.Context, res *TickResult) (more bool, err error) {
	dead, err := storage.RunningJobs(ctx, r.db.Read)
	if err != nil {
		return false, err
	}
	if len(dead) > MaxRecoverPerTick {
		dead, more = dead[:MaxRecoverPerTick], true
	}
	for _, j := range dead {
		box, err := storage.BoxByRef(ctx, r.db.Read, j.ScopeID)
		if err != nil {
			return more, fmt.Errorf("recover job %s: box: %w", j.ID, err)
		}
		found, err := r.exec.Recover(ctx, j, box)
		if err != nil {
			return more, fmt.Errorf("recover job %s: %w", j.ID, err)
		}
		var status string
		err = r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			now := r.clock.Now()
			if found != nil {
				if err := storage.RecordBoxResources(ctx, tx, box.ID, *found, now); err != nil {
					return err
				}
			}
			var err error
			status, err = storage.ReleaseJob(ctx, tx, j.ID, j.LockedBy, MaxAttempts,
				"the process running it stopped; recovered at start", now)
			return err
		})
		if errors.Is(err, storage.ErrNotFound) {
			continue // settled meanwhile
		}
		if err != nil {
			return more, err
		}
		r.log.Warn().Str("job", j.ID).Str("scope", j.ScopeID).Str("status", status).Msg("recovered a job left running by a stopped process")
		r.jobAlert(ctx, box, j.ID, status)
		res.Recovered = append(res.Recovered, Recovered{JobID: j.ID, Status: status})
	}
	return more, nil
}

// run executes a claimed job until it ends, its lease deadline passes (the
// run is cancelled and waited for, settled by the executor's Recover as a
// dead process's job is, then the attempt rule applies) or ctx
// ends (the run is cancelled and waited for; the job stays running and is
// recovered at the next start).
func (r *Runner) run(ctx context.Context, job Job, box storage.Box) Ran {
	ran := Ran{JobID: job.ID, Action: job.Action, Status: storage.JobRunning}
	log := r.log.With().Str("job", job.ID).Str("box", box.Name).Str("action", job.Action).Int("attempt", job.Attempts).Logger()
	log.Info().Msg("job started")
	execCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type done struct {
		out Outcome
		err error
	}
	finished := make(chan done, 1)
	go func() {
		var d done
		defer func() {
			if p := recover(); p != nil {
				d = done{err: fmt.Errorf("executor panicked: %v", p)}
			}
			finished <- d
		}()
		d.out, d.err = r.exec.Execute(execCtx, job, box, func(p Progress) { r.progress(ctx, job.ID, p) })
	}()

	deadline := r.clock.NewTimer(job.LockedAt.Add(LeaseDuration).Sub(r.clock.Now()))
	defer deadline.Stop()
	beat := r.clock.NewTicker(WorkerHeartbeat)
	defer beat.Stop()
	var d done
wait:
	for {
		select {
		case d = <-finished:
			break wait
		case <-beat.Chan():
			r.touch(ctx, job.ID)
		case <-deadline.Chan():
			// Cancel, then wait: the next run of this scope must not start
			// while this one still acts (docs/operations.md, "Jobs").
			ran.TimedOut = true
			log.Warn().Msg("lease deadline reached: cancelling the run and waiting for it to stop")
			cancel()
			beat.Stop()
			d = <-finished
			break wait
		case <-ctx.Done():
			cancel()
			<-finished
			log.Warn().Msg("stopped mid-run: the job is recovered at the next start")
			return ran
		}
	}

	// A cancelled run may have been killed mid-operation (the engine kills
	// a run that does not stop in time): it leaves what a dead process
	// leaves, a held lock and pending creates. It is settled as one
	// (Recover) before the attempt rule may requeue it, or a retried up
	// would fail on the lock or create a second droplet. A failed Recover
	// leaves the job running: the next tick recovers it before anything
	// else runs.
	var found *storage.BoxResources
	if ran.TimedOut {
		var err error
		if found, err = r.exec.Recover(ctx, job, box); err != nil {
			log.Error().Err(err).Msg("settling the cancelled run failed; the job is recovered before anything else runs")
			return ran
		}
	}

	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		now := r.clock.Now()
		if err := storage.TouchWorker(ctx, tx, storage.Worker{WorkerID: r.instance, Version: r.version, LastSeenAt: now}); err != nil {
			return err
		}
		switch {
		case ran.TimedOut:
			if found != nil {
				if err := storage.RecordBoxResources(ctx, tx, box.ID, *found, now); err != nil {
					return err
				}
			}
			ran.Error = fmt.Sprintf("lease expired after %s: the run was cancelled", LeaseDuration)
			var err error
			ran.Status, err = storage.ReleaseJob(ctx, tx, job.ID, r.instance, MaxAttempts, ran.Error, now)
			if ran.Status == storage.JobFailed {
				ran.Error = storage.WorkerLost
			}
			return err
		case d.err != nil:
			if err := r.record(ctx, tx, job, box, d.out, now); err != nil {
				return err
			}
			ran.Status, ran.Error = storage.JobFailed, truncate(d.err.Error(), MaxErrorBytes)
			detail := ran.Error
			if de, ok := errors.AsType[DetailedError](d.err); ok && de.Detail() != "" {
				detail = truncate(de.Detail(), MaxErrorDetailBytes)
			}
			return storage.FinishJobDetail(ctx, tx, job.ID, r.instance, storage.JobFailed, nil, ran.Error, detail, now)
		case len(d.out.Summary) > MaxResultBytes:
			ran.Status, ran.Error = storage.JobFailed, fmt.Sprintf("the run succeeded but its result exceeds %d bytes", MaxResultBytes)
			return storage.FinishJob(ctx, tx, job.ID, r.instance, storage.JobFailed, nil, ran.Error, now)
		}
		if err := r.record(ctx, tx, job, box, d.out, now); err != nil {
			return err
		}
		ran.Status = storage.JobSucceeded
		return storage.FinishJob(ctx, tx, job.ID, r.instance, storage.JobSucceeded, d.out.Summary, "", now)
	})
	if err != nil {
		// The job stays running under this instance's lock; the next
		// tick recovers it like a dead one.
		log.Error().Err(err).Msg("recording the job's end failed")
		ran.Status = storage.JobRunning
		return ran
	}
	log.Info().Str("status", ran.Status).Str("error", ran.Error).Msg("job ended")
	return ran
}

// record writes what a run reports it found or left behind: its provider
// ids and launch on the box, and its Record.
func (r *Runner) record(ctx context.Context, tx storage.Tx, job Job, box storage.Box, out Outcome, now time.Time) error {
	if out.Resources != nil {
		if err := storage.RecordBoxResources(ctx, tx, box.ID, *out.Resources, now); err != nil {
			return err
		}
	}
	if out.Launch != nil {
		l := *out.Launch
		if l.JobID == "" {
			l.JobID = job.ID
		}
		if l.LaunchedAt.IsZero() {
			l.LaunchedAt = now
		}
		if err := storage.RecordBoxLaunch(ctx, tx, box.ID, l, now); err != nil {
			return err
		}
	}
	if out.Record != nil {
		if err := out.Record(ctx, tx, now); err != nil {
			return fmt.Errorf("record the run's outcome: %w", err)
		}
	}
	return nil
}

// progress stores p as the job's latest progress. Failures are logged:
// progress is a report, never a reason to stop a run.
func (r *Runner) progress(ctx context.Context, jobID string, p Progress) {
	b, err := json.Marshal(p)
	if err != nil || len(b) > MaxProgressBytes {
		return
	}
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.SetJobProgress(ctx, tx, jobID, r.instance, b, r.clock.Now())
	}); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Str("job", jobID).Msg("storing progress failed")
	}
}

// touch records that this runner is alive with jobID running.
func (r *Runner) touch(ctx context.Context, jobID string) {
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.TouchWorker(ctx, tx, storage.Worker{WorkerID: r.instance, Version: r.version, LastSeenAt: r.clock.Now(), CurrentJobID: jobID})
	}); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Msg("recording the worker heartbeat failed")
	}
}

// withoutClaims runs fn while no job can be claimed.
func (r *Runner) withoutClaims(fn func() error) error {
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	return fn()
}
