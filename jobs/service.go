package jobs

import (
	"context"
	"errors"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/adminapi"
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
	admit  func(box storage.Box, action string) error
}

// AdmitError is an admission check's refusal (Service.SetAdmit): nothing
// was enqueued. Code is the admin API's error code; Message says why and
// what to do, naming configuration variables, never their values, so it
// may be shown to the operator as it is.
type AdmitError struct {
	Code, Message string
}

func (e *AdmitError) Error() string { return e.Message }

// SetAdmit installs check, which EnqueueRequest asks with the box and the
// action after the request's own checks and before anything is written;
// an error (an *AdmitError) refuses the request. Call it before the
// service is used.
func (s *Service) SetAdmit(check func(box storage.Box, action string) error) {
	s.admit = check
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
// box's id or name) and wakes the runner: EnqueueRequest without
// includeData.
func (s *Service) Enqueue(ctx context.Context, scopeKind, ref, action string) (Job, error) {
	return s.EnqueueRequest(ctx, Request{ScopeKind: scopeKind, Ref: ref, Action: action})
}

// Request is one converge request (adminRunPulumiConverge's body, or the
// console's form).
type Request struct {
	// ScopeKind must be ScopeBox; Ref is the box's id or name.
	ScopeKind, Ref string
	// Action is one of Actions.
	Action string
	// IncludeData extends a destroy to the box's data stack (its volume);
	// Confirmation must then be adminapi.DestroyDataPhrase of the box's
	// name or of Ref. Confirmation is not read without IncludeData.
	IncludeData  bool
	Confirmation string
}

// EnqueueRequest queues req and wakes the runner; the job keeps
// IncludeData, so a requeued or recovered job destroys what was confirmed
// and nothing more. The checks come in this order and a refused request
// writes nothing (docs/operations.md, "Jobs"): ErrUnknownScope;
// ErrUnknownAction; ErrIncludeDataAction (includeData on an action other
// than destroy); storage.ErrNotFound (no such box); ErrConfirmData (the
// phrase does not match); ErrNotConfigured; the admission check's error
// (SetAdmit); a *storage.ScopeBusyError naming the scope's live job.
func (s *Service) EnqueueRequest(ctx context.Context, req Request) (Job, error) {
	if req.ScopeKind != ScopeBox {
		return Job{}, ErrUnknownScope
	}
	if !ValidAction(req.Action) {
		return Job{}, ErrUnknownAction
	}
	if req.IncludeData && req.Action != ActionDestroy {
		return Job{}, ErrIncludeDataAction
	}
	box, err := storage.BoxByRef(ctx, s.db.Read, req.Ref)
	if err != nil {
		return Job{}, err
	}
	if req.IncludeData && req.Confirmation != adminapi.DestroyDataPhrase(box.Name) && req.Confirmation != adminapi.DestroyDataPhrase(req.Ref) {
		return Job{}, ErrConfirmData
	}
	if s.runner == nil {
		return Job{}, ErrNotConfigured
	}
	if s.admit != nil {
		if err := s.admit(box, req.Action); err != nil {
			return Job{}, err
		}
	}
	var job Job
	err = s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		job, err = storage.EnqueueJob(ctx, tx, ulid.Make().String(), ScopeBox, box.ID, req.Action, req.IncludeData, s.clock.Now())
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

// Wiper is an Executor that can wipe a box's state cache
// (adminClearPulumiStateCache). The Pulumi executor is one.
type Wiper interface {
	// Wipe removes the box's stacks from the state cache, with their
	// backups and history; the oracle stays. It is called only when no
	// job of the scope is alive.
	Wipe(ctx context.Context, box storage.Box) error
}

// WipeState wipes the state cache of the box ref names, or of every box
// when ref is "" (adminClearPulumiStateCache), after proving that no job
// of any of those scopes is alive; no job can be claimed meanwhile. It
// returns the boxes wiped. Errors: storage.ErrNotFound (no such box);
// ErrNotConfigured (no executor, or one that cannot wipe); a
// *storage.ScopeBusyError naming a live job (nothing is wiped); the
// executor's error (the boxes before the failing one are wiped).
func (s *Service) WipeState(ctx context.Context, ref string) ([]storage.Box, error) {
	var boxes []storage.Box
	if ref != "" {
		box, err := storage.BoxByRef(ctx, s.db.Read, ref)
		if err != nil {
			return nil, err
		}
		boxes = []storage.Box{box}
	} else {
		var err error
		if boxes, err = storage.ListBoxes(ctx, s.db.Read, ""); err != nil {
			return nil, err
		}
	}
	w, ok := s.exec.(Wiper)
	if s.runner == nil || !ok {
		return nil, ErrNotConfigured
	}
	var wiped []storage.Box
	err := s.runner.withoutClaims(func() error {
		for _, b := range boxes {
			live, err := storage.LiveJob(ctx, s.db.Read, ScopeBox, b.ID)
			if err == nil {
				return &storage.ScopeBusyError{JobID: live.ID}
			}
			if !errors.Is(err, storage.ErrNotFound) {
				return err
			}
		}
		for _, b := range boxes {
			if err := w.Wipe(ctx, b); err != nil {
				return err
			}
			wiped = append(wiped, b)
		}
		return nil
	})
	return wiped, err
}

// APIJob is the admin API's view of job j of box (its name).
func APIJob(j storage.Job, box string) adminapi.Job {
	return adminapi.Job{ID: j.ID, Scope: adminapi.Scope{Kind: j.ScopeKind, ID: j.ScopeID}, Box: box, Action: j.Action,
		Status: j.Status, LockedBy: j.LockedBy, LockedAt: j.LockedAt, Attempts: j.Attempts, Progress: j.Progress,
		ProgressSeq: j.ProgressSeq, IncludeData: j.IncludeData, Result: j.Result, Error: j.Error, CreatedAt: j.CreatedAt, QueuedAt: j.QueuedAt,
		StartedAt: j.StartedAt, FinishedAt: j.FinishedAt}
}
