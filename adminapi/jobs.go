package adminapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Converge and job operation ids (docs/operations.md, "Jobs"). The two
// pulumi-state operations keep their established names and paths under
// /admin-api, so scripts and MCP clients that already call them keep
// working; the job reads sit with the other admin reads under /api/admin.
const (
	OpRunPulumiConverge = "adminRunPulumiConverge"
	OpCancelPulumiState = "adminCancelPulumiState"
	OpClearPulumiState  = "adminClearPulumiStateCache"
	OpListJobs          = "adminListJobs"
	OpGetJob            = "adminGetJob"
	OpDiagnoseJob       = "adminDiagnoseJob"
	pathConverge        = "/admin-api/pulumi-state/converge"
	pathCancelState     = "/admin-api/pulumi-state/cancel"
	pathStateCache      = "/admin-api/pulumi-state/cache"
	pathJobs            = "/api/admin/jobs"
	pathJob             = "/api/admin/jobs/:id"
	pathJobDoctor       = "/api/admin/jobs/:id/doctor"
)

// Error codes of the converge operations.
const (
	// CodeJobInProgress: the scope has a queued or running job (409; the
	// error body's jobId names it).
	CodeJobInProgress = "job_in_progress"
	// CodeConvergeNotConfigured: no converge executor (503; set
	// DIGITALOCEAN_PROVISION_TOKEN).
	CodeConvergeNotConfigured = "converge_not_configured"
)

var jobOperations = []Operation{
	{ID: OpRunPulumiConverge, MCP: MCPPolicy{Access: MCPDestructive, Tool: "chalupa_admin_pulumi_converge", Confirm: "{action} {scope.id}", ConfirmActions: []string{"up", "destroy"}}, Method: methodPost, Path: pathConverge, Status: http.StatusAccepted, Mutates: true,
		Request: typeOf[ConvergeRequest](), Response: typeOf[Job](),
		Summary: `enqueue a converge job: {"scope":{"kind":"box","id"},"action":"preview|up|refresh|destroy"} (action required); a destroy keeps the data volume unless "includeData":true with "confirmation":"destroy data <box>"`},
	{ID: OpCancelPulumiState, MCP: MCPPolicy{Access: MCPDestructive, Tool: "chalupa_admin_pulumi_cancel_state", Confirm: "cancel {scope.id}"}, Method: methodPost, Path: pathCancelState, Status: http.StatusOK, Mutates: true,
		Request: typeOf[CancelStateRequest](), Response: typeOf[CancelledState](),
		Summary: `cancel a held state lock: {"scope":{"kind":"box","id"}}; refused (409) while a job of the scope is alive`},
	{ID: OpClearPulumiState, MCP: MCPPolicy{Access: MCPDestructive, Tool: "chalupa_admin_pulumi_wipe_cache", Confirm: "wipe {box}", ConfirmBody: "confirmation"}, Method: methodDelete, Path: pathStateCache, Status: http.StatusOK, Mutates: true,
		Request: typeOf[ClearStateRequest](), Response: typeOf[ClearedState](),
		Summary: `wipe the Pulumi state cache of one box (?box=) or of every box; the oracle stays and the next up adopts; refused (409) while a job of the scope is alive`},
	{ID: OpListJobs, MCP: mcpRead, Method: methodGet, Path: pathJobs, Status: http.StatusOK,
		Request: typeOf[ListJobsRequest](), Response: typeOf[JobList](),
		Summary: "list converge jobs, newest first, and the job runners seen"},
	{ID: OpGetJob, MCP: mcpRead, Method: methodGet, Path: pathJob, Status: http.StatusOK,
		Request: typeOf[GetJobRequest](), Response: typeOf[Job](),
		Summary: "one converge job with its latest progress and result"},
	{ID: OpDiagnoseJob, MCP: mcpRead, Method: methodGet, Path: pathJobDoctor, Status: http.StatusOK,
		Request: typeOf[DiagnoseJobRequest](), Response: typeOf[JobDiagnosis](),
		Summary: "diagnose a converge job, read-only: job, lease, both stacks' locks, pending operations and checkpoints, the provider's resources by the box's tag, and one recommended next action"},
}

// Scope names what a job converges: Kind "box" and the box's ID (its
// name is accepted too).
//
// In a request body Kind is required and must be "box" (422
// unknown_scope, docs/operations.md "OpenAPI").
type Scope struct {
	Kind string `json:"kind" schema:"required,enum=box"`
	ID   string `json:"id"`
}

// ConvergeRequest is the body of adminRunPulumiConverge. Action is
// required, with no default: 400 missing_action when absent, 422
// unknown_action when not one of preview, up, refresh, destroy.
// IncludeData extends a destroy to the box's data stack (its volume, which
// a destroy otherwise keeps); Confirmation must then be
// DestroyDataPhrase of the box (by name, or as Scope.ID names it), else
// 422 confirmation_mismatch, and on any other action 422
// include_data_not_destroy; nothing is enqueued (docs/operations.md,
// "Converge"). Confirmation is not read without IncludeData. The tags
// declare the scope and action rules (jobs.Actions; docs/operations.md,
// "OpenAPI").
type ConvergeRequest struct {
	Scope        Scope  `json:"scope" schema:"required"`
	Action       string `json:"action" schema:"required,enum=preview|up|refresh|destroy"`
	IncludeData  bool   `json:"includeData,omitempty"`
	Confirmation string `json:"confirmation,omitempty"`
}

// DestroyDataPhrase is the typed confirmation a destroy with includeData
// requires: "destroy data <box>".
func DestroyDataPhrase(box string) string { return "destroy data " + box }

// CancelStateRequest is the body of adminCancelPulumiState: the scope is
// required (422 unknown_scope without it).
type CancelStateRequest struct {
	Scope Scope `json:"scope" schema:"required"`
}

// CancelledState answers adminCancelPulumiState: the scope's lock was
// cancelled (or was not held).
type CancelledState struct {
	Scope Scope  `json:"scope"`
	Box   string `json:"box"`
}

// ConvergePhrase is the typed confirmation of a converge action on a
// box: "<action> <box>" (for example "destroy box-1"), the MCP policy's
// template of adminRunPulumiConverge with the box's name as its scope id.
// The console asks for it before a destroy (docs/operations.md, "Console").
func ConvergePhrase(action, box string) string { return action + " " + box }

// WipeAllPhrase is the confirmation adminClearPulumiStateCache requires
// for every box; WipePhrase(box) the one for one box.
const WipeAllPhrase = "wipe all"

// WipePhrase is the confirmation adminClearPulumiStateCache requires for
// one box: "wipe <box>".
func WipePhrase(box string) string { return "wipe " + box }

// ClearStateRequest is adminClearPulumiStateCache's request: Box (query
// box, id or name; "" for every box) and Confirmation (a query parameter
// too: a DELETE carries no body), which must be WipePhrase(Box), or
// WipeAllPhrase for every box.
type ClearStateRequest struct {
	Box          string `query:"box" json:"-"`
	Confirmation string `query:"confirmation" json:"-"`
}

// ClearedState answers adminClearPulumiStateCache: the boxes whose stacks
// were removed from the state cache, by name.
type ClearedState struct {
	Boxes []string `json:"boxes"`
}

// ListJobsRequest filters adminListJobs: Status keeps one status, Box one
// box's jobs (id or name), Limit the newest N (default 50, at most 500).
type ListJobsRequest struct {
	Status string `query:"status" json:"-" schema:"enum=queued|running|succeeded|failed|cancelled"`
	Box    string `query:"box" json:"-"`
	Limit  int64  `query:"limit" json:"-" schema:"minimum=0,maximum=500"`
}

// GetJobRequest names a job.
type GetJobRequest struct {
	ID string `path:"id" json:"-"`
}

// Job is one converge job. Status is queued, running, succeeded, failed
// or cancelled; LockedBy is the process instance running it; Progress is
// its latest progress report (ProgressSeq counts them) and Result a
// successful run's result; Error why it failed or why its last attempt
// ended.
type Job struct {
	ID          string          `json:"id"`
	Scope       Scope           `json:"scope"`
	Box         string          `json:"box"`
	Action      string          `json:"action"`
	Status      string          `json:"status"`
	LockedBy    string          `json:"lockedBy"`
	LockedAt    time.Time       `json:"lockedAt"`
	Attempts    int             `json:"attempts"`
	Progress    json.RawMessage `json:"progress,omitempty" schema:"object"`
	ProgressSeq int64           `json:"progressSeq"`
	// IncludeData is true for a destroy that also destroys the box's data
	// stack (confirmed when it was enqueued).
	IncludeData bool            `json:"includeData"`
	Result      json.RawMessage `json:"result,omitempty" schema:"object"`
	Error       string          `json:"error"`
	CreatedAt   time.Time       `json:"createdAt"`
	QueuedAt    time.Time       `json:"queuedAt"`
	StartedAt   time.Time       `json:"startedAt"`
	FinishedAt  time.Time       `json:"finishedAt"`
}

// Done reports whether the job has ended (succeeded, failed, cancelled).
func (j Job) Done() bool { return j.Status != "queued" && j.Status != "running" }

// Worker is a job runner's reported state (current job is a report, not
// ownership).
type Worker struct {
	WorkerID     string    `json:"workerId"`
	Version      string    `json:"version"`
	LastSeenAt   time.Time `json:"lastSeenAt"`
	CurrentJobID string    `json:"currentJobId"`
}

// JobList answers adminListJobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
	// Configured is false when no converge executor is configured.
	Configured bool     `json:"configured"`
	Workers    []Worker `json:"workers"`
	// Rollouts are the newest agent rollouts (at most 10), which run in
	// the daemon beside the converge lane (docs/operations.md, "Agent
	// install", under Upgrade).
	Rollouts []AgentRollout `json:"rollouts,omitempty"`
}

// RunPulumiConverge calls adminRunPulumiConverge and returns the queued
// job. Errors: an *APIError with 400 missing_action, 422 unknown_scope,
// unknown_action, include_data_not_destroy or confirmation_mismatch, 404
// not_found, 503 converge_not_configured, or 409
// job_in_progress (JobID names the live job).
func (c *Client) RunPulumiConverge(ctx context.Context, req ConvergeRequest) (Job, error) {
	return call[Job](ctx, c, OpRunPulumiConverge, req)
}

// CancelPulumiState calls adminCancelPulumiState. Errors: an *APIError
// with 404 not_found, 503 converge_not_configured, or 409 job_in_progress
// ("another update in progress"; JobID names the live job).
func (c *Client) CancelPulumiState(ctx context.Context, req CancelStateRequest) (CancelledState, error) {
	return call[CancelledState](ctx, c, OpCancelPulumiState, req)
}

// ClearPulumiStateCache calls adminClearPulumiStateCache. Errors: an
// *APIError with 422 confirmation_mismatch, 404 not_found, 503
// converge_not_configured, or 409 job_in_progress (JobID names the live
// job; nothing was wiped).
func (c *Client) ClearPulumiStateCache(ctx context.Context, req ClearStateRequest) (ClearedState, error) {
	return call[ClearedState](ctx, c, OpClearPulumiState, req)
}

// ListJobs calls adminListJobs.
func (c *Client) ListJobs(ctx context.Context, req ListJobsRequest) (JobList, error) {
	return call[JobList](ctx, c, OpListJobs, req)
}

// GetJob calls adminGetJob. Errors: an *APIError with 404 not_found.
func (c *Client) GetJob(ctx context.Context, id string) (Job, error) {
	return call[Job](ctx, c, OpGetJob, GetJobRequest{ID: id})
}
