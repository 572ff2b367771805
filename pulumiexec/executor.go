package pulumiexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/pulumiexec/checkpoint"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// Executor names (docs/operations.md, "Converge").
const (
	// WorkDirName is the engine's workspace directory under
	// CHALUPA_DATA_DIR (one Pulumi workspace per stack).
	WorkDirName = "pulumi-workspaces"
	// ProvisionLabel names the provision token wherever the token cannot
	// appear (digitalocean client errors, logs).
	ProvisionLabel = "provision"
	// launchedIDPrefix + job id is the stable id of the launched event an
	// up records; sunkIDPrefix and endedIDPrefix + job id those of a
	// destroy's sunk and deployment-ended events.
	launchedIDPrefix = "converge-launched:"
	sunkIDPrefix     = "converge-sunk:"
	endedIDPrefix    = "converge-ended:"
)

// checkpointTimeout bounds the checkpoint after a run, which runs on a
// context detached from the run's: a run cancelled by the lease deadline or
// a shutdown changed the state too and must still be saved. Two stack
// exports take a few seconds; the runner (and a shutdown) waits for the run,
// so a stuck CLI must not hold them for long (docs/operations.md,
// "Checkpoints").
const checkpointTimeout = time.Minute

// ErrRecoverAmbiguous: crash recovery found more than one droplet (or
// volume, or firewall) carrying the box's tag. Recovery refuses to guess which one the
// box owns; the lane stays closed until the operator removes the extra one
// (docs/operations.md, "Jobs").
var ErrRecoverAmbiguous = errors.New("converge recovery: more than one droplet, volume or firewall carries the box's tag; remove the extra one at DigitalOcean")

// Executor runs converge jobs with the Pulumi engine (jobs.Executor,
// docs/operations.md, "Converge" and "Jobs"). It alone holds the provision
// token: inside the engine (for Pulumi's child processes) and its own
// DigitalOcean client (crash recovery's lookups by tag).
type Executor struct {
	// Engine runs the box programs.
	Engine *Engine
	// API looks a box's resources up at the provider by tag (crash
	// recovery), with the provision token.
	API digitalocean.API
	// Log receives a line per recovery decision.
	Log zerolog.Logger
	// DeliverKey, when set, runs after a successful up that left the box a
	// droplet without a delivered key (a new or replaced droplet, or one
	// whose delivery failed before): it issues the environment's ingest
	// key and writes it to the droplet over SSH, returning the pinned host
	// key (authorized_keys form). Its error fails the job, whose droplet
	// then exists and is billable; the job's message says so
	// (docs/operations.md, "SSH key delivery").
	DeliverKey func(ctx context.Context, box storage.Box, dropletID int64, ipv4 string) (hostKey string, err error)
	// Checkpoints, when set, saves both of the box's stacks after every
	// run into the database, and restores missing stacks from there
	// before the lane's first claim (docs/operations.md, "Checkpoints").
	Checkpoints *checkpoint.Store
	// AgentRelease and ControlPlaneURL (CHALUPA_ORIGIN) render the user
	// data of a box that carries the agent, for up and preview
	// (BoxUserData; docs/operations.md, "Converge").
	AgentRelease    agentrelease.Release
	ControlPlaneURL string

	// DB is the database the executor reads the box's environment from
	// (checkpoints are keyed by it).
	DB *storage.DB

	mu sync.Mutex // one engine call at a time: the runner's lane, plus the admin API's wipe and cancel
}

var _ jobs.Executor = (*Executor)(nil)

// KeyDelivery issues an environment's ingest key for a new droplet and
// writes it there over SSH (docs/operations.md, "SSH key delivery"); its
// Deliver is an Executor's DeliverKey.
type KeyDelivery struct {
	DB     *storage.DB
	Keys   *ingest.Keyring
	Sealer *envelope.Sealer
	Clock  clockwork.Clock
	// Port is the droplets' SSH port (CHALUPA_SSH_PORT).
	Port int
	Log  zerolog.Logger
	// ConfirmWait bounds Rotate's wait for the first heartbeat signed
	// with the new key; 0 is DefaultConfirmWait.
	ConfirmWait time.Duration

	once      sync.Once
	deliverer *sshdeliver.Deliverer
}

// sshd is the deliverer, made once (Rotate runs for many boxes at once).
func (k *KeyDelivery) sshd() *sshdeliver.Deliverer {
	k.once.Do(func() {
		if k.deliverer == nil {
			k.deliverer = sshdeliver.New(k.DB, k.Sealer, k.Clock)
		}
	})
	return k.deliverer
}

// ErrNoPublicIPv4: the droplet reported no public IPv4 address to deliver
// its key to.
var ErrNoPublicIPv4 = errors.New("the droplet has no public IPv4 address")

// Deliver ensures chalupa's SSH identity, issues a fresh active key of the
// box's environment (one key per droplet: other droplets' keys are
// untouched), records it as issued for the box's droplet, and delivers it
// to ipv4:port, pinning the droplet's host key. A failed delivery revokes
// the key it issued; a successful one revokes every other active key
// recorded for the same box's droplet (a key an earlier run delivered
// before a crash lost its result: the droplet's files now hold the new
// one), so no key that no droplet holds stays active. It returns the
// pinned host key. Errors: ErrNoPublicIPv4, sshdeliver's (no key material,
// key id or address in them), the keyring's, the database's.
func (k *KeyDelivery) Deliver(ctx context.Context, box storage.Box, dropletID int64, ipv4 string) (string, error) {
	if ipv4 == "" {
		return "", ErrNoPublicIPv4
	}
	if _, err := sshdeliver.EnsureIdentity(ctx, k.DB, k.Sealer, k.Clock.Now()); err != nil {
		return "", err
	}
	issued, err := k.Keys.Issue(ctx, box.EnvironmentSlug)
	if err != nil {
		return "", fmt.Errorf("issue the environment's ingest key: %w", err)
	}
	if err := k.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.RecordKeyIssued(ctx, tx, issued.KeyID, box.ID, dropletID, k.Clock.Now())
	}); err != nil {
		k.revoke(ctx, dropletID, issued.KeyID, "revoking the unrecorded ingest key failed")
		return "", err
	}
	addr := net.JoinHostPort(ipv4, strconv.Itoa(k.Port))
	res, err := k.sshd().Deliver(ctx, addr, dropletID, sshdeliver.Files{KeyID: issued.KeyID, Key: []byte(issued.KeyMaterial)})
	if err != nil {
		k.revoke(ctx, dropletID, issued.KeyID, "revoking the undelivered ingest key failed")
		return "", err
	}
	// The droplet holds the key now: record it even if the job's context
	// ended meanwhile.
	dctx := context.WithoutCancel(ctx)
	var earlier []string
	if err := k.DB.Writer.Do(dctx, func(tx storage.Tx) error {
		var err error
		earlier, err = storage.MarkKeyDelivered(dctx, tx, issued.KeyID, k.Clock.Now())
		return err
	}); err != nil {
		// The run succeeded all the same; the earlier keys are revoked by
		// the next delivery to this droplet.
		k.Log.Error().Err(err).Int64("droplet", dropletID).Str("keyId", issued.KeyID).Msg("recording the delivered ingest key failed")
	}
	for _, old := range earlier {
		k.revoke(ctx, dropletID, old, "revoking an ingest key the droplet no longer holds failed")
	}
	if len(earlier) > 0 {
		k.Log.Warn().Str("box", box.Name).Int64("droplet", dropletID).Strs("revokedKeyIds", earlier).
			Msg("revoked ingest keys an earlier delivery left on this droplet: its files now hold the new key")
	}
	pin, err := storage.SSHHostKeyByDroplet(ctx, k.DB.Read, dropletID)
	if err != nil {
		return "", fmt.Errorf("read the pinned host key: %w", err)
	}
	k.Log.Info().Str("box", box.Name).Int64("droplet", dropletID).Str("hostKey", res.HostKeyFingerprint).
		Bool("firstContact", res.FirstContact).Int("attempts", res.Attempts).Msg("delivered the ingest key over SSH")
	return pin.HostKey, nil
}

// revoke revokes keyID, on a context the job's end does not cancel (the
// revocation must still happen), logging msg on failure: the operator
// revokes it with chalupa admin keys revoke.
func (k *KeyDelivery) revoke(ctx context.Context, dropletID int64, keyID, msg string) {
	if _, err := k.Keys.Revoke(context.WithoutCancel(ctx), keyID); err != nil {
		k.Log.Error().Err(err).Int64("droplet", dropletID).Str("keyId", keyID).Msg(msg + "; revoke it with chalupa admin keys revoke")
	}
}

// BoxSpecOf maps a box of the oracle to the engine's input: the recorded
// provider ids for adoption, and as the per-job tag the job that created
// the box's resources (kept on the box as the launch's job) or, for a box
// with none, job's own id, so that the tags of existing resources never
// change from one job to the next.
func BoxSpecOf(box storage.Box, job jobs.Job) BoxSpec {
	tagJob := job.ID
	if box.Launch.JobID != "" && (box.Resources.DropletID != 0 || box.Resources.VolumeID != "") {
		tagJob = box.Launch.JobID
	}
	spec := BoxSpec{
		Name: box.Name, EnvironmentSlug: box.EnvironmentSlug,
		Region: box.Config.Region, Size: box.Config.Size, Image: box.Config.Image,
		SSHKeyFingerprints: slices.Clone(box.Config.SSHKeyFingerprints),
		CustomerSource:     box.Config.CustomerSource, ControlPlaneSource: box.Config.ControlPlaneSource,
		VolumeGiB: int(box.Config.VolumeSizeGiB), Tags: slices.Clone(box.Config.Tags), Managed: box.Managed,
		JobID: tagJob,
		Known: KnownIDs{FirewallID: box.Resources.FirewallID, VolumeID: box.Resources.VolumeID},
	}
	if box.Resources.DropletID != 0 {
		spec.Known.DropletID = strconv.FormatInt(box.Resources.DropletID, 10)
	}
	return spec
}

// convergeSummary is a job's stored result.
type convergeSummary struct {
	Action     string `json:"action"`
	Steps      string `json:"steps"`
	Create     int    `json:"create"`
	Update     int    `json:"update"`
	Delete     int    `json:"delete"`
	Same       int    `json:"same"`
	Import     int    `json:"import"`
	Replace    int    `json:"replace"`
	DropletID  string `json:"dropletId,omitempty"`
	IPv4       string `json:"ipv4,omitempty"`
	FirewallID string `json:"firewallId,omitempty"`
	VolumeID   string `json:"volumeId,omitempty"`
	// AlreadyGone names what a destroy found missing at the provider and
	// counted as deleted ("droplet 123").
	AlreadyGone []string `json:"alreadyGone,omitempty"`
	ElapsedMS   int64    `json:"elapsedMs"`
}

// Execute runs the job's action on the box through the engine, storing
// each resource step as the job's progress. On success: up and refresh
// record the provider ids found, an up that leaves a droplet records the
// launch, a `launched` lifecycle event for a droplet the box did not have
// and its deployment (`droplet-<id>`, as the agent names it); a destroy
// that removed the droplet ends its deployment through the sunk path
// (storage.EndDeployment; the environment sinks when it was the last).
// Errors: the engine's as a *RunError (the job fails with its diagnostic,
// and its step journal keeps the output, scrubbed of the token).
func (x *Executor) Execute(ctx context.Context, job jobs.Job, box storage.Box, progress func(jobs.Progress)) (jobs.Outcome, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	action, err := ParseAction(job.Action)
	if err != nil {
		return jobs.Outcome{}, err
	}
	spec := BoxSpecOf(box, job)
	if RendersUserData(job.Action) {
		// User data acts at creation only: the program ignores a change
		// of it, so a new release never replaces a running droplet.
		if spec.UserData, err = BoxUserData(box, x.AgentRelease, x.ControlPlaneURL); err != nil {
			return jobs.Outcome{}, fmt.Errorf("render the box's user data: %w", err)
		}
	}
	counts := map[string]int{}
	var opts RunOptions
	if job.IncludeData {
		// The admin API checked the typed phrase when it enqueued the job
		// (jobs.Service.EnqueueRequest); the job keeps the decision.
		opts = RunOptions{IncludeData: true, Confirm: DataConfirmPhrase(box.Name)}
	}
	res, err := x.Engine.Run(ctx, spec, action, opts, func(ev Event) {
		p := jobs.Progress{Resource: ev.Name, Op: ev.Op}
		if ev.Op == "done" {
			p.Message = "stack " + ev.Stack + " done"
		} else {
			counts[ev.Op]++
			p.Message = fmt.Sprintf("%s %s %s (%s)", ev.Stack, ev.Op, ev.Name, ev.Type)
		}
		p.Counts = maps(counts)
		progress(p)
	})
	if action != ActionPreview {
		// Every run but a preview may have changed the state, a failed or
		// cancelled one too: save it before anything else can fail, on a
		// context the run's cancellation does not end.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
		cerr := x.checkpoint(cctx, box, spec)
		cancel()
		if cerr != nil {
			if err == nil {
				err = cerr
			} else {
				x.Log.Error().Err(cerr).Str("job", job.ID).Str("box", box.Name).Msg("checkpoint after a failed run")
			}
		}
	}
	if err != nil {
		// The job's error is the diagnostic; Pulumi's whole output goes
		// to its step journal (docs/operations.md, "Jobs").
		return jobs.Outcome{}, Explain(err, box.Name, x.Engine.PulumiHome)
	}
	sum, _ := json.Marshal(convergeSummary{Action: job.Action, Steps: res.Steps.String(), Create: res.Steps.Create,
		Update: res.Steps.Update, Delete: res.Steps.Delete, Same: res.Steps.Same, Import: res.Steps.Import,
		Replace: res.Steps.Replace, DropletID: res.DropletID, IPv4: res.IPv4, FirewallID: res.FirewallID,
		VolumeID: res.VolumeID, AlreadyGone: goneList(res.Gone), ElapsedMS: res.Elapsed.Milliseconds()})
	out := jobs.Outcome{Summary: sum}
	if action == ActionPreview {
		return out, nil
	}
	found, err := resourcesOf(res)
	if err != nil {
		return jobs.Outcome{}, err
	}
	out.Resources = &found
	switch {
	case action == ActionUp && found.DropletID != 0:
		launch := storage.BoxLaunch{DropletID: found.DropletID, IPv4: res.IPv4, JobID: spec.JobID}
		if box.Launch.DropletID == found.DropletID {
			launch.HostKey, launch.IPv6, launch.LaunchedAt = box.Launch.HostKey, box.Launch.IPv6, box.Launch.LaunchedAt
		}
		out.Launch = &launch
		out.Record = x.recordLaunch(box, job, found.DropletID, box.Launch.DropletID != found.DropletID)
		if x.DeliverKey != nil && launch.HostKey == "" {
			// A failed delivery still records the droplet, its launch
			// (without a host key: the next up delivers again) and its
			// deployment: it exists and is billable.
			hostKey, err := x.DeliverKey(ctx, box, found.DropletID, res.IPv4)
			if err != nil {
				out.Summary = nil
				return out, fmt.Errorf("the up succeeded (droplet %s exists and is billable) but delivering its ingest key failed: %w", res.DropletID, err)
			}
			launch.HostKey = hostKey
		}
	case action == ActionDestroy && found.DropletID == 0 && box.Resources.DropletID != 0:
		out.Record = x.recordSunk(box, job, box.Resources.DropletID, res.Gone.DropletID != "", found.VolumeID)
	}
	return out, nil
}

// goneList names the resources a destroy found missing ("droplet 123").
func goneList(g StateIDs) []string {
	var out []string
	for _, r := range []struct{ kind, id string }{{"droplet", g.DropletID}, {"firewall", g.FirewallID}, {"volume", g.VolumeID}} {
		if r.id != "" {
			out = append(out, r.kind+" "+r.id)
		}
	}
	return out
}

// checkpoint saves both of the box's stacks as their next checkpoint
// versions (docs/operations.md, "Checkpoints"). A stack that does not exist
// has nothing to save. Errors: the store's (checkpoint.ErrTooLarge names the
// limit and the size, never the content) or the engine's.
func (x *Executor) checkpoint(ctx context.Context, box storage.Box, spec BoxSpec) error {
	if x.Checkpoints == nil {
		return nil
	}
	env, err := storage.EnvironmentBySlug(ctx, x.DB.Read, box.EnvironmentSlug)
	if err != nil {
		return fmt.Errorf("checkpoint: environment of box %s: %w", box.Name, err)
	}
	for _, name := range []string{spec.DataStack(), spec.ComputeStack()} {
		_, err := x.Checkpoints.Checkpoint(ctx, x.Engine, checkpoint.Ref{OrganizationID: env.OrgID, EnvironmentID: env.ID, Stack: name})
		if err != nil && !errors.Is(err, checkpoint.ErrMissingStack) {
			return err
		}
	}
	return nil
}

// Prepare restores every stack missing from the state backend from its
// newest checkpoint (a database restored on a new machine brings its stack
// states back), before the lane recovers or claims anything
// (jobs.Preparer; docs/operations.md, "Checkpoints"). Existing stacks are
// never touched. Errors: the store's; the lane stays closed and Prepare is
// retried.
func (x *Executor) Prepare(ctx context.Context) error {
	if x.Checkpoints == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	res, err := x.Checkpoints.RestoreMissing(ctx, x.Engine)
	if err != nil {
		return err
	}
	if len(res.Wiped) > 0 {
		x.Log.Info().Strs("stacks", res.Wiped).Msg("left wiped stacks missing from the Pulumi backend: the next up adopts")
	}
	if len(res.Imported) > 0 {
		x.Log.Warn().Strs("stacks", res.Imported).Int("kept", len(res.Kept)).
			Msg("restored stacks missing from the Pulumi backend from their database checkpoints")
	}
	return nil
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// resourcesOf reads a run's provider ids.
func resourcesOf(res Result) (storage.BoxResources, error) {
	r := storage.BoxResources{FirewallID: res.FirewallID, VolumeID: res.VolumeID}
	if res.DropletID != "" {
		id, err := strconv.ParseInt(res.DropletID, 10, 64)
		if err != nil || id < 1 {
			return r, errors.New("converge: the droplet id in the stack state is not a number")
		}
		r.DropletID = id
	}
	return r, nil
}

// launchLimitMinutes is the idle limit of the deployment an up records:
// the box's agent idle limit when it carries the agent (its first
// heartbeat sends the same), else the launched event's default, so a
// droplet whose agent never reports is still reaped (docs/operations.md,
// "Converge").
func launchLimitMinutes(box storage.Box) int64 {
	if box.Config.Agent && box.Config.AgentIdleMinutes > 0 {
		return box.Config.AgentIdleMinutes
	}
	return ingest.LaunchedLimitMinutes
}

// DeploymentID is the deployment a box's droplet reports: the agent's
// default identity "droplet-<id>" (docs/operations.md, "Agent").
func DeploymentID(dropletID int64) string { return "droplet-" + strconv.FormatInt(dropletID, 10) }

// recordLaunch creates or completes the droplet's deployment as a
// `launched` event does (storage.ApplyLaunch, the lifecycle route's path;
// the managed flag from the box) and, for a droplet new to the box,
// records the `launched` event under a stable id from the job. No quota
// applies: the droplet exists already, and refusing to record it would
// only hide a billable machine. A deployment that has ended (its droplet
// was reaped while the oracle still named it) is left ended.
func (x *Executor) recordLaunch(box storage.Box, job jobs.Job, dropletID int64, fresh bool) func(context.Context, storage.Tx, time.Time) error {
	return func(ctx context.Context, tx storage.Tx, now time.Time) error {
		dep := DeploymentID(dropletID)
		_, err := storage.ApplyLaunch(ctx, tx, storage.Launch{EnvironmentID: box.EnvironmentID, DeploymentID: dep,
			DropletID: dropletID, Region: box.Config.Region, Size: box.Config.Size, Managed: box.Managed,
			At: now, LimitMinutes: launchLimitMinutes(box)}, 0)
		switch {
		case errors.Is(err, storage.ErrDeploymentEnded), errors.Is(err, storage.ErrDropletMismatch):
			x.Log.Warn().Str("box", box.Name).Str("deployment", dep).Msg("converge up: the droplet's deployment has ended; not reopened")
			return nil
		case err != nil:
			return err
		}
		if !fresh {
			return nil
		}
		msg := fmt.Sprintf("launched by converge job %s; droplet %d", job.ID, dropletID)
		if box.Managed {
			msg += "; managed"
		}
		_, err = storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: launchedIDPrefix + job.ID,
			EnvironmentID: box.EnvironmentID, DeploymentID: dep, Kind: protocol.EventLaunched, Message: msg, OccurredAt: now})
		return err
	}
}

// recordSunk ends the destroyed droplet's deployment through the sunk
// path: storage.EndDeployment (its telemetry sessions end with it), a
// `sunk` and a `deployment-ended` event (reason manual: the operator's
// destroy; provider when the droplet was already gone), and the
// environment sunk when it was its last active deployment. A droplet that
// was already gone (gone: the destroy's refresh found it missing, e.g. the
// reaper destroyed it) whose deployment has ended records one `sunk` event
// saying so; each message names the data volume the destroy kept
// (volumeID, "" for none). A droplet without a deployment records nothing
// (docs/operations.md, "Converge").
func (x *Executor) recordSunk(box storage.Box, job jobs.Job, dropletID int64, gone bool, volumeID string) func(context.Context, storage.Tx, time.Time) error {
	kept := ""
	if volumeID != "" {
		kept = "; volume " + volumeID + " kept"
	}
	return func(ctx context.Context, tx storage.Tx, now time.Time) error {
		dep := DeploymentID(dropletID)
		ended, err := storage.EndDeployment(ctx, tx, box.EnvironmentID, dep, now)
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !ended {
			if !gone {
				return nil
			}
			_, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: sunkIDPrefix + job.ID,
				EnvironmentID: box.EnvironmentID, DeploymentID: dep, Kind: protocol.EventSunk, OccurredAt: now,
				Message: fmt.Sprintf("converge job %s: droplet %d was already gone (its deployment had ended); counted as deleted%s", job.ID, dropletID, kept)})
			return err
		}
		sunkMsg := fmt.Sprintf("destroyed by converge job %s; droplet %d%s", job.ID, dropletID, kept)
		endedMsg := fmt.Sprintf("droplet %d destroyed by converge job %s; deployment ended", dropletID, job.ID)
		reason := "manual"
		if gone {
			sunkMsg = fmt.Sprintf("converge job %s: droplet %d was already gone at the provider; counted as deleted%s", job.ID, dropletID, kept)
			endedMsg = fmt.Sprintf("droplet %d was already gone when converge job %s destroyed the box; deployment ended", dropletID, job.ID)
			reason = "provider"
		}
		for _, ev := range []storage.LifecycleEvent{
			{ID: sunkIDPrefix + job.ID, Kind: protocol.EventSunk, Message: sunkMsg},
			{ID: endedIDPrefix + job.ID, Kind: ingest.EventDeploymentEnded, Reason: reason, Message: endedMsg},
		} {
			ev.EnvironmentID, ev.DeploymentID, ev.OccurredAt = box.EnvironmentID, dep, now
			if _, err := storage.InsertLifecycleEvent(ctx, tx, ev); err != nil {
				return err
			}
		}
		_, err = storage.SinkEnvironmentIfIdle(ctx, tx, box.EnvironmentID, now)
		return err
	}
}

// CancelLock cancels a held Pulumi lock on the box's stacks
// (adminCancelPulumiState; the job service has proved the scope idle).
// Errors: the engine's.
func (x *Executor) CancelLock(ctx context.Context, box storage.Box) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.Engine.Cancel(ctx, BoxSpecOf(box, jobs.Job{}))
}

// Wipe removes the box's stacks from the state cache, with their backups
// and history (adminClearPulumiStateCache; the caller has proved the scope
// idle). Their checkpoints record the wipe first, so a restart does not
// restore them (docs/operations.md, "Checkpoints"). The oracle stays: the
// next up adopts. Errors: the database's, the engine's.
func (x *Executor) Wipe(ctx context.Context, box storage.Box) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	spec := BoxSpecOf(box, jobs.Job{})
	if err := x.markWiped(ctx, spec.ComputeStack(), spec.DataStack()); err != nil {
		return err
	}
	return x.Engine.Wipe(ctx, spec)
}

// markWiped records in the stacks' checkpoints that they are about to be
// removed from the state cache, so that restoring missing stacks at the
// next start leaves them missing and the next up adopts (checkpoint.Store
// MarkWiped). Without checkpoints there is nothing to restore from.
func (x *Executor) markWiped(ctx context.Context, stacks ...string) error {
	if x.Checkpoints == nil {
		return nil
	}
	if _, err := x.Checkpoints.MarkWiped(ctx, stacks...); err != nil {
		return fmt.Errorf("record the wipe in the checkpoints: %w", err)
	}
	return nil
}

// Recover settles a job a dead process left running (docs/operations.md,
// "Jobs"): cancel the Pulumi lock the killed CLI left; look the box's
// droplet, volume and firewall up at the provider by the box's tag (an
// untagged firewall of an older up is kept as the state or the oracle
// records it); drop the
// stacks' pending operations; and where a stack's state disagrees with
// what exists (a create that reached the provider but not the state, or a
// resource gone), wipe that stack so the retried up imports what exists
// and creates only what does not. The returned resources are recorded on
// the box before the retry. Errors: ErrRecoverAmbiguous; the provider's or
// the engine's (the lane stays closed and recovery is retried).
func (x *Executor) Recover(ctx context.Context, job jobs.Job, box storage.Box) (*storage.BoxResources, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	spec := BoxSpecOf(box, job)
	if err := x.Engine.Cancel(ctx, spec); err != nil {
		return nil, err
	}
	tag := BoxTag(box.Name)
	droplets, err := x.API.ListDropletsByTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	volumes, err := x.API.ListVolumesByTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	firewalls, err := x.API.ListFirewallsByTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	if len(droplets) > 1 || len(volumes) > 1 || len(firewalls) > 1 {
		return nil, ErrRecoverAmbiguous
	}
	compute, data, err := x.Engine.ClearPending(ctx, spec)
	if err != nil {
		return nil, err
	}
	// A firewall created before firewalls were tagged is found in the
	// state or the oracle only; a tagged one is what exists.
	found := storage.BoxResources{FirewallID: compute.FirewallID}
	if found.FirewallID == "" {
		found.FirewallID = box.Resources.FirewallID
	}
	if len(firewalls) == 1 {
		found.FirewallID = firewalls[0].ID
	}
	dropletID := ""
	if len(droplets) == 1 {
		found.DropletID = int64(droplets[0].ID)
		dropletID = strconv.Itoa(droplets[0].ID)
	}
	if len(volumes) == 1 {
		found.VolumeID = volumes[0].ID
	}
	wipe := map[string]bool{
		spec.ComputeStack(): compute.DropletID != dropletID || (len(firewalls) == 1 && compute.FirewallID != found.FirewallID),
		spec.DataStack():    data.VolumeID != found.VolumeID,
	}
	for _, name := range []string{spec.ComputeStack(), spec.DataStack()} {
		if !wipe[name] {
			continue
		}
		x.Log.Warn().Str("job", job.ID).Str("box", box.Name).Str("stack", name).
			Msg("recovery: the stack state disagrees with the provider; removing it so the retried up adopts what exists")
		// Its checkpoints hold the same disagreeing state: a restart
		// before the retried up must not bring it back.
		if err := x.markWiped(ctx, name); err != nil {
			return nil, err
		}
		if err := x.Engine.WipeStack(ctx, name); err != nil {
			return nil, err
		}
	}
	x.Log.Info().Str("job", job.ID).Str("box", box.Name).Int64("droplet", found.DropletID).Bool("volume", found.VolumeID != "").
		Msg("recovery: recorded what exists at the provider")
	return &found, nil
}

// CheckToken makes the provision token's read-only check (GET /v2/account
// through the executor's own client, which alone holds the token;
// docs/operations.md, "Alerts"): nil when DigitalOcean answered, else the
// client's error (never the token). Errors: no client.
func (e *Executor) CheckToken(ctx context.Context) error {
	if e.API == nil {
		return errors.New("converge has no DigitalOcean client")
	}
	_, err := e.API.Account(ctx)
	return err
}
