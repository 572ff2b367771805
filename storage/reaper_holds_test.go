package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestReanchorReaperHolds: a hold whose stored end lies further ahead than
// its own maximum is re-anchored to now + maximum (once: a second pass
// moves nothing); a hold within its maximum is left; a hold stored
// without a maximum (before migration 0028) is bounded by
// LegacyReaperHoldMax; ReaperHeld lists every held active deployment with
// its reason, evidence and end.
func TestReanchorReaperHolds(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	env := storagetest.Environment(t, db, storage.Environment{})
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"dep-wrong", "dep-right", "dep-exact", "dep-legacy", "dep-ended"} {
		storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: id})
	}
	write := func(f func(tx storage.Tx) error) {
		t.Helper()
		if err := db.Writer.Do(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	write(func(tx storage.Tx) error {
		for id, h := range map[string]storage.ReaperHold{
			"dep-wrong": {Until: now.Add(2 * time.Hour), Reason: "grace", Evidence: "no heartbeat since the start", Max: time.Minute},
			"dep-right": {Until: now.Add(30 * time.Second), Reason: "contact", Evidence: "refused only for its timestamp", Max: time.Minute},
			// Exactly its maximum, not a whole millisecond: never beyond it.
			"dep-exact": {Until: now.Add(31*time.Second + 500*time.Microsecond), Reason: "rate-limited", Max: 31*time.Second + 500*time.Microsecond},
			"dep-ended": {Until: now.Add(2 * time.Hour), Reason: "guard", Max: time.Hour},
		} {
			if err := storage.SetReaperHold(ctx, tx, env.ID, id, h); err != nil {
				return err
			}
		}
		if err := storage.SetReaperHold(ctx, tx, env.ID, "dep-right", storage.ReaperHold{Until: now, Reason: "x"}); err == nil {
			t.Error("a hold without a maximum was stored")
		}
		// As a release before migration 0028 stores it.
		if _, err := tx.ExecContext(ctx, `UPDATE deployments SET reaper_hold_until = ? WHERE id = 'dep-legacy'`, now.Add(3*time.Hour).UnixMilli()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE deployments SET status = 'ended' WHERE id = 'dep-ended'`)
		return err
	})

	held, total, err := storage.ReaperHeld(ctx, db.Read, now, 10)
	if err != nil {
		t.Fatal(err)
	}
	if total != 4 || len(held) != 4 || held[0].DeploymentID != "dep-right" || held[0].Hold.Reason != "contact" ||
		held[0].Hold.Evidence != "refused only for its timestamp" || !held[0].Hold.Until.Equal(now.Add(30*time.Second)) {
		t.Fatalf("held %+v (total %d), want four active ones, the earliest end first", held, total)
	}
	if n, err := storage.ReaperHoldsBeyondMax(ctx, db.Read, now); err != nil || n != 2 {
		t.Fatalf("beyond their maximum: %d, %v; want 2", n, err)
	}
	var moved []storage.Reanchored
	write(func(tx storage.Tx) error {
		moved, err = storage.ReanchorReaperHolds(ctx, tx, now, 10)
		return err
	})
	got := map[string]storage.Reanchored{}
	for _, m := range moved {
		got[m.DeploymentID] = m
	}
	if w := got["dep-wrong"]; len(moved) != 2 || !w.Was.Equal(now.Add(2*time.Hour)) || !w.Hold.Until.Equal(now.Add(time.Minute)) {
		t.Fatalf("moved %+v, want dep-wrong from %v to %v", moved, now.Add(2*time.Hour), now.Add(time.Minute))
	}
	if l := got["dep-legacy"]; !l.Hold.Until.Equal(now.Add(storage.LegacyReaperHoldMax)) || l.Hold.Max != storage.LegacyReaperHoldMax {
		t.Fatalf("legacy hold moved to %+v, want now + %v", l, storage.LegacyReaperHoldMax)
	}
	write(func(tx storage.Tx) error {
		moved, err = storage.ReanchorReaperHolds(ctx, tx, now, 10)
		return err
	})
	if len(moved) != 0 {
		t.Fatalf("a second pass moved %+v", moved)
	}
	c, err := storage.ReaperCandidateByID(ctx, db.Read, env.ID, "dep-wrong", time.Minute)
	if err != nil || c.HoldReason != "grace" || !c.HoldUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("candidate %+v, %v: want the grace hold until %v", c, err, now.Add(time.Minute))
	}
}
