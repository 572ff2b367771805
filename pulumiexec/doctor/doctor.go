// Package doctor is the job doctor's reasoning (docs/operations.md, "Job
// doctor"): it reads a converge job, its step journal, the box's two
// stacks, their checkpoints and what the provider holds, side by side, and
// recommends one next action. It reads and never writes; the daemon serves
// it as adminDiagnoseJob.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/storage"
)

// Inspector reads a box's stacks and provider inventory without changing
// anything: what the doctor needs from the executor beyond jobs.Executor
// (pulumiexec.Executor is one).
type Inspector interface {
	Inspect(ctx context.Context, box storage.Box) (pulumiexec.BoxInspection, error)
}

var _ Inspector = (*pulumiexec.Executor)(nil)

// Errors of Diagnose (the daemon answers 404, 404 and 502 for them).
var (
	// ErrNoJob: no job has the id.
	ErrNoJob = errors.New("no such job")
	// ErrNoBox: the job's box no longer exists.
	ErrNoBox = errors.New("the job's box no longer exists")
	// ErrStacksUnreadable: the Inspector failed as a whole; the reason is
	// logged, never returned (the engine's errors may name paths). A
	// single stack that cannot be read is not this error: the diagnosis
	// marks it unavailable.
	ErrStacksUnreadable = errors.New("reading the stacks failed; the daemon log says why")
)

// Doctor answers adminDiagnoseJob. The zero value is not usable: DB,
// Clock and LanePaused are required.
type Doctor struct {
	DB    *storage.DB
	Clock clockwork.Clock
	// Inspector reads the stacks and the provider; nil when converge is
	// not configured.
	Inspector Inspector
	// Instance is this daemon's job lane instance id ("" without one).
	Instance string
	// LanePaused reports whether the jobs loop is paused.
	LanePaused func() bool
	Log        zerolog.Logger
}

// Diagnose reads job id and everything about it. A provider or a stack
// that cannot be read does not fail it: the diagnosis marks that part
// unavailable with its error kind (the reason is logged) and recommends
// DoctorCheckProvider or DoctorCheckState where its answer decides
// (docs/operations.md, "Job doctor"). Errors:
// ErrNoJob, ErrNoBox, jobs.ErrNotConfigured (no Inspector),
// ErrStacksUnreadable, the database's.
func (h *Doctor) Diagnose(ctx context.Context, id string) (adminapi.JobDiagnosis, error) {
	j, err := storage.JobByID(ctx, h.DB.Read, id)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.JobDiagnosis{}, ErrNoJob
	}
	if err != nil {
		return adminapi.JobDiagnosis{}, err
	}
	box, err := storage.BoxByRef(ctx, h.DB.Read, j.ScopeID)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.JobDiagnosis{}, ErrNoBox
	}
	if err != nil {
		return adminapi.JobDiagnosis{}, err
	}
	if h.Inspector == nil {
		return adminapi.JobDiagnosis{}, jobs.ErrNotConfigured
	}
	ins, err := h.Inspector.Inspect(ctx, box)
	if err != nil {
		// The engine's errors may name paths or backend details: logged,
		// not returned.
		h.Log.Error().Err(err).Str("job", j.ID).Str("box", box.Name).Msg("job doctor: reading the stacks failed")
		return adminapi.JobDiagnosis{}, ErrStacksUnreadable
	}
	if ins.ProviderErr != nil {
		ins.Provider.Unavailable, ins.Provider.ErrorKind = true, digitalocean.KindName(ins.ProviderErr)
		h.Log.Warn().Err(ins.ProviderErr).Str("job", j.ID).Str("box", box.Name).Msg("job doctor: the provider could not be read; diagnosing without it")
	}
	now := h.Clock.Now()
	d := adminapi.JobDiagnosis{Job: jobs.APIJob(j, box.Name), CheckedAt: now,
		Lease:    adminapi.JobLease{LanePaused: h.LanePaused(), MaxAttempts: jobs.MaxAttempts},
		Recorded: adminapi.ProviderIDs{FirewallID: box.Resources.FirewallID, VolumeID: box.Resources.VolumeID},
		Provider: ins.Provider, Stacks: make([]adminapi.StackDiagnosis, 0, len(ins.Stacks))}
	if box.Resources.DropletID != 0 {
		d.Recorded.DropletID = strconv.FormatInt(box.Resources.DropletID, 10)
	}
	if j.Status == storage.JobRunning {
		d.Lease.Holder = j.LockedBy
		d.Lease.HolderIsThisDaemon = h.Instance != "" && j.LockedBy == h.Instance
		d.Lease.AgeSeconds = int64(now.Sub(j.LockedAt) / time.Second)
		d.Lease.ExpiresAt = j.LockedAt.Add(jobs.LeaseDuration)
		d.Lease.Expired = !now.Before(d.Lease.ExpiresAt)
	}
	steps, err := storage.JobSteps(ctx, h.DB.Read, j.ID)
	if err != nil {
		return adminapi.JobDiagnosis{}, err
	}
	d.Steps = make([]adminapi.JobStep, 0, len(steps))
	for _, s := range steps {
		st := adminapi.JobStep{Seq: s.Seq, At: s.At, Kind: s.Kind, Status: s.Status, Attempt: s.Attempt, Worker: s.Worker}
		if s.Kind == storage.JobStepProgress {
			st.Progress = json.RawMessage(s.Detail)
		} else {
			st.Reason = s.Detail
		}
		d.Steps = append(d.Steps, st)
	}
	names := make([]string, 0, len(ins.Stacks))
	for _, s := range ins.Stacks {
		names = append(names, s.Name)
	}
	cps, err := storage.StackCheckpoints(ctx, h.DB.Read, names, 1)
	if err != nil {
		return adminapi.JobDiagnosis{}, err
	}
	for _, s := range ins.Stacks {
		if s.Err != nil {
			// The engine's errors may name paths: logged, the kind returned.
			h.Log.Warn().Err(s.Err).Str("job", j.ID).Str("box", box.Name).Str("stack", s.Name).
				Msg("job doctor: the stack could not be read; diagnosing without it")
		}
		sd := adminapi.StackDiagnosis{Stack: s.Name, Role: s.Role, Exists: s.View.Exists, LocksUnknown: s.LocksUnknown,
			Unavailable: s.Err != nil, ErrorKind: pulumiexec.StackErrorKind(s.Err),
			Locks: []adminapi.StackLockInfo{}, Pending: []adminapi.PendingOperation{},
			State: adminapi.ProviderIDs{DropletID: s.View.IDs.DropletID, FirewallID: s.View.IDs.FirewallID, VolumeID: s.View.IDs.VolumeID}}
		for _, l := range s.Locks {
			sd.Locks = append(sd.Locks, adminapi.StackLockInfo{PID: l.PID, Hostname: l.Hostname, AcquiredAt: l.AcquiredAt,
				AgeSeconds: int64(now.Sub(l.AcquiredAt) / time.Second), HolderAlive: l.HolderAlive})
		}
		for _, p := range s.View.Pending {
			sd.Pending = append(sd.Pending, adminapi.PendingOperation{Kind: p.Kind, Type: p.Type, Name: p.Name, ID: p.ID})
		}
		for _, c := range cps {
			if c.Stack == s.Name {
				sd.CheckpointVersion, sd.CheckpointAt = c.Version, c.CreatedAt
			}
		}
		d.Stacks = append(d.Stacks, sd)
	}
	d.Recommendation = Recommend(d)
	return d, nil
}

// Commands the doctor recommends (docs/operations.md, "Job doctor").
func showJobCommand(id string) string     { return "chalupa admin job show " + id }
func upCommand(box string) string         { return "chalupa admin converge " + box + " up --wait" }
func refreshCommand(box string) string    { return "chalupa admin converge " + box + " refresh --wait" }
func cancelLockCommand(box string) string { return "chalupa admin state cancel " + box }
func wipeCommand(box string) string {
	return "chalupa admin state wipe " + box + " --confirm '" + adminapi.WipePhrase(box) + "'"
}
func deleteAtProvider(kind, id string) string { return "doctl compute " + kind + " delete " + id }

func doctorCommand(id string) string { return "chalupa admin job doctor " + id }

// providerReason says what an unreadable provider's error kind
// (digitalocean.KindName) asks of the operator.
func providerReason(kind string) string {
	const then = "; what DigitalOcean holds under the box's tag decides the next action, so diagnose again once it answers"
	switch kind {
	case "token_refused":
		return "DigitalOcean refused the provision token (DIGITALOCEAN_PROVISION_TOKEN: unknown, expired or deleted): set a valid one and restart serve" + then
	case "token_lacks_scope":
		return "the provision token (DIGITALOCEAN_PROVISION_TOKEN) lacks a scope the listing needs (read of droplets, volumes and firewalls): give it full access and restart serve" + then
	case "rate_limited":
		return "DigitalOcean is rate-limiting the provision token: wait a minute" + then
	}
	return "DigitalOcean could not be reached or failed (the daemon log has the reason): check the control plane's network and DigitalOcean's status" + then
}

// stateReason says what an unreadable stack's error kind
// (pulumiexec.StackErrorKind) asks of the operator.
func stateReason(stack, kind string) string {
	const then = "; what the stacks record decides the next action, so diagnose again once it reads"
	switch kind {
	case pulumiexec.StackBackendUnreadable:
		return "the state backend of " + stack + " cannot be opened (the daemon log names the path and the reason): check that the Pulumi backend directory exists and belongs to the daemon's user" + then
	case pulumiexec.StackStateCorrupt:
		return "the state of " + stack + " is not Pulumi's (the daemon log has the parse error; a state wipe cannot remove it either): move the stack's state file aside in the Pulumi backend and restart serve, which imports the stack's newest checkpoint, or, without one, lets the next up adopt what the box records" + then
	}
	return "the pulumi CLI could not read " + stack + " (the daemon log has its output): check CHALUPA_PULUMI_CLI and PULUMI_HOME" + then
}

const resumeLaneCommand = "chalupa admin loops resume jobs"

// Recommend is the symptom table of docs/operations.md, "Job doctor": the
// first row whose symptom the diagnosis shows gives the one next action.
// Rows that need the provider's or the stacks' answer are not judged
// while one is unavailable: the job's own state decides, or
// DoctorCheckProvider, or DoctorCheckState.
func Recommend(d adminapi.JobDiagnosis) adminapi.Recommendation {
	j, box := d.Job, d.Job.Box
	rec := func(action, symptom, reason string, cmds ...string) adminapi.Recommendation {
		if cmds == nil {
			cmds = []string{}
		}
		return adminapi.Recommendation{Action: action, Symptom: symptom, Reason: reason, Commands: cmds}
	}
	if j.Status == storage.JobRunning && d.Lease.HolderIsThisDaemon {
		return rec(adminapi.DoctorNothing, "running",
			fmt.Sprintf("the job is running in this daemon's lane; its lease ends at %s", d.Lease.ExpiresAt.UTC().Format(time.RFC3339)),
			showJobCommand(j.ID))
	}
	var stateDroplet, stateFirewall, stateVolume string
	unread := -1 // the first stack that could not be read
	for i, s := range d.Stacks {
		if s.Unavailable && unread < 0 {
			unread = i
		}
		stateDroplet = firstNonEmpty(stateDroplet, s.State.DropletID)
		stateFirewall = firstNonEmpty(stateFirewall, s.State.FirewallID)
		stateVolume = firstNonEmpty(stateVolume, s.State.VolumeID)
	}
	known := func(id string) bool {
		return id == d.Recorded.DropletID || id == d.Recorded.VolumeID || id == d.Recorded.FirewallID ||
			id == stateDroplet || id == stateVolume || id == stateFirewall
	}
	// Extra resources: more than one of a kind (recovery refuses to
	// guess), the ones neither recorded nor in a state.
	kinds := []struct {
		kind string
		list []adminapi.ProviderResource
	}{{"droplet", d.Provider.Droplets}, {"volume", d.Provider.Volumes}, {"firewall", d.Provider.Firewalls}}
	for _, k := range kinds {
		// With a stack unread, which one it records is unknown: row 2
		// waits for the state (DoctorCheckState below).
		if len(k.list) < 2 || unread >= 0 {
			continue
		}
		// Delete what neither the box nor a stack records; when nothing
		// is recorded, keep the first listed.
		var cmds []string
		for i, r := range k.list {
			if !known(r.ID) && (i > 0 || slices.ContainsFunc(k.list, func(o adminapi.ProviderResource) bool { return known(o.ID) })) {
				cmds = append(cmds, deleteAtProvider(k.kind, r.ID))
			}
		}
		return rec(adminapi.DoctorReconcileHost, "more than one "+k.kind+" carries the box's tag",
			fmt.Sprintf("%d %ss carry %s; crash recovery and the next up refuse to guess which one is the box's: delete the extra one (the command names those neither the box nor a stack records; check it holds nothing you need), then converge", len(k.list), k.kind, d.Provider.Tag),
			append(cmds, upCommand(box))...)
	}
	switch j.Status {
	case storage.JobRunning:
		if d.Lease.LanePaused {
			return rec(adminapi.DoctorResumeLane, "left running by a stopped process, lane paused",
				"the job's holder is gone and the jobs loop is paused, so crash recovery has not run: resuming it cancels the stack locks, clears pending operations, adopts what the provider holds and retries or fails the job by its attempts",
				resumeLaneCommand)
		}
		return rec(adminapi.DoctorNothing, "left running by a stopped process",
			"the job's holder is gone; crash recovery settles it before the lane claims anything and is retried every minute (the daemon log says why it has not yet)",
			showJobCommand(j.ID))
	case storage.JobQueued:
		if d.Lease.LanePaused {
			return rec(adminapi.DoctorResumeLane, "queued, lane paused", "the jobs loop is paused: the job waits until it is resumed", resumeLaneCommand)
		}
		return rec(adminapi.DoctorNothing, "queued", "the job waits its turn in the lane", showJobCommand(j.ID))
	}
	if d.Provider.Unavailable {
		return rec(adminapi.DoctorCheckProvider, "the provider cannot be read ("+d.Provider.ErrorKind+")",
			providerReason(d.Provider.ErrorKind), doctorCommand(j.ID))
	}
	if unread >= 0 {
		s := d.Stacks[unread]
		return rec(adminapi.DoctorCheckState, "a stack cannot be read ("+s.ErrorKind+")",
			stateReason(s.Stack, s.ErrorKind), doctorCommand(j.ID))
	}
	// The job has ended: what the stacks and the provider hold decides.
	for _, k := range kinds[:2] { // a firewall is free: only billable hosts
		for _, r := range k.list {
			if !known(r.ID) {
				return rec(adminapi.DoctorReconcileHost, "an unrecorded "+k.kind+" carries the box's tag",
					fmt.Sprintf("%s %s carries %s but neither the box nor its stacks record it: it is billable and the next up would create another; delete it at DigitalOcean if nothing on it is needed", k.kind, r.ID, d.Provider.Tag),
					deleteAtProvider(k.kind, r.ID))
			}
		}
	}
	for _, s := range d.Stacks {
		for _, l := range s.Locks {
			if l.HolderAlive {
				return rec(adminapi.DoctorNothing, "stack locked by a live process",
					fmt.Sprintf("process %d on this host holds the lock of %s: wait for it to end", l.PID, s.Stack))
			}
		}
	}
	for _, s := range d.Stacks {
		if len(s.Locks) > 0 {
			return rec(adminapi.DoctorCancelLock, "stack locked by a process that is gone",
				fmt.Sprintf("the lock of %s is held by a process that no longer runs and no job is live: cancel it, then converge", s.Stack),
				cancelLockCommand(box), upCommand(box))
		}
	}
	for _, s := range d.Stacks {
		if len(s.Pending) > 0 {
			return rec(adminapi.DoctorWipeThenUp, "pending operations in a stack",
				fmt.Sprintf("%s holds %d unfinished operation(s): a create may have reached the provider; wipe the state cache so the next up adopts what the box records", s.Stack, len(s.Pending)),
				wipeCommand(box), upCommand(box))
		}
	}
	gone := func(id string, list []adminapi.ProviderResource) bool {
		return id != "" && !slices.ContainsFunc(list, func(r adminapi.ProviderResource) bool { return r.ID == id })
	}
	if gone(stateDroplet, d.Provider.Droplets) || gone(stateVolume, d.Provider.Volumes) ||
		(len(d.Provider.Firewalls) > 0 && gone(stateFirewall, d.Provider.Firewalls)) {
		return rec(adminapi.DoctorRefreshThenUp, "the state records a resource the provider no longer has",
			"a refresh drops what is gone from the state; the up then recreates it", refreshCommand(box), upCommand(box))
	}
	missing := func(state string, list []adminapi.ProviderResource) bool {
		return len(list) == 1 && list[0].ID != state
	}
	if missing(stateDroplet, d.Provider.Droplets) || missing(stateVolume, d.Provider.Volumes) || missing(stateFirewall, d.Provider.Firewalls) {
		return rec(adminapi.DoctorWipeThenUp, "the provider holds a recorded resource the state lacks",
			"the box records a resource the stacks do not: wipe the state cache so the next up adopts it instead of creating another",
			wipeCommand(box), upCommand(box))
	}
	if j.Status == storage.JobFailed {
		return rec(adminapi.DoctorRefreshThenUp, "failed, state and provider agree",
			"read the job's error first; a refresh re-reads what exists, then the up retries", refreshCommand(box), upCommand(box))
	}
	return rec(adminapi.DoctorNothing, "ended, state and provider agree", "the stacks, the box and the provider agree; no lock is held")
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
