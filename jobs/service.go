package jobs

import (
	"context"
	"errors"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/storage"
)

// Service is what the admin API calls: enqueue a converge job, cancel a
// held state lock. Build it with NewService.
type Service struct {
	db     *storage.DB
	clock  clockwork.Clock
	runner *Runner // nil: no executor configured
	exec   Executor
	watch  *Watch
}

// NewService returns the Service over runner (nil when no executor is
// configured: converge requests then answer ErrNotConfigured) and watch
// (nil: not notified).
func NewService(db *storage.DB, clock clockwork.Clock, runner *Runner, watch *Watch) *Service {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	s := &Service{db: db, clock: clock, runner: runner, watch: watch}
	if runner != nil {
		s.exec = runner.exec
	}
	return s
}

// Configured reports whether an executor is configured.
func (s *Service) Configured() bool { return s.runner != nil }

// Enqueue queues action on the box of the scope (kind ScopeBox; ref the
// box's id or name) and wakes the runner. The checks come in this order and
// a refused request writes nothing: ErrUnknownScope; ErrUnknownAction;
// storage.ErrNotFound (no such box); ErrNotConfigured; a
// *storage.ScopeBusyError naming the scope's live job
// (docs/operations.md, "Jobs").
func (s *Service) Enqueue(ctx context.Context, scopeKind, ref, action string) (Job, error) {
	if scopeKind != ScopeBox {
		return Job{}, ErrUnknownScope
	}
	if !ValidAction(action) {
		return Job{}, ErrUnknownAction
	}
	box, err := storage.BoxByRef(ctx, s.db.Read, ref)
	if err != nil {
		return Job{}, err
	}
	if s.runner == nil {
		return Job{}, ErrNotConfigured
	}
	var job Job
	err = s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		job, err = storage.EnqueueJob(ctx, tx, ulid.Make().String(), ScopeBox, box.ID, action, s.clock.Now())
		return err
	})
	if err != nil {
		return Job{}, err
	}
	s.runner.Notify()
	if s.watch != nil {
		s.watch.Notify()
	}
	return job, nil
}

// CancelLock cancels the engine's held state lock for the box ref names
// (adminCancelPulumiState), but only after proving that no job of that
// scope is alive: no job can be claimed meanwhile. Errors:
// storage.ErrNotFound (no such box); ErrNotConfigured; a
// *storage.ScopeBusyError naming the live job ("another update in
// progress"); the executor's error.
func (s *Service) CancelLock(ctx context.Context, scopeKind, ref string) (storage.Box, error) {
	if scopeKind != ScopeBox {
		return storage.Box{}, ErrUnknownScope
	}
	box, err := storage.BoxByRef(ctx, s.db.Read, ref)
	if err != nil {
		return storage.Box{}, err
	}
	if s.runner == nil {
		return storage.Box{}, ErrNotConfigured
	}
	err = s.runner.withoutClaims(func() error {
		live, err := storage.LiveJob(ctx, s.db.Read, ScopeBox, box.ID)
		if err == nil {
			return &storage.ScopeBusyError{JobID: live.ID}
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		return s.exec.CancelLock(ctx, box)
	})
	return box, err
}
