package daemon

import (
	"context"
	"errors"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// defaultJobList is how many jobs adminListJobs returns without limit;
// limit's bounds are the parameter's `schema` tag (at most 500: the CLI's
// --watch polls it).
const defaultJobList = 50

// convergeOffMessage is the 503 converge_not_configured message.
const convergeOffMessage = "converge is not configured: set DIGITALOCEAN_PROVISION_TOKEN (docs/operations.md, \"Jobs\")"

// jobHandlers enqueue converge jobs, cancel held state locks and read
// jobs (docs/operations.md, "Jobs"). They hold the job service and the
// database.
type jobHandlers struct {
	db  *storage.DB
	svc *jobs.Service
	log zerolog.Logger
}

func (h *jobHandlers) register(o *operations) {
	handleOp(o, adminapi.OpRunPulumiConverge, h.converge)
	handleOp(o, adminapi.OpCancelPulumiState, h.cancel)
	handleOp(o, adminapi.OpClearPulumiState, h.wipe)
	handleOp(o, adminapi.OpListJobs, h.list)
	handleOp(o, adminapi.OpGetJob, h.get)
}

// jobError maps the job service's errors to answers.
func jobError(err error) error {
	var busy *storage.ScopeBusyError
	var admit *jobs.AdmitError
	switch {
	case errors.As(err, &admit):
		return agentAdmitAnswer(admit)
	case errors.As(err, &busy):
		return &apiError{status: http.StatusConflict, code: adminapi.CodeJobInProgress,
			message: "another update in progress: job " + busy.JobID, jobID: busy.JobID}
	case errors.Is(err, jobs.ErrUnknownAction):
		return fail(http.StatusUnprocessableEntity, "unknown_action", jobs.ErrUnknownAction.Error())
	case errors.Is(err, jobs.ErrUnknownScope):
		return fail(http.StatusUnprocessableEntity, "unknown_scope", jobs.ErrUnknownScope.Error())
	case errors.Is(err, jobs.ErrIncludeDataAction):
		return fail(http.StatusUnprocessableEntity, "include_data_not_destroy", jobs.ErrIncludeDataAction.Error()+"; nothing was enqueued")
	case errors.Is(err, jobs.ErrConfirmData):
		return fail(http.StatusUnprocessableEntity, "confirmation_mismatch", jobs.ErrConfirmData.Error())
	case errors.Is(err, storage.ErrNotFound):
		return errBoxNotFound
	case errors.Is(err, jobs.ErrNotConfigured):
		return fail(http.StatusServiceUnavailable, adminapi.CodeConvergeNotConfigured, convergeOffMessage)
	}
	return err
}

// converge checks the body's tags (docs/operations.md, "OpenAPI") with
// the codes it gave before them: a missing action first (400
// missing_action), then the scope (422 unknown_scope), then the action's
// value (422 unknown_action); then it enqueues.
func (h *jobHandlers) converge(ctx context.Context, req adminapi.ConvergeRequest) (adminapi.Job, error) {
	if v := apischema.Check(req); v != nil {
		switch {
		case req.Action == "":
			return adminapi.Job{}, fail(http.StatusBadRequest, "missing_action", "action is required (preview, up, refresh or destroy); there is no default")
		case topField(v.Field) == "scope":
			return adminapi.Job{}, jobError(jobs.ErrUnknownScope)
		default:
			return adminapi.Job{}, jobError(jobs.ErrUnknownAction)
		}
	}
	job, err := h.svc.EnqueueRequest(ctx, jobs.Request{ScopeKind: req.Scope.Kind, Ref: req.Scope.ID, Action: req.Action,
		IncludeData: req.IncludeData, Confirmation: req.Confirmation})
	if err != nil {
		return adminapi.Job{}, jobError(err)
	}
	box, err := storage.BoxByRef(ctx, h.db.Read, job.ScopeID)
	if err != nil {
		return adminapi.Job{}, err
	}
	return jobs.APIJob(job, box.Name), nil
}

// cancel checks the body's tags (422 unknown_scope, docs/operations.md,
// "OpenAPI") and cancels the scope's held lock.
func (h *jobHandlers) cancel(ctx context.Context, req adminapi.CancelStateRequest) (adminapi.CancelledState, error) {
	if apischema.Check(req) != nil {
		return adminapi.CancelledState{}, jobError(jobs.ErrUnknownScope)
	}
	box, err := h.svc.CancelLock(ctx, req.Scope.Kind, req.Scope.ID)
	var busy *storage.ScopeBusyError
	switch {
	case err == nil:
	case errors.As(err, &busy), errors.Is(err, jobs.ErrUnknownScope), errors.Is(err, storage.ErrNotFound), errors.Is(err, jobs.ErrNotConfigured):
		return adminapi.CancelledState{}, jobError(err)
	default:
		// The executor's error may name paths or backend details: logged,
		// not returned.
		h.log.Error().Err(err).Str("box", box.Name).Msg("cancelling a held state lock failed")
		return adminapi.CancelledState{}, fail(http.StatusBadGateway, "cancel_failed", "cancelling the held lock failed; the daemon log says why")
	}
	return adminapi.CancelledState{Scope: adminapi.Scope{Kind: jobs.ScopeBox, ID: box.ID}, Box: box.Name}, nil
}

// wipe removes one box's stacks (or every box's) from the Pulumi state
// cache after the typed confirmation; refused while a job of the scope is
// alive (docs/operations.md, "Jobs").
func (h *jobHandlers) wipe(ctx context.Context, req adminapi.ClearStateRequest) (adminapi.ClearedState, error) {
	want := adminapi.WipeAllPhrase
	if req.Box != "" {
		want = adminapi.WipePhrase(req.Box)
	}
	if req.Confirmation != want {
		return adminapi.ClearedState{}, fail(http.StatusUnprocessableEntity, "confirmation_mismatch",
			`confirmation must be exactly "wipe " followed by the box, or "wipe all" without a box; nothing was wiped`)
	}
	boxes, err := h.svc.WipeState(ctx, req.Box)
	out := adminapi.ClearedState{Boxes: make([]string, 0, len(boxes))}
	for _, b := range boxes {
		out.Boxes = append(out.Boxes, b.Name)
	}
	var busy *storage.ScopeBusyError
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &busy), errors.Is(err, storage.ErrNotFound), errors.Is(err, jobs.ErrNotConfigured):
		return adminapi.ClearedState{}, jobError(err)
	}
	// The engine's error may name paths or backend details: logged, not
	// returned.
	h.log.Error().Err(err).Strs("wiped", out.Boxes).Msg("wiping the Pulumi state cache failed")
	return adminapi.ClearedState{}, fail(http.StatusBadGateway, "wipe_failed", "wiping the state cache failed; the daemon log says why")
}

func (h *jobHandlers) list(ctx context.Context, req adminapi.ListJobsRequest) (adminapi.JobList, error) {
	limit := req.Limit
	if limit == 0 {
		limit = defaultJobList
	}
	// limit's range and status's values are the parameters' `schema`
	// tags, checked before the handler (checkParams).
	names, err := boxNames(ctx, h.db)
	if err != nil {
		return adminapi.JobList{}, err
	}
	f := storage.JobFilter{Status: req.Status, Limit: int(limit)}
	if req.Box != "" {
		b, err := storage.BoxByRef(ctx, h.db.Read, req.Box)
		if errors.Is(err, storage.ErrNotFound) {
			return adminapi.JobList{}, errBoxNotFound
		}
		if err != nil {
			return adminapi.JobList{}, err
		}
		f.ScopeID = b.ID
	}
	list, err := storage.ListJobs(ctx, h.db.Read, f)
	if err != nil {
		return adminapi.JobList{}, err
	}
	workers, err := storage.ListWorkers(ctx, h.db.Read)
	if err != nil {
		return adminapi.JobList{}, err
	}
	rollouts, err := listRollouts(ctx, h.db)
	if err != nil {
		return adminapi.JobList{}, err
	}
	out := adminapi.JobList{Jobs: make([]adminapi.Job, 0, len(list)), Configured: h.svc.Configured(), Workers: make([]adminapi.Worker, 0, len(workers)),
		Rollouts: rollouts}
	for _, j := range list {
		out.Jobs = append(out.Jobs, jobs.APIJob(j, names[j.ScopeID]))
	}
	for _, w := range workers {
		out.Workers = append(out.Workers, adminapi.Worker{WorkerID: w.WorkerID, Version: w.Version, LastSeenAt: w.LastSeenAt, CurrentJobID: w.CurrentJobID})
	}
	return out, nil
}

func (h *jobHandlers) get(ctx context.Context, req adminapi.GetJobRequest) (adminapi.Job, error) {
	j, err := storage.JobByID(ctx, h.db.Read, req.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.Job{}, fail(http.StatusNotFound, "not_found", "no such job")
	}
	if err != nil {
		return adminapi.Job{}, err
	}
	names, err := boxNames(ctx, h.db)
	if err != nil {
		return adminapi.Job{}, err
	}
	return jobs.APIJob(j, names[j.ScopeID]), nil
}

// boxNames maps box ids to names.
func boxNames(ctx context.Context, db *storage.DB) (map[string]string, error) {
	list, err := storage.ListBoxes(ctx, db.Read, "")
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(list))
	for _, b := range list {
		m[b.ID] = b.Name
	}
	return m, nil
}
