// Package agentrollout upgrades the agent on boxes' running droplets so that
// a bad release cannot take the fleet (docs/operations.md, "Agent install",
// under Upgrade): one box's upgrade is done only when its agent has
// heartbeated with the new version within the report bound; otherwise the
// previous binary is restored and must report; and a rollout upgrades one
// box first, then batches, stopping at the first box that fails.
//
// What happens on a droplet goes through Remote (sshdeliver.Deliverer over
// SSH in production): the seam tests stand a fake droplet behind. The
// evidence that an agent reported is the daemon's own: the agent version
// and arrival of the last heartbeat stored for the box's deployment.
package agentrollout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// Event kinds of an agent upgrade, recorded on the box's droplet's
// deployment (docs/operations.md, "Agent install", under Upgrade).
const (
	EventStarted  = "agent-upgrade-started"
	EventUpgraded = "agent-upgraded"
	EventFailed   = "agent-upgrade-failed"
)

// The bounds of one box's upgrade.
const (
	// DefaultReport is CHALUPA_AGENT_UPGRADE_REPORT_SECONDS's default: how
	// long the upgraded agent (and, after a restore, the previous one) has
	// to heartbeat. The agent heartbeats at its start and every 30 s, so
	// two minutes is four chances, with a slow start and a lost request.
	DefaultReport = 120 * time.Second
	// MinReport and MaxReport bound the variable: under 5 s no agent
	// starts and reports; over 5 minutes a bad release holds a box's
	// idle deadline, and the single-box call, for too long
	// (adminapi.UpgradeBoxAgentCallBound covers twice MaxReport).
	MinReport = 5 * time.Second
	MaxReport = 5 * time.Minute
	// DefaultPoll is how often the stored heartbeat evidence is read
	// while waiting: one read of one row.
	DefaultPoll = time.Second
	// remoteStep bounds one remote step: the wait for SSH, one more
	// attempt, and the remote script (sshdeliver's bounds).
	remoteStep = sshdeliver.UpgradeWait + sshdeliver.DefaultAttemptTimeout + sshdeliver.UpgradeTimeout
)

// HoldMax is the longest the upgrading hold lasts for a report bound of
// report: the upgrade, the bound, the restore and the bound again
// (docs/operations.md, "Agent install", under Upgrade).
func HoldMax(report time.Duration) time.Duration { return 2*remoteStep + 2*report }

// Outcome statuses of one box.
const (
	// StatusUpgraded: the new agent heartbeated with the new version.
	StatusUpgraded = "upgraded"
	// StatusSkipped: nothing to do (no agent, no droplet, or the
	// version is already installed); nothing was changed.
	StatusSkipped = "skipped"
	// StatusFailed: the upgrade failed (Reason says how; Restore what
	// became of the previous agent).
	StatusFailed = "failed"
)

// Failure reasons once the new binary was started.
const (
	// ReasonNeverReported: the unit ran but the agent never heartbeated.
	ReasonNeverReported = "never reported"
	// ReasonCrashed: the unit was not running, or systemd had restarted
	// it, when the restore looked.
	ReasonCrashed = "crashed"
	// ReasonWrongVersion: the agent heartbeated with another version.
	ReasonWrongVersion = "wrong version"
	// ReasonUpgradeError: the upgrade itself failed (the SSH step's
	// error is in Detail).
	ReasonUpgradeError = "upgrade failed"
)

// What became of the previous agent after a failure.
const (
	// RestoreNotNeeded: nothing was replaced, the previous agent runs.
	RestoreNotNeeded = "not needed"
	// RestoreReported: restored, and it heartbeated within the bound.
	RestoreReported = "reported"
	// RestoreSilent: restored, but it did not heartbeat within the bound.
	RestoreSilent = "silent"
	// RestoreNotRun: the restore could not run (Detail says why).
	RestoreNotRun = "not run"
)

// Outcome is what one box's upgrade came to: the admin API's account of
// it.
type Outcome = adminapi.AgentUpgradeOutcome

// Remote is what an upgrade does on a droplet: sshdeliver.Deliverer over
// SSH in production. The seam a test (or the machine lane) stands a
// droplet behind.
type Remote interface {
	// UpgradeAgent installs rel, keeping the previous binary, and restarts
	// the unit (sshdeliver.Deliverer.UpgradeAgent's contract and errors).
	UpgradeAgent(ctx context.Context, addr string, dropletID int64, rel agentrelease.Release) (sshdeliver.UpgradeResult, error)
	// RestoreAgent reports the unit's state and puts the previous binary
	// back (sshdeliver.Deliverer.RestoreAgent's).
	RestoreAgent(ctx context.Context, addr string, dropletID int64) (sshdeliver.RestoreResult, error)
}

// ErrBusy: the box is already being upgraded; nothing was done.
var ErrBusy = errors.New("the box's agent is already being upgraded")

// Upgrader upgrades one box at a time (Box); a Manager runs rollouts with
// it. It holds the database, the release and the Remote; no DigitalOcean
// token.
type Upgrader struct {
	DB      *storage.DB
	Clock   clockwork.Clock
	Remote  Remote
	Release agentrelease.Release
	// Port is the SSH port dialled on a droplet's public IPv4.
	Port int
	// Report is the report bound (DefaultReport when 0); Poll how often
	// the evidence is read (DefaultPoll when 0).
	Report, Poll time.Duration
	Log          zerolog.Logger
	// Alerts receives agent-upgrade-failed (nil: none; alerts.go,
	// docs/operations.md "Alerts").
	Alerts alerts.Setter

	// alerted is what was last reported per box.
	alerted boxAlerts
}

func (u *Upgrader) report() time.Duration {
	if u.Report == 0 {
		return DefaultReport
	}
	return u.Report
}

// SkipReason says why box b has nothing to upgrade, or "".
func SkipReason(b storage.Box) string {
	switch {
	case !b.Config.Agent:
		return "the box does not carry the agent"
	case b.Resources.DropletID == 0 || b.Launch.DropletID != b.Resources.DropletID || b.Launch.IPv4 == "":
		return "no running droplet with a known address: its next up installs the configured release"
	}
	return ""
}

// wantVersion is the heartbeat's agentVersion of an agent whose `version`
// line is line ("chalupa-agent v1.2.3 (commit …)"), or "" when the line
// names none.
func wantVersion(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	return "chalupa-agent/" + f[1]
}

// Box upgrades box's agent (docs/operations.md, "Agent install", under
// Upgrade): it marks the box upgrading and holds its deployment's idle
// deadline, installs the release (Remote.UpgradeAgent), waits up to the
// report bound for a heartbeat with the new version, and otherwise
// restores the previous binary and waits for it to report; the events say
// which. A box SkipReason names, or one already on the release's version,
// is skipped. Errors (nothing done): ErrBusy; database faults. ctx ending
// mid-upgrade leaves the box upgrading (settled at the next start).
func (u *Upgrader) Box(ctx context.Context, box storage.Box) (Outcome, error) {
	out := Outcome{Box: box.Name, DropletID: box.Resources.DropletID}
	if r := SkipReason(box); r != "" {
		out.Status, out.Reason = StatusSkipped, r
		return out, nil
	}
	u.init()
	t := &trial{u: u, box: box, dep: pulumiexec.DeploymentID(box.Resources.DropletID),
		addr: net.JoinHostPort(box.Launch.IPv4, strconv.Itoa(u.Port)), out: &out}
	if err := t.begin(ctx); err != nil {
		return out, err
	}
	t.run(ctx)
	if err := ctx.Err(); err != nil {
		// Cut (the daemon stops): the box stays upgrading, and the next
		// start settles it (Settle).
		return out, err
	}
	if err := t.settle(ctx); err != nil {
		return out, err
	}
	u.reportBox(ctx, box.ID, box.Name, false)
	return out, nil
}

func (u *Upgrader) init() {
	if u.Clock == nil {
		u.Clock = clockwork.NewRealClock()
	}
	if u.Poll == 0 {
		u.Poll = DefaultPoll
	}
}

// trial is one box's upgrade in progress.
type trial struct {
	u    *Upgrader
	box  storage.Box
	dep  string
	addr string
	out  *Outcome
	// state is what the box is left in ("" for none).
	state string
}

// begin marks the box upgrading (ErrBusy when it already is), holds its
// deployment's idle deadline, and records agent-upgrade-started.
func (t *trial) begin(ctx context.Context) error {
	u, now := t.u, t.u.Clock.Now()
	ver := u.Release.Version
	return u.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		cur, err := storage.BoxByRef(ctx, tx, t.box.ID)
		if err != nil {
			return err
		}
		if cur.AgentUpgrade.State == storage.AgentUpgrading {
			return ErrBusy
		}
		if err := storage.SetBoxAgentUpgrade(ctx, tx, t.box.ID, storage.AgentUpgrading, ver, now); err != nil {
			return err
		}
		max := HoldMax(u.report())
		if err := storage.SetReaperHold(ctx, tx, t.box.EnvironmentID, t.dep, storage.ReaperHold{Until: now.Add(max), Reason: storage.HoldUpgrading, Max: max,
			Evidence: fmt.Sprintf("agent upgrade to %s started: the report bound %s plus the restore", ver, u.report())}); err != nil {
			return err
		}
		return event(ctx, tx, t.box, EventStarted, fmt.Sprintf("agent upgrade to %s started on droplet %d", ver, t.box.Resources.DropletID), now)
	})
}

// run installs the release and judges it, restoring on a failure; it
// fills t.out and t.state.
func (t *trial) run(ctx context.Context) {
	u, out := t.u, t.out
	ver := u.Release.Version
	sent := u.Clock.Now()
	res, err := u.Remote.UpgradeAgent(ctx, t.addr, t.box.Resources.DropletID, u.Release)
	out.Arch, out.Before, out.After = res.Arch, res.Before, res.After
	switch {
	case errors.Is(err, sshdeliver.ErrUpgradeInstalled):
		out.Status, out.Reason = StatusSkipped, "already runs "+ver
		out.Detail = fmt.Sprintf("the droplet already runs %s: nothing was downloaded or restarted", ver)
		return
	case err != nil && !replacedMaybe(err):
		out.Status, out.Reason, out.Restore = StatusFailed, ReasonUpgradeError, RestoreNotNeeded
		out.Detail = fmt.Sprintf("agent upgrade to %s failed on droplet %d: %v", ver, t.box.Resources.DropletID, err)
		return
	case err == nil:
		if r, ok := t.await(ctx, sent, "chalupa-agent/"+ver); ok {
			out.Status = StatusUpgraded
			out.Detail = fmt.Sprintf("agent on droplet %d (%s) upgraded: %s -> %s; it reported %s %s after the restart",
				t.box.Resources.DropletID, res.Arch, res.Before, res.After, r.Version, r.At.Sub(sent).Round(time.Second))
			return
		}
	}
	t.restore(ctx, sent, err)
}

// replacedMaybe reports whether an upgrade that failed with err may have
// replaced the binary: the restart failed, or the script's end is unknown.
func replacedMaybe(err error) bool {
	if errors.Is(err, sshdeliver.ErrUpgradeRestart) {
		return true
	}
	for _, k := range []error{sshdeliver.ErrUpgradeArch, sshdeliver.ErrUpgradeDownload, sshdeliver.ErrUpgradeDigest, sshdeliver.ErrUpgradeArchive,
		sshdeliver.ErrUpgradeReplace, sshdeliver.ErrUpgradeNoAgent, sshdeliver.ErrUnreachable, sshdeliver.ErrHostKeyChanged, sshdeliver.ErrAuth} {
		if errors.Is(err, k) {
			return false
		}
	}
	return errors.Is(err, sshdeliver.ErrUpgrade)
}

// await waits up to the report bound for a heartbeat of the box's
// deployment that arrived at or after since with agent version want ("" for any
// version); it returns the last report seen and whether it was one.
func (t *trial) await(ctx context.Context, since time.Time, want string) (storage.AgentReport, bool) {
	u := t.u
	deadline := u.Clock.Now().Add(u.report())
	// Arrivals are stored in milliseconds: one in since's millisecond
	// counts.
	since = since.Truncate(time.Millisecond)
	var last storage.AgentReport
	for {
		r, err := storage.DeploymentAgentReport(ctx, u.DB.Read, t.box.EnvironmentID, t.dep)
		if err == nil && !r.At.Before(since) {
			last = r
			if want == "" || r.Version == want {
				return r, true
			}
		}
		if !u.Clock.Now().Before(deadline) {
			return last, false
		}
		select {
		case <-ctx.Done():
			return last, false
		case <-u.Clock.After(u.Poll):
		}
	}
}

// restore judges a new agent that did not report (or an upgrade whose end
// is unknown, upErr), restores the previous binary and waits for it.
func (t *trial) restore(ctx context.Context, sent time.Time, upErr error) {
	u, out := t.u, t.out
	ver, drop := u.Release.Version, t.box.Resources.DropletID
	out.Status = StatusFailed
	// What the new agent did: a heartbeat since the restart with another
	// version, else what the unit's state says.
	seen, _ := storage.DeploymentAgentReport(ctx, u.DB.Read, t.box.EnvironmentID, t.dep)
	restoreAt := u.Clock.Now()
	rr, rerr := u.Remote.RestoreAgent(ctx, t.addr, drop)
	switch {
	case !seen.At.Before(sent.Truncate(time.Millisecond)) && seen.Version != "chalupa-agent/"+ver && seen.Version != wantVersion(out.Before):
		out.Reason = ReasonWrongVersion
	case rerr == nil && rr.Crashed():
		out.Reason = ReasonCrashed
	default:
		out.Reason = ReasonNeverReported
	}
	what := fmt.Sprintf("agent upgrade to %s failed on droplet %d: %s", ver, drop, t.describe(seen, rr, rerr, upErr))
	if rerr != nil {
		out.Restore, t.state = RestoreNotRun, storage.AgentUpgradeFailed
		out.Detail = fmt.Sprintf("%s; the restore of the previous agent could not run: %v; the box stays upgrade-failed", what, rerr)
		return
	}
	if r, ok := t.await(ctx, restoreAt, wantVersion(rr.Restored)); ok {
		out.Restore = RestoreReported
		out.Detail = fmt.Sprintf("%s; restored %s, which reported %s", what, rr.Restored, r.Version)
		return
	}
	out.Restore, t.state = RestoreSilent, storage.AgentUpgradeFailed
	out.Detail = fmt.Sprintf("%s; restored %s, which did not report within %s; the box stays upgrade-failed", what, rr.Restored, u.report())
}

// describe says which failure it was, in words.
func (t *trial) describe(seen storage.AgentReport, rr sshdeliver.RestoreResult, rerr, upErr error) string {
	switch t.out.Reason {
	case ReasonWrongVersion:
		return fmt.Sprintf("wrong version: its agent reported %s", seen.Version)
	case ReasonCrashed:
		return fmt.Sprintf("crashed: its unit was %s after %d automatic restarts", rr.State, rr.Restarts)
	}
	s := fmt.Sprintf("never reported within %s", t.u.report())
	if upErr != nil {
		s += fmt.Sprintf(" (%v)", upErr)
	}
	if rerr != nil {
		s += "; the unit's state is unknown"
	} else {
		s += fmt.Sprintf("; its unit was %s", rr.State)
	}
	return s
}

// settle records the outcome: the box's state, the hold ended, and
// agent-upgraded or agent-upgrade-failed (none for a skip).
func (t *trial) settle(ctx context.Context) error {
	u, out, now := t.u, t.out, t.u.Clock.Now()
	if out.Status == StatusFailed {
		u.Log.Warn().Str("box", t.box.Name).Int64("droplet", t.box.Resources.DropletID).Str("reason", out.Reason).Str("restore", out.Restore).
			Msg("agent upgrade failed")
	}
	return u.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		if err := storage.SetBoxAgentUpgrade(ctx, tx, t.box.ID, t.state, u.Release.Version, now); err != nil {
			return err
		}
		if err := storage.ClearReaperHold(ctx, tx, t.box.EnvironmentID, t.dep, storage.HoldUpgrading); err != nil {
			return err
		}
		switch out.Status {
		case StatusUpgraded:
			return event(ctx, tx, t.box, EventUpgraded, out.Detail, now)
		case StatusFailed:
			return event(ctx, tx, t.box, EventFailed, out.Detail, now)
		}
		return nil
	})
}

// event records a lifecycle event of kind on the box's droplet's
// deployment, or on its environment when none was recorded. The id is
// unique per event (kind, droplet, time).
func event(ctx context.Context, tx storage.Tx, box storage.Box, kind, msg string, now time.Time) error {
	dep := pulumiexec.DeploymentID(box.Resources.DropletID)
	ok, err := storage.DeploymentExists(ctx, tx, box.EnvironmentID, dep)
	if err != nil {
		return err
	}
	ev := storage.LifecycleEvent{ID: fmt.Sprintf("%s:%s:%d", kind, dep, now.UnixNano()), EnvironmentID: box.EnvironmentID,
		Kind: kind, Message: msg, OccurredAt: now}
	if ok {
		ev.DeploymentID = dep
	}
	_, err = storage.InsertLifecycleEvent(ctx, tx, ev)
	return err
}

// Settle marks every box left upgrading by a process that stopped
// mid-upgrade upgrade-failed, ends its hold and records
// agent-upgrade-failed saying so: nobody watches for its report any more.
// Run it at start, before any upgrade. Errors: database faults.
func Settle(ctx context.Context, db *storage.DB, now time.Time) (int, error) {
	boxes, err := settle(ctx, db, now)
	return len(boxes), err
}

// settle is Settle, returning the boxes it settled.
func settle(ctx context.Context, db *storage.DB, now time.Time) ([]storage.Box, error) {
	boxes, err := storage.BoxesUpgrading(ctx, db.Read)
	if err != nil {
		return nil, err
	}
	for _, b := range boxes {
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			if err := storage.SetBoxAgentUpgrade(ctx, tx, b.ID, storage.AgentUpgradeFailed, b.AgentUpgrade.Version, now); err != nil {
				return err
			}
			if err := storage.ClearReaperHold(ctx, tx, b.EnvironmentID, pulumiexec.DeploymentID(b.Resources.DropletID), storage.HoldUpgrading); err != nil {
				return err
			}
			return event(ctx, tx, b, EventFailed, fmt.Sprintf("agent upgrade to %s on droplet %d was cut by a restart of chalupa: its report was not awaited and no restore ran; check the box (admin box show) and upgrade it again",
				b.AgentUpgrade.Version, b.Resources.DropletID), now)
		})
		if err != nil {
			return nil, err
		}
	}
	return boxes, nil
}
