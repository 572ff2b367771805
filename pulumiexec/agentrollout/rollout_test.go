package agentrollout_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// fleetRemote is a fleet behind the Remote seam: each droplet reports the
// new version after its upgrade unless it is in bad, which never reports
// (and whose restore reports the old version); it records the order of
// upgrades and how many ran at once.
type fleetRemote struct {
	db      *storage.DB
	envID   int64
	bad     map[int64]bool
	mu      sync.Mutex
	order   []int64
	running int
	most    int
}

func (f *fleetRemote) beat(id int64, version string) {
	ctx := context.Background()
	now := time.Now().UTC()
	_ = f.db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.ApplyHeartbeat(ctx, tx, storage.Heartbeat{EnvironmentID: f.envID, DeploymentID: fmt.Sprintf("droplet-%d", id), KeyID: "k",
			ReceivedAt: now, SentAt: now, AgentVersion: "chalupa-agent/" + version, DropletID: id, LimitMinutes: 30, LastActivityAt: now})
		return err
	})
}

func (f *fleetRemote) UpgradeAgent(_ context.Context, _ string, id int64, rel agentrelease.Release) (sshdeliver.UpgradeResult, error) {
	f.mu.Lock()
	f.order = append(f.order, id)
	f.running++
	f.most = max(f.most, f.running)
	f.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // long enough for a batch to overlap
	f.mu.Lock()
	f.running--
	f.mu.Unlock()
	if !f.bad[id] {
		f.beat(id, rel.Version)
	}
	return sshdeliver.UpgradeResult{Arch: "amd64", Before: "chalupa-agent v1.0.0", After: "chalupa-agent " + rel.Version}, nil
}

func (f *fleetRemote) RestoreAgent(_ context.Context, _ string, id int64) (sshdeliver.RestoreResult, error) {
	f.beat(id, "v1.0.0")
	return sshdeliver.RestoreResult{State: "active", Restored: "chalupa-agent v1.0.0"}, nil
}

// TestManagerRollout: a rollout upgrades one box alone, then batches at
// once; a box without a droplet is skipped; it stops after the batch in
// which a box failed, leaving the rest not tried; one rollout at a time;
// Recover fails a rollout a stopped process left running
// (docs/operations.md, "Agent install", under Upgrade).
func TestManagerRollout(t *testing.T) {
	db := storagetest.NewDB(t)
	env := storagetest.Environment(t, db, storage.Environment{})
	ctx := context.Background()
	var boxes []storage.Box
	for i := range 6 {
		b := storagetest.Box(t, db, storage.Box{EnvironmentSlug: env.Slug, Name: fmt.Sprintf("m-%d", i), Config: storage.BoxConfig{Agent: true}})
		if i != 1 { // m-1 has no droplet
			id := int64(100 + i)
			if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
				_, err := tx.ExecContext(ctx, `UPDATE cloud_resource SET droplet_id = ?, launch_droplet_id = ?, launch_ipv4 = '127.0.0.1', launched_at = 1, resources_at = 1 WHERE id = ?`, id, id, b.ID)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		b, err := storage.BoxByRef(ctx, db.Read, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		boxes = append(boxes, b)
	}
	// m-4 (droplet 104) never reports: batches are [m-0] [m-1 skipped]
	// [m-2 m-3] [m-4 m-5].
	remote := &fleetRemote{db: db, envID: env.ID, bad: map[int64]bool{104: true}}
	m := &agentrollout.Manager{Instance: "this", Upgrader: &agentrollout.Upgrader{DB: db, Clock: clockwork.NewRealClock(), Remote: remote, Port: 22,
		Release: agentrelease.Release{Version: "v1.1.0"}, Report: 300 * time.Millisecond, Poll: 10 * time.Millisecond}}
	t.Cleanup(m.Close)
	r, err := m.Start(ctx, env.Slug, boxes, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, env.Slug, boxes, 2); err != agentrollout.ErrRolloutRunning {
		t.Fatalf("a second rollout: %v, want ErrRolloutRunning", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.Status == storage.RolloutRunning {
		if time.Now().After(deadline) {
			t.Fatal("the rollout did not end")
		}
		time.Sleep(20 * time.Millisecond)
		if r, err = storage.AgentRolloutByID(ctx, db.Read, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	s := adminapi.DecodeRolloutSummary(r.Summary)
	names := func(os []adminapi.AgentUpgradeOutcome) []string {
		var out []string
		for _, o := range os {
			out = append(out, o.Box)
		}
		slices.Sort(out)
		return out
	}
	if r.Status != storage.RolloutFailed || !slices.Equal(names(s.Upgraded), []string{"m-0", "m-2", "m-3", "m-5"}) ||
		!slices.Equal(names(s.Skipped), []string{"m-1"}) || !slices.Equal(names(s.Failed), []string{"m-4"}) || len(s.NotTried) != 0 {
		t.Fatalf("rollout %s: %+v", r.Status, s)
	}
	remote.mu.Lock()
	order, most := remote.order, remote.most
	remote.mu.Unlock()
	if order[0] != 100 || most != 2 {
		t.Errorf("upgrade order %v, at most %d at once; want droplet 100 alone first, then two at once", order, most)
	}

	// Stopped at the failure: with m-2 bad, m-3 (its batch) runs and the
	// rest are not tried.
	remote2 := &fleetRemote{db: db, envID: env.ID, bad: map[int64]bool{102: true}}
	m.Upgrader.Remote = remote2
	m.Upgrader.Release.Version = "v1.2.0"
	r, err = m.Start(ctx, env.Slug, boxes, 2)
	if err != nil {
		t.Fatal(err)
	}
	for r.Status == storage.RolloutRunning {
		time.Sleep(20 * time.Millisecond)
		if r, err = storage.AgentRolloutByID(ctx, db.Read, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	s = adminapi.DecodeRolloutSummary(r.Summary)
	if r.Status != storage.RolloutFailed || !slices.Equal(names(s.Failed), []string{"m-2"}) || !slices.Equal(s.NotTried, []string{"m-4", "m-5"}) {
		t.Fatalf("rollout %s: %+v, want m-2 failed and m-4, m-5 not tried", r.Status, s)
	}

	// A running rollout of a stopped process is failed at start.
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.InsertAgentRollout(ctx, tx, storage.AgentRollout{ID: "old", Version: "v1", Batch: 1, Summary: []byte(`{}`), InstanceID: "gone", CreatedAt: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if old, err := storage.AgentRolloutByID(ctx, db.Read, "old"); err != nil || old.Status != storage.RolloutFailed {
		t.Fatalf("the stopped process's rollout: %+v %v", old, err)
	}
}
