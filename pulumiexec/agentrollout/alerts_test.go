package agentrollout_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// fakeSetter records every report; it stands for the alerter, whose own
// tests cover what a report writes and sends.
type fakeSetter struct {
	mu    sync.Mutex
	calls []alertCall
}

type alertCall struct {
	kind    string
	subject alerts.Subject
	holds   bool
	detail  string
}

func (s *fakeSetter) Set(_ context.Context, kind string, subject alerts.Subject, holds bool, detail string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, alertCall{kind, subject, holds, detail})
	return nil
}

// reports are the holds values reported, in order, each checked to be
// agent-upgrade-failed on box.
func (s *fakeSetter) reports(t *testing.T, box string) []bool {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []bool{}
	for _, c := range s.calls {
		if c.kind != alerts.KindAgentUpgradeFailed || c.subject != (alerts.Subject{Kind: alerts.SubjectBox, ID: box}) {
			t.Errorf("reported %+v, want agent-upgrade-failed on box %s", c, box)
		}
		if c.holds && !strings.Contains(c.detail, "v1.1.0") {
			t.Errorf("detail %q does not name the version", c.detail)
		}
		out = append(out, c.holds)
	}
	return out
}

func sameBools(a []bool, b ...bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUpgradeFailedAlert: an upgrade that leaves the box upgrade-failed
// (the restored agent is silent) raises agent-upgrade-failed on the box,
// once however many such upgrades follow; a later upgrade that succeeds
// ends it; raised again, it ends when a converge job leaves the box
// without its droplet (BoxChanged); a box a stopped process left
// upgrading raises it at start (Recover) (docs/operations.md, "Alerts",
// under Detectors).
func TestUpgradeFailedAlert(t *testing.T) {
	before := "chalupa-agent v1.0.0 (commit a)"
	f := &fakeRemote{up: sshdeliver.UpgradeResult{Arch: "amd64", Before: before, After: "chalupa-agent v1.1.0"}}
	r := newRig(t, f)
	set := &fakeSetter{}
	r.u.Alerts = set
	ctx := context.Background()
	upgrade := func(ok bool) {
		t.Helper()
		f.onUpgrade, f.rr = nil, sshdeliver.RestoreResult{State: "activating", Restarts: 4, Restored: before}
		if ok {
			f.onUpgrade = func() { r.heartbeat("v1.1.0") }
		}
		out, err := r.u.Box(ctx, r.box)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: agentrollout.StatusUpgraded, false: agentrollout.StatusFailed}[ok]; out.Status != want {
			t.Fatalf("outcome %+v, want %s", out, want)
		}
	}
	upgrade(false)
	upgrade(false)
	if got := set.reports(t, r.box.Name); !sameBools(got, true) {
		t.Fatalf("two silent restores reported %v, want [true]", got)
	}
	upgrade(true)
	if got := set.reports(t, r.box.Name); !sameBools(got, true, false) {
		t.Fatalf("a later upgrade reported %v, want [true false]", got)
	}
	upgrade(false)
	r.u.BoxChanged(ctx, r.box) // a job that changed nothing
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.RecordBoxResources(ctx, tx, r.box.ID, storage.BoxResources{}, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	r.u.BoxChanged(ctx, r.box) // a destroy: the droplet is gone
	if got := set.reports(t, r.box.Name); !sameBools(got, true, false, true, false) {
		t.Fatalf("a destroy reported %v, want [true false true false]", got)
	}

	t.Run("a job of a box that never failed reports nothing", func(t *testing.T) {
		other := &fakeSetter{}
		u := &agentrollout.Upgrader{DB: r.db, Alerts: other}
		u.BoxChanged(ctx, storagetest.Box(t, r.db, storage.Box{}))
		if len(other.calls) != 0 {
			t.Fatalf("reported %+v", other.calls)
		}
	})

	t.Run("a box left upgrading raises it at start", func(t *testing.T) {
		r := newRig(t, &fakeRemote{})
		set := &fakeSetter{}
		r.u.Alerts = set
		if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			return storage.SetBoxAgentUpgrade(ctx, tx, r.box.ID, storage.AgentUpgrading, "v1.1.0", time.Now())
		}); err != nil {
			t.Fatal(err)
		}
		m := &agentrollout.Manager{Upgrader: r.u, Instance: "now"}
		t.Cleanup(m.Close)
		if err := m.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if got := set.reports(t, r.box.Name); !sameBools(got, true) {
			t.Fatalf("Recover reported %v, want [true]", got)
		}
	})
}

// TestUpgradeFailedCheck: agent-upgrade-failed's re-check at start holds
// while the box is upgrade-failed on its droplet, and not once the box was
// launched anew, nor for a box that does not exist.
func TestUpgradeFailedCheck(t *testing.T) {
	r := newRig(t, &fakeRemote{})
	ctx := context.Background()
	check := agentrollout.AlertCheck(r.db)
	subject := alerts.Subject{Kind: alerts.SubjectBox, ID: r.box.Name}
	holds := func(s alerts.Subject) bool {
		t.Helper()
		h, detail, err := check(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if h && detail == "" {
			t.Error("holds without a detail")
		}
		return h
	}
	if holds(subject) {
		t.Error("holds for a box never upgraded")
	}
	failedAt := time.Now()
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.SetBoxAgentUpgrade(ctx, tx, r.box.ID, storage.AgentUpgradeFailed, "v1.1.0", failedAt)
	}); err != nil {
		t.Fatal(err)
	}
	if !holds(subject) {
		t.Error("does not hold for a box upgrade-failed")
	}
	if holds(alerts.Subject{Kind: alerts.SubjectBox, ID: "gone"}) {
		t.Error("holds for a box that does not exist")
	}
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.RecordBoxLaunch(ctx, tx, r.box.ID, storage.BoxLaunch{DropletID: 9002, IPv4: "127.0.0.2", LaunchedAt: failedAt.Add(time.Minute)}, failedAt.Add(time.Minute))
	}); err != nil {
		t.Fatal(err)
	}
	if holds(subject) {
		t.Error("holds after the box was launched anew")
	}
}
