package agentrollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// fakeRemote is a droplet behind the Remote seam: each step returns what
// the case says, after its hook (a heartbeat the droplet's agent sends).
type fakeRemote struct {
	up        sshdeliver.UpgradeResult
	upErr     error
	onUpgrade func()
	rr        sshdeliver.RestoreResult
	rrErr     error
	onRestore func()
	restores  atomic.Int64
}

func (f *fakeRemote) UpgradeAgent(context.Context, string, int64, agentrelease.Release) (sshdeliver.UpgradeResult, error) {
	if f.onUpgrade != nil {
		f.onUpgrade()
	}
	return f.up, f.upErr
}

func (f *fakeRemote) RestoreAgent(context.Context, string, int64) (sshdeliver.RestoreResult, error) {
	f.restores.Add(1)
	if f.onRestore != nil {
		f.onRestore()
	}
	return f.rr, f.rrErr
}

// rig is one box with a launched droplet (9001) whose deployment has
// heartbeated with agent v1.0.0.
type rig struct {
	t   *testing.T
	db  *storage.DB
	box storage.Box
	u   *agentrollout.Upgrader
}

const dep = "droplet-9001"

func newRig(t *testing.T, remote *fakeRemote) *rig {
	t.Helper()
	db := storagetest.NewDB(t)
	env := storagetest.Environment(t, db, storage.Environment{})
	box := storagetest.Box(t, db, storage.Box{EnvironmentSlug: env.Slug, Config: storage.BoxConfig{Agent: true}})
	ctx := context.Background()
	now := time.Now().UTC()
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE cloud_resource SET droplet_id = 9001, launch_droplet_id = 9001, launch_ipv4 = '127.0.0.1',
			launched_at = ?, resources_at = ? WHERE id = ?`, now.UnixMilli(), now.UnixMilli(), box.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	box, err := storage.BoxByRef(ctx, db.Read, box.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, db: db, box: box, u: &agentrollout.Upgrader{DB: db, Clock: clockwork.NewRealClock(), Remote: remote, Port: 22,
		Release: agentrelease.Release{Version: "v1.1.0"}, Report: 300 * time.Millisecond, Poll: 10 * time.Millisecond}}
	r.heartbeat("v1.0.0")
	return r
}

// heartbeat stores a heartbeat of the box's deployment from agent version.
func (r *rig) heartbeat(version string) {
	r.t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.ApplyHeartbeat(ctx, tx, storage.Heartbeat{EnvironmentID: r.box.EnvironmentID, DeploymentID: dep, KeyID: "k",
			ReceivedAt: now, SentAt: now, AgentVersion: "chalupa-agent/" + version, DropletID: 9001, LimitMinutes: 30, LastActivityAt: now})
		return err
	}); err != nil {
		r.t.Error(err)
	}
}

func (r *rig) state() storage.BoxAgentUpgrade {
	r.t.Helper()
	b, err := storage.BoxByRef(context.Background(), r.db.Read, r.box.ID)
	if err != nil {
		r.t.Fatal(err)
	}
	return b.AgentUpgrade
}

func (r *rig) events(kind string) []string {
	r.t.Helper()
	rows, err := r.db.Read.Query(`SELECT message FROM lifecycle_events WHERE kind = ? ORDER BY occurred_at`, kind)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestUpgraderBox: one box's upgrade is done only when its agent
// heartbeats with the new version; otherwise it is restored and must
// report; the outcome names the failure (wrong version, crashed, never
// reported) and the restore (reported, silent, not run, not needed); a
// restore that cannot run leaves the box upgrade-failed; while it runs
// the box is upgrading and its idle deadline held for HoldMax; the hold
// ends with it (docs/operations.md, "Agent install", under Upgrade).
func TestUpgraderBox(t *testing.T) {
	before := "chalupa-agent v1.0.0 (commit a)"
	for _, tc := range []struct {
		name string
		// setup wires the remote's behaviour with the rig's heartbeats.
		setup                          func(r *rig, f *fakeRemote)
		status, reason, restore, state string
		restores                       int64
		detail                         string
	}{
		{"reports the new version", func(r *rig, f *fakeRemote) {
			f.onUpgrade = func() { r.heartbeat("v1.1.0") }
		}, agentrollout.StatusUpgraded, "", "", "", 0, "reported chalupa-agent/v1.1.0"},
		{"wrong version", func(r *rig, f *fakeRemote) {
			f.onUpgrade = func() { go func() { time.Sleep(20 * time.Millisecond); r.heartbeat("v9.9.9") }() }
			f.rr = sshdeliver.RestoreResult{State: "active", Restored: before}
			f.onRestore = func() { r.heartbeat("v1.0.0") }
		}, agentrollout.StatusFailed, agentrollout.ReasonWrongVersion, agentrollout.RestoreReported, "", 1, "its agent reported chalupa-agent/v9.9.9"},
		{"crashed, restore silent", func(r *rig, f *fakeRemote) {
			f.rr = sshdeliver.RestoreResult{State: "activating", Restarts: 4, Restored: before}
		}, agentrollout.StatusFailed, agentrollout.ReasonCrashed, agentrollout.RestoreSilent, storage.AgentUpgradeFailed, 1, "after 4 automatic restarts"},
		{"never reported, restore unreachable", func(r *rig, f *fakeRemote) {
			f.rrErr = fmt.Errorf("%w within 1m0s on droplet 9001", sshdeliver.ErrUnreachable)
		}, agentrollout.StatusFailed, agentrollout.ReasonNeverReported, agentrollout.RestoreNotRun, storage.AgentUpgradeFailed, 1, "could not run"},
		{"restart failed, restored", func(r *rig, f *fakeRemote) {
			f.upErr = fmt.Errorf("%w (droplet 9001)", sshdeliver.ErrUpgradeRestart)
			f.rr = sshdeliver.RestoreResult{State: "failed", Restored: before}
			f.onRestore = func() { r.heartbeat("v1.0.0") }
		}, agentrollout.StatusFailed, agentrollout.ReasonCrashed, agentrollout.RestoreReported, "", 1, "which reported"},
		{"nothing replaced", func(r *rig, f *fakeRemote) {
			f.upErr = fmt.Errorf("%w (droplet 9001)", sshdeliver.ErrUpgradeDigest)
		}, agentrollout.StatusFailed, agentrollout.ReasonUpgradeError, agentrollout.RestoreNotNeeded, "", 0, "sha256"},
		{"already installed", func(r *rig, f *fakeRemote) {
			f.upErr = fmt.Errorf("%w (droplet 9001)", sshdeliver.ErrUpgradeInstalled)
		}, agentrollout.StatusSkipped, "already runs v1.1.0", "", "", 0, "nothing was downloaded or restarted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRemote{up: sshdeliver.UpgradeResult{Arch: "amd64", Before: before, After: "chalupa-agent v1.1.0"}}
			r := newRig(t, f)
			tc.setup(r, f)
			hook := f.onUpgrade
			f.onUpgrade = func() {
				// While it runs: upgrading, and the idle deadline held.
				if s := r.state(); s.State != storage.AgentUpgrading || s.Version != "v1.1.0" {
					t.Errorf("state while upgrading %+v", s)
				}
				c, err := storage.ReaperCandidateByID(context.Background(), r.db.Read, r.box.EnvironmentID, dep, time.Minute)
				if err != nil || c.HoldReason != storage.HoldUpgrading || time.Until(c.HoldUntil) > agentrollout.HoldMax(r.u.Report) {
					t.Errorf("hold while upgrading %+v %v", c, err)
				}
				if hook != nil {
					hook()
				}
			}
			out, err := r.u.Box(context.Background(), r.box)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tc.status || out.Reason != tc.reason || out.Restore != tc.restore || !strings.Contains(out.Detail, tc.detail) {
				t.Errorf("outcome %+v, want %s %q %q with %q", out, tc.status, tc.reason, tc.restore, tc.detail)
			}
			if n := f.restores.Load(); n != tc.restores {
				t.Errorf("%d restores, want %d", n, tc.restores)
			}
			if s := r.state(); s.State != tc.state {
				t.Errorf("state afterwards %+v, want %q", s, tc.state)
			}
			c, err := storage.ReaperCandidateByID(context.Background(), r.db.Read, r.box.EnvironmentID, dep, time.Minute)
			if err != nil || !c.HoldUntil.IsZero() {
				t.Errorf("hold afterwards %+v %v, want none", c, err)
			}
			kind := map[string]string{agentrollout.StatusUpgraded: agentrollout.EventUpgraded, agentrollout.StatusFailed: agentrollout.EventFailed}[tc.status]
			if kind != "" {
				if ev := r.events(kind); len(ev) != 1 || ev[0] != out.Detail {
					t.Errorf("%s events %q, want the outcome's detail", kind, ev)
				}
			}
			if ev := r.events(agentrollout.EventStarted); len(ev) != 1 {
				t.Errorf("started events %q", ev)
			}
		})
	}
}

// TestUpgraderBusyAndSettle: a box already upgrading is refused (ErrBusy,
// nothing done); Settle, at start, turns a box a stopped process left
// upgrading into upgrade-failed, ends its hold and says so.
func TestUpgraderBusyAndSettle(t *testing.T) {
	f := &fakeRemote{}
	r := newRig(t, f)
	ctx := context.Background()
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		if err := storage.SetBoxAgentUpgrade(ctx, tx, r.box.ID, storage.AgentUpgrading, "v1.1.0", time.Now()); err != nil {
			return err
		}
		return storage.SetReaperHold(ctx, tx, r.box.EnvironmentID, dep, storage.ReaperHold{Until: time.Now().Add(time.Minute), Reason: storage.HoldUpgrading, Max: time.Hour})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.u.Box(ctx, r.box); !errors.Is(err, agentrollout.ErrBusy) {
		t.Fatalf("upgrade of a box upgrading: %v, want ErrBusy", err)
	}
	if n, err := agentrollout.Settle(ctx, r.db, time.Now()); err != nil || n != 1 {
		t.Fatalf("settle: %d %v", n, err)
	}
	if s := r.state(); s.State != storage.AgentUpgradeFailed {
		t.Errorf("state %+v, want upgrade-failed", s)
	}
	if c, err := storage.ReaperCandidateByID(ctx, r.db.Read, r.box.EnvironmentID, dep, time.Minute); err != nil || !c.HoldUntil.IsZero() {
		t.Errorf("hold %+v %v, want none", c, err)
	}
	if ev := r.events(agentrollout.EventFailed); len(ev) != 1 || !strings.Contains(ev[0], "cut by a restart") {
		t.Errorf("events %q", ev)
	}
}
