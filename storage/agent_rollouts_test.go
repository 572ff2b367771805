package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestUpgradingHoldsIdleDeadlineOnly: an agent upgrade's hold puts off a
// deployment's idle deadline until the hold ends, never its session
// expiry; a heartbeat that moves the deadline leaves it (another hold it
// would clear); ClearReaperHold ends it and only it (docs/operations.md,
// "Agent install", under Upgrade).
func TestUpgradingHoldsIdleDeadlineOnly(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	env := storagetest.Environment(t, db, storage.Environment{})
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	write := func(f func(tx storage.Tx) error) {
		t.Helper()
		if err := db.Writer.Do(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	hold := storage.ReaperHold{Until: now.Add(5 * time.Minute), Reason: storage.HoldUpgrading, Evidence: "agent upgrade to v1.1.0", Max: 10 * time.Minute}
	// idle: its idle deadline passed a minute ago, no session expiry.
	// session: its session expired a minute ago, its idle deadline ahead.
	// other: idle-due under another reason's hold.
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: now.Add(-time.Hour), ID: "idle", IdleDeadlineAt: now.Add(-time.Minute), LastHeartbeatAt: now.Add(-20 * time.Minute)})
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: now.Add(-time.Hour), ID: "session", IdleDeadlineAt: now.Add(time.Hour),
		SessionExpiresAt: now.Add(-time.Minute), LastHeartbeatAt: now.Add(-time.Minute)})
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: now.Add(-time.Hour), ID: "other", IdleDeadlineAt: now.Add(-time.Minute), LastHeartbeatAt: now.Add(-20 * time.Minute)})
	write(func(tx storage.Tx) error {
		for _, id := range []string{"idle", "session"} {
			if err := storage.SetReaperHold(ctx, tx, env.ID, id, hold); err != nil {
				return err
			}
		}
		return storage.SetReaperHold(ctx, tx, env.ID, "other", storage.ReaperHold{Until: now.Add(5 * time.Minute), Reason: "backoff", Max: 10 * time.Minute})
	})
	due := func(at time.Time) map[string]bool {
		t.Helper()
		list, err := storage.ReaperDue(ctx, db.Read, at, 10*time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, c := range list {
			out[c.DeploymentID] = true
		}
		return out
	}
	if d := due(now); d["idle"] || !d["session"] || d["other"] {
		t.Fatalf("due while held: %v, want the expired session alone", d)
	}
	if d := due(now.Add(5 * time.Minute)); !d["idle"] || !d["other"] {
		t.Fatalf("due when the holds end: %v, want idle and other", d)
	}
	held, _, err := storage.ReaperHeld(ctx, db.Read, now, 10)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, h := range held {
		reasons[h.DeploymentID] = h.Hold.Reason
	}
	if reasons["idle"] != storage.HoldUpgrading {
		t.Errorf("held %v, want idle under %q", reasons, storage.HoldUpgrading)
	}
	// The old agent heartbeats (deadline moves) before its restart: the
	// upgrading hold stays, the backoff hold is cleared.
	write(func(tx storage.Tx) error {
		for _, id := range []string{"idle", "other"} {
			if _, err := storage.ApplyHeartbeat(ctx, tx, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: id, KeyID: "k", ReceivedAt: now,
				SentAt: now, AgentVersion: "chalupa-agent/v1.0.0", LimitMinutes: 1, LastActivityAt: now.Add(-time.Hour)}); err != nil {
				return err
			}
		}
		return nil
	})
	c, err := storage.ReaperCandidateByID(ctx, db.Read, env.ID, "idle", 10*time.Minute)
	if err != nil || c.HoldReason != storage.HoldUpgrading || !c.HoldUntil.Equal(hold.Until) {
		t.Fatalf("after a heartbeat: %+v %v, want the upgrading hold kept", c, err)
	}
	if c, err := storage.ReaperCandidateByID(ctx, db.Read, env.ID, "other", 10*time.Minute); err != nil || !c.HoldUntil.IsZero() {
		t.Fatalf("after a heartbeat: %+v %v, want the backoff hold cleared", c, err)
	}
	if r, err := storage.DeploymentAgentReport(ctx, db.Read, env.ID, "idle"); err != nil || r.Version != "chalupa-agent/v1.0.0" || !r.At.Equal(now) {
		t.Fatalf("agent report %+v %v", r, err)
	}
	write(func(tx storage.Tx) error {
		if err := storage.ClearReaperHold(ctx, tx, env.ID, "session", "backoff"); err != nil {
			return err
		}
		return storage.ClearReaperHold(ctx, tx, env.ID, "idle", storage.HoldUpgrading)
	})
	if c, err := storage.ReaperCandidateByID(ctx, db.Read, env.ID, "idle", 10*time.Minute); err != nil || !c.HoldUntil.IsZero() {
		t.Fatalf("after ClearReaperHold: %+v %v", c, err)
	}
	if c, err := storage.ReaperCandidateByID(ctx, db.Read, env.ID, "session", 10*time.Minute); err != nil || c.HoldReason != storage.HoldUpgrading || c.HoldUntil.IsZero() {
		t.Fatalf("ClearReaperHold of another reason ended the upgrading hold: %+v %v", c, err)
	}
}

// TestAgentRollouts: one rollout runs at a time; its summary and end are
// stored; a running rollout of another instance is failed at start; a
// box's agent upgrade state is set and cleared.
func TestAgentRollouts(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := storage.AgentRollout{ID: "r1", Version: "v1.1.0", Batch: 5, Summary: []byte(`{}`), InstanceID: "old", CreatedAt: now}
	write := func(f func(tx storage.Tx) error) error { return db.Writer.Do(ctx, f) }
	if err := write(func(tx storage.Tx) error { return storage.InsertAgentRollout(ctx, tx, r) }); err != nil {
		t.Fatal(err)
	}
	r2 := r
	r2.ID = "r2"
	if err := write(func(tx storage.Tx) error { return storage.InsertAgentRollout(ctx, tx, r2) }); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("a second running rollout: %v, want ErrConflict", err)
	}
	var ids []string
	if err := write(func(tx storage.Tx) error {
		var err error
		ids, err = storage.FailInterruptedRollouts(ctx, tx, "new", "interrupted", now.Add(time.Minute))
		return err
	}); err != nil || len(ids) != 1 || ids[0] != "r1" {
		t.Fatalf("interrupted: %v %v", ids, err)
	}
	got, err := storage.AgentRolloutByID(ctx, db.Read, "r1")
	if err != nil || got.Status != storage.RolloutFailed || got.Error != "interrupted" || !got.FinishedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("r1 %+v %v", got, err)
	}
	r2.InstanceID = "new"
	if err := write(func(tx storage.Tx) error { return storage.InsertAgentRollout(ctx, tx, r2) }); err != nil {
		t.Fatal(err)
	}
	if err := write(func(tx storage.Tx) error {
		return storage.UpdateAgentRollout(ctx, tx, "r2", storage.RolloutSucceeded, []byte(`{"upgraded":[]}`), "", now.Add(2*time.Minute))
	}); err != nil {
		t.Fatal(err)
	}
	list, err := storage.ListAgentRollouts(ctx, db.Read, 10)
	if err != nil || len(list) != 2 || list[0].Status != storage.RolloutSucceeded || string(list[0].Summary) != `{"upgraded":[]}` {
		t.Fatalf("list %+v %v", list, err)
	}
	box := storagetest.Box(t, db, storage.Box{Name: "b1"})
	if err := write(func(tx storage.Tx) error {
		return storage.SetBoxAgentUpgrade(ctx, tx, box.ID, storage.AgentUpgrading, "v1.1.0", now)
	}); err != nil {
		t.Fatal(err)
	}
	b, err := storage.BoxByRef(ctx, db.Read, "b1")
	if err != nil || b.AgentUpgrade != (storage.BoxAgentUpgrade{State: storage.AgentUpgrading, Version: "v1.1.0", Since: now}) {
		t.Fatalf("box %+v %v", b.AgentUpgrade, err)
	}
	if up, err := storage.BoxesUpgrading(ctx, db.Read); err != nil || len(up) != 1 {
		t.Fatalf("upgrading %d %v", len(up), err)
	}
	// A launch of the same droplet keeps upgrade-failed; of another
	// droplet ends it.
	if err := write(func(tx storage.Tx) error {
		if err := storage.RecordBoxLaunch(ctx, tx, box.ID, storage.BoxLaunch{DropletID: 7, LaunchedAt: now}, now); err != nil {
			return err
		}
		return storage.SetBoxAgentUpgrade(ctx, tx, box.ID, storage.AgentUpgradeFailed, "v1.1.0", now)
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		droplet int64
		want    string
	}{{7, storage.AgentUpgradeFailed}, {8, ""}} {
		if err := write(func(tx storage.Tx) error {
			return storage.RecordBoxLaunch(ctx, tx, box.ID, storage.BoxLaunch{DropletID: tc.droplet, LaunchedAt: now}, now)
		}); err != nil {
			t.Fatal(err)
		}
		if b, err := storage.BoxByRef(ctx, db.Read, "b1"); err != nil || b.AgentUpgrade.State != tc.want {
			t.Fatalf("after a launch of droplet %d: %+v %v, want %q", tc.droplet, b.AgentUpgrade, err, tc.want)
		}
	}
	if err := write(func(tx storage.Tx) error { return storage.SetBoxAgentUpgrade(ctx, tx, box.ID, "", "", now) }); err != nil {
		t.Fatal(err)
	}
	if b, err := storage.BoxByRef(ctx, db.Read, "b1"); err != nil || b.AgentUpgrade != (storage.BoxAgentUpgrade{}) {
		t.Fatalf("cleared box %+v %v", b.AgentUpgrade, err)
	}
}
