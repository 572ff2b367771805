package adminapi

import (
	"context"
	"encoding/json"
	"time"
)

// DiagnoseJobRequest names the job adminDiagnoseJob reads.
type DiagnoseJobRequest struct {
	ID string `path:"id" json:"-"`
}

// The recommended next actions of adminDiagnoseJob, one per diagnosis
// (docs/operations.md, "Job doctor").
const (
	// DoctorNothing: nothing to do (the job succeeded and everything
	// agrees, or it is running or waiting its turn in a live lane).
	DoctorNothing = "nothing"
	// DoctorResumeLane: the job lane is paused while a job is queued or
	// was left running by a stopped process; resuming it runs crash
	// recovery (cancel the lock, clear pending operations, adopt what
	// exists) or the queued job.
	DoctorResumeLane = "resume-lane"
	// DoctorCancelLock: a stack lock is held by a process that is gone
	// and no job is live.
	DoctorCancelLock = "cancel-lock"
	// DoctorWipeThenUp: a stack's state disagrees with what exists (a
	// pending operation, or a resource the oracle records that the state
	// lacks): wipe it so the next up adopts.
	DoctorWipeThenUp = "wipe-then-up"
	// DoctorRefreshThenUp: the state records a resource the provider no
	// longer has, or the job failed with everything else agreeing.
	DoctorRefreshThenUp = "refresh-then-up"
	// DoctorReconcileHost: the provider holds a billable resource carrying
	// the box's tag that neither the stacks nor the box record, or more
	// than one of a kind: remove the extra one at DigitalOcean.
	DoctorReconcileHost = "reconcile-billable-host"
	// DoctorCheckProvider: the provider could not be read (its kind in
	// ProviderInventory.ErrorKind), so nothing that depends on what
	// DigitalOcean holds can be judged: fix the provision token or the
	// network, then diagnose again.
	DoctorCheckProvider = "check-provider"
	// DoctorCheckState: a stack's state or locks could not be read (its
	// kind in StackDiagnosis.ErrorKind), so nothing that depends on what
	// the stacks record can be judged: fix the state backend, then
	// diagnose again.
	DoctorCheckState = "check-state"
)

// JobDiagnosis answers adminDiagnoseJob: what the job, its lease, the
// box's two stacks and the provider say, side by side, and one recommended
// next action. Reading it changes nothing.
type JobDiagnosis struct {
	Job   Job      `json:"job"`
	Lease JobLease `json:"lease"`
	// Steps is the job's step journal, oldest first: every claim,
	// progress report, release and finish, the newest 200 kept
	// (docs/operations.md, "Jobs").
	Steps []JobStep `json:"steps"`
	// Recorded are the provider ids the box records (the oracle).
	Recorded ProviderIDs `json:"recorded"`
	// Stacks are the box's data and compute stacks, in that order.
	Stacks []StackDiagnosis `json:"stacks"`
	// Provider is what DigitalOcean holds under the box's tag.
	Provider ProviderInventory `json:"provider"`
	// Recommendation is the one next action (docs/operations.md, "Job
	// doctor").
	Recommendation Recommendation `json:"recommendation"`
	// CheckedAt is when the daemon read all of this.
	CheckedAt time.Time `json:"checkedAt"`
}

// JobStep is one entry of a job's step journal (docs/operations.md,
// "Jobs"): Kind is claimed, progress, released (the attempt rule requeued
// or failed a run that ended without an outcome) or finished; Status and
// Attempt are the job's after the step; Worker is the instance id that
// held it.
type JobStep struct {
	Seq     int64     `json:"seq"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Status  string    `json:"status"`
	Attempt int       `json:"attempt"`
	Worker  string    `json:"worker"`
	// Progress is a progress step's report (JSON); absent otherwise.
	Progress json.RawMessage `json:"progress,omitempty" schema:"object"`
	// Reason is a release's reason or a failed finish's error; absent
	// otherwise.
	Reason string `json:"reason,omitempty"`
}

// JobLease is the job's lease as the daemon judges it.
type JobLease struct {
	// Holder is the instance id holding the job ("" unless running);
	// HolderIsThisDaemon is true when it is this daemon's lane (the run is
	// live), false for a process that is gone.
	Holder             string `json:"holder"`
	HolderIsThisDaemon bool   `json:"holderIsThisDaemon"`
	// AgeSeconds is the time since the claim (0 unless running);
	// ExpiresAt the claim plus the 20-minute bound; Expired whether that
	// has passed.
	AgeSeconds int64     `json:"ageSeconds"`
	ExpiresAt  time.Time `json:"expiresAt"`
	Expired    bool      `json:"expired"`
	// LanePaused is true while the jobs loop is paused (`serve
	// --pause-loops jobs`, `chalupa admin loops pause jobs`).
	LanePaused bool `json:"lanePaused"`
	// MaxAttempts is the attempt bound (the job fails at this many).
	MaxAttempts int `json:"maxAttempts"`
}

// ProviderIDs are a droplet id, a firewall id and a volume id ("" for
// none).
type ProviderIDs struct {
	DropletID  string `json:"dropletId"`
	FirewallID string `json:"firewallId"`
	VolumeID   string `json:"volumeId"`
}

// StackDiagnosis is one stack: its lock, pending operations, the ids its
// state records and its newest checkpoint.
type StackDiagnosis struct {
	Stack string `json:"stack"`
	// Role is "data" or "compute".
	Role string `json:"role"`
	// Exists is false when the backend has no such stack (never run, or
	// wiped).
	Exists bool `json:"exists"`
	// Locks are the locks held on the stack (normally none or one);
	// LocksUnknown is true when the backend's locks cannot be read (not a
	// file:// backend).
	Locks        []StackLockInfo `json:"locks"`
	LocksUnknown bool            `json:"locksUnknown"`
	// Pending are the operations an update began and did not finish.
	Pending []PendingOperation `json:"pending"`
	// State are the provider ids the stack's state records.
	State ProviderIDs `json:"state"`
	// CheckpointVersion is the newest checkpoint's version (0: none) and
	// CheckpointAt when it was saved.
	CheckpointVersion int64     `json:"checkpointVersion"`
	CheckpointAt      time.Time `json:"checkpointAt"`
	// Unavailable is true when the stack's state or locks could not be
	// read: Exists, State and Pending then say nothing (nor Locks, when
	// LocksUnknown); the checkpoint is still the database's. ErrorKind is
	// why: backend_unreadable, state_corrupt or pulumi_failed
	// (docs/operations.md, "Job doctor"), never a path or the CLI's text.
	Unavailable bool   `json:"unavailable,omitempty"`
	ErrorKind   string `json:"errorKind,omitempty"`
}

// StackLockInfo is one held stack lock: the holding pulumi process, its
// host, since when (AgeSeconds, seconds) and whether that process is still
// alive on this host.
type StackLockInfo struct {
	PID         int       `json:"pid"`
	Hostname    string    `json:"hostname"`
	AcquiredAt  time.Time `json:"acquiredAt"`
	AgeSeconds  int64     `json:"ageSeconds"`
	HolderAlive bool      `json:"holderAlive"`
}

// PendingOperation is an unfinished operation in a stack's state: Kind
// (creating, updating, deleting, …), the resource's Type and Name, and
// its provider ID ("" for a create that had not answered).
type PendingOperation struct {
	Kind string `json:"kind"`
	Type string `json:"type"`
	Name string `json:"name"`
	ID   string `json:"id"`
}

// ProviderInventory is what DigitalOcean holds carrying Tag
// (chalupa:box:<box>), read with list calls only.
type ProviderInventory struct {
	Tag       string             `json:"tag"`
	Droplets  []ProviderResource `json:"droplets"`
	Volumes   []ProviderResource `json:"volumes"`
	Firewalls []ProviderResource `json:"firewalls"`
	// Unavailable is true when the provider could not be read: the lists
	// are then empty and say nothing. ErrorKind is why, one of the
	// DigitalOcean client's error kinds (token_refused, token_lacks_scope,
	// rate_limited, provider_error, not_found; docs/operations.md,
	// "DigitalOcean API"), never a token or URL.
	Unavailable bool   `json:"unavailable,omitempty"`
	ErrorKind   string `json:"errorKind,omitempty"`
}

// ProviderResource is one resource at the provider: its id, name and
// status ("" where the provider reports none).
type ProviderResource struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// Recommendation is the doctor's one next action: Action (a Doctor*
// constant), Symptom (the table row that matched), Reason (why, in words)
// and Commands (the exact commands to run, in order; none for nothing to
// do beyond following the job).
type Recommendation struct {
	Action   string   `json:"action"`
	Symptom  string   `json:"symptom"`
	Reason   string   `json:"reason"`
	Commands []string `json:"commands"`
}

// DiagnoseJob calls adminDiagnoseJob. Errors: an *APIError with 404
// not_found (no such job, or its box is gone), 503
// converge_not_configured, or 502 doctor_failed (the executor could not
// inspect the box at all; the daemon log says why). A provider or a stack
// that cannot be read is no error: the diagnosis marks it unavailable.
func (c *Client) DiagnoseJob(ctx context.Context, id string) (JobDiagnosis, error) {
	return call[JobDiagnosis](ctx, c, OpDiagnoseJob, DiagnoseJobRequest{ID: id})
}
