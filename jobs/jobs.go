// Package jobs is the converge job queue: one lane that runs preview, up,
// refresh and destroy jobs on boxes through an Executor, under a lease
// (docs/operations.md, "Jobs"). The Runner is the lane (a background loop,
// woken on enqueue, without timers while the queue is empty); the Watch
// warns when queued work finds no worker; the Service is what the admin API
// calls to enqueue and to cancel a held state lock.
//
// The Executor is the seam to the engine (the Pulumi Automation API in
// production): this package knows nothing of Pulumi.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// The queue's rules (docs/operations.md, "Jobs"); the numbers are the
// managed worker's contract.
const (
	// LeaseDuration bounds one run of a job: a running job whose locked_at
	// is older than this returns to queued (or fails with "worker lost").
	// In this process the runner cancels the run at this deadline and
	// waits for it to stop before requeueing, so two runs of one scope
	// never overlap. Progress does not renew it.
	LeaseDuration = 20 * time.Minute
	// MaxAttempts is how many claims a job gets: a run that ends without an
	// outcome is requeued while attempts < MaxAttempts, else the job fails
	// with "worker lost".
	MaxAttempts = 3
	// OfflineAfter is how long jobs may wait queued with no worker seen
	// before the Watch records a "managed worker offline" warning.
	OfflineAfter = 5 * time.Minute
	// OfflineRepeat suppresses repeats of that warning.
	OfflineRepeat = 30 * time.Minute
	// WorkerHeartbeat is how often the runner records that it is alive
	// while a job runs, so a long run does not look like an offline worker
	// to the Watch.
	WorkerHeartbeat = 30 * time.Second
	// IdleWorkerHeartbeat is how often an idle runner records that it is
	// alive (and once when it starts), so the lane's availability is
	// visible with an empty queue: a worker row older than OfflineAfter
	// means the lane is gone, whatever the queue holds. Under OfflineAfter
	// with a minute to spare; one timer every 4 minutes keeps an idle
	// daemon quiet (docs/operations.md, "Background loops").
	IdleWorkerHeartbeat = 4 * time.Minute
	// RecoverRetry is the pause before a failed crash recovery (or a
	// database fault) is tried again: the lane stays closed meanwhile.
	RecoverRetry = time.Minute
	// MaxRecoverPerTick caps the dead jobs one tick hands to Recover; the
	// rest are recovered by the next tick, before any claim.
	MaxRecoverPerTick = 10
	// MaxProgressBytes bounds one stored progress report (JSON); a larger
	// one is dropped (the next one replaces it anyway).
	MaxProgressBytes = 16 << 10
	// MaxResultBytes bounds a job's stored result (JSON); a larger result
	// fails the job with a clear error.
	MaxResultBytes = 256 << 10
	// MaxErrorBytes bounds a job's stored error text.
	MaxErrorBytes = 2000
	// MaxErrorDetailBytes bounds a DetailedError's detail in the failed
	// finish step: a progress report's bound, enough for Pulumi's output
	// of a failed up (a few KiB).
	MaxErrorDetailBytes = MaxProgressBytes
)

// DetailedError is an executor error whose Error is the diagnostic that
// matters (the job's error) and whose Detail is the raw output it was
// drawn from, kept in the failed finish step of the job's journal
// (docs/operations.md, "Jobs": a run's error). pulumiexec.RunError is one.
type DetailedError interface {
	error
	Detail() string
}

// Actions: the Pulumi CLI's four verbs. A converge request must name one;
// there is no default.
const (
	ActionPreview = "preview"
	ActionUp      = "up"
	ActionRefresh = "refresh"
	ActionDestroy = "destroy"
)

// Actions lists every action, in the order the CLI shows them.
var Actions = []string{ActionPreview, ActionUp, ActionRefresh, ActionDestroy}

// ValidAction reports whether a is one of Actions.
func ValidAction(a string) bool {
	for _, x := range Actions {
		if a == x {
			return true
		}
	}
	return false
}

// ScopeBox is the one scope kind: a box (docs/operations.md, "Boxes").
const ScopeBox = "box"

// Lifecycle event of the offline warning (docs/operations.md, "Jobs").
const (
	// OfflineKind and OfflineReason are the warning's kind and reason. It is
	// a platform event (no environment): the lane is the platform's, not a
	// box's environment's.
	OfflineKind   = "reaper-warning"
	OfflineReason = "provider"
	// OfflineMessage is its message.
	OfflineMessage = "managed worker offline"
	// OfflineIDPrefix starts the warning's stable ids
	// (OfflineIDPrefix + unix milliseconds).
	OfflineIDPrefix = "jobs-worker-offline:"
)

// Errors of the Service.
var (
	// ErrNotConfigured: no executor is configured, so nothing can run;
	// nothing is enqueued. Converge needs DIGITALOCEAN_PROVISION_TOKEN.
	ErrNotConfigured = errors.New("converge is not configured: set DIGITALOCEAN_PROVISION_TOKEN")
	// ErrUnknownAction: the action is not one of Actions.
	ErrUnknownAction = errors.New("action must be one of preview, up, refresh, destroy")
	// ErrUnknownScope: the scope kind is not "box".
	ErrUnknownScope = errors.New(`scope kind must be "box"`)
	// ErrIncludeDataAction: includeData was asked of an action other than
	// destroy; nothing is enqueued.
	ErrIncludeDataAction = errors.New("includeData applies to destroy only")
	// ErrConfirmData: a destroy with includeData whose confirmation is not
	// the phrase "destroy data <box>"; nothing is enqueued
	// (docs/operations.md, "Converge").
	ErrConfirmData = errors.New(`destroying a box's data needs the confirmation "destroy data <box>"; nothing was enqueued`)
)

// Job is a queued, running or finished job (a jobs row).
type Job = storage.Job

// Progress is one progress report of a running job, stored as the job's
// latest progress (docs/operations.md, "Jobs"). It does not renew the
// lease.
type Progress struct {
	// Message is a one-line summary for people.
	Message string `json:"message,omitempty"`
	// Resource and Op name the step being reported (a resource's URN or
	// name, and create/update/delete/same/import/read).
	Resource string `json:"resource,omitempty"`
	Op       string `json:"op,omitempty"`
	// Counts are the steps done so far by op.
	Counts map[string]int `json:"counts,omitempty"`
}

// Outcome is what a successful run produced. It is recorded in the same
// transaction that marks the job succeeded.
type Outcome struct {
	// Summary is the job's result shown by `chalupa admin job show` (JSON;
	// nil for none), at most MaxResultBytes.
	Summary json.RawMessage
	// Resources, when set, are the provider ids the run found or created:
	// recorded on the box (the oracle). Resources, Launch and Record are
	// applied for a failed run too, when it sets them: what it left behind
	// exists (an up whose key delivery failed leaves a billable droplet).
	Resources *storage.BoxResources
	// Launch, set by a successful up, is the launch result kept on the box
	// after the droplet is gone.
	Launch *storage.BoxLaunch
	// Record, when set, writes what the run's success means beyond the
	// box (a launched lifecycle event and its deployment; a deployment
	// ended by a destroy) in the same transaction that marks the job
	// succeeded, at now. Its error rolls the whole transaction back (a
	// database fault): the job stays running and is recovered like a dead
	// one, so it must refuse only what cannot be written.
	Record func(ctx context.Context, tx storage.Tx, now time.Time) error
}

// Preparer is an Executor that must set up before the lane's first
// recovery or claim (the converge executor restores missing stacks from
// their checkpoints). The runner calls Prepare at the start of each tick
// until it succeeds; while it fails the lane stays closed.
type Preparer interface {
	// Prepare sets up; an error is retried after RecoverRetry.
	Prepare(ctx context.Context) error
}

// Executor runs jobs: the converge engine behind the queue. The runner
// calls one method at a time.
type Executor interface {
	// Execute runs job's action on box, reporting progress as it goes,
	// until done or ctx ends (the lease deadline, or shutdown); it must
	// stop promptly when ctx ends, and the runner waits for it to return.
	// An error fails the job with the error's text (no secrets in it).
	Execute(ctx context.Context, job Job, box storage.Box, progress func(Progress)) (Outcome, error)
	// Recover settles a job whose process died while running it, or whose
	// run the lease deadline cancelled (it may have been killed
	// mid-operation), before anything else runs: cancel the engine's lock for the scope and find
	// what exists at the provider. The returned resources (nil: unknown)
	// are recorded on the box; then the job is requeued or failed by the
	// attempt rule. An error keeps the lane closed until it succeeds.
	Recover(ctx context.Context, job Job, box storage.Box) (*storage.BoxResources, error)
	// CancelLock cancels the engine's held lock for box
	// (adminCancelPulumiState); it is called only when no job of the scope
	// is alive.
	CancelLock(ctx context.Context, box storage.Box) error
}

// truncate bounds s to n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
