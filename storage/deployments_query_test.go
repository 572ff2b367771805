package storage_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// ApplyHeartbeat creates a deployment on its first heartbeat (and wakes a
// sunk environment), updates it on the next, and refuses one for an ended
// deployment with ErrDeploymentEnded, writing nothing.
func TestApplyHeartbeat(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	env := storagetest.Environment(t, db, storage.Environment{Status: "sunk"})
	now := time.Now().UTC().Truncate(time.Millisecond)
	hb := storage.Heartbeat{
		DeploymentID: "dep-1", EnvironmentID: env.ID, KeyID: "shared", ReceivedAt: now, SentAt: now,
		AgentVersion: "test/1", LimitMinutes: 30, LastActivityAt: now, IdleDeadlineAt: now.Add(30 * time.Minute),
	}
	apply := func(hb storage.Heartbeat) (created bool, err error) {
		err = db.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			created, err = storage.ApplyHeartbeat(ctx, tx, hb)
			return err
		})
		return created, err
	}
	rows := func() (n int) {
		if err := db.Read.QueryRow(`SELECT count(*) FROM heartbeats`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if created, err := apply(hb); err != nil || !created {
		t.Fatalf("first heartbeat: created %v, %v", created, err)
	}
	var envStatus string
	if err := db.Read.QueryRow(`SELECT status FROM environments WHERE id = ?`, env.ID).Scan(&envStatus); err != nil || envStatus != "active" {
		t.Fatalf("environment after a first heartbeat: %q %v, want active", envStatus, err)
	}
	later := hb
	later.ReceivedAt, later.LastActivityAt, later.IdleDeadlineAt = now.Add(time.Minute), now.Add(time.Minute), now.Add(31*time.Minute)
	if created, err := apply(later); err != nil || created {
		t.Fatalf("second heartbeat: created %v, %v", created, err)
	}
	var deadline int64
	if err := db.Read.QueryRow(`SELECT idle_deadline_at FROM deployments WHERE environment_id = ? AND id = ?`, env.ID, "dep-1").Scan(&deadline); err != nil || deadline != later.IdleDeadlineAt.UnixMilli() {
		t.Fatalf("deadline after the second heartbeat: %d %v", deadline, err)
	}
	if n := rows(); n != 2 {
		t.Fatalf("heartbeat rows = %d, want 2", n)
	}

	ended := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, Status: storage.DeploymentEnded})
	gone := hb
	gone.DeploymentID, gone.ReceivedAt = ended.ID, now.Add(time.Hour)
	before := rows()
	if _, err := apply(gone); !errors.Is(err, storage.ErrDeploymentEnded) {
		t.Fatalf("heartbeat for an ended deployment: %v, want ErrDeploymentEnded", err)
	}
	var last int64
	if err := db.Read.QueryRow(`SELECT coalesce(last_heartbeat_at, 0) FROM deployments WHERE environment_id = ? AND id = ?`, env.ID, ended.ID).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != before || last == gone.ReceivedAt.UnixMilli() {
		t.Fatalf("refused heartbeat wrote: rows %d -> %d, last heartbeat %d", before, n, last)
	}
}

// TestIdleDeadlineNeverMovesBack is the property of docs/operations.md,
// "Heartbeats and deadlines": over random heartbeat sequences (activity
// times delayed and reordered, the limit unchanged), the stored deadline
// never decreases and always equals the latest activity seen plus the
// limit; a change of limit applies to that latest activity.
func TestIdleDeadlineNeverMovesBack(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	env := storagetest.Environment(t, db, storage.Environment{})
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(7, 11))
	apply := func(hb storage.Heartbeat) storage.HeartbeatApplied {
		t.Helper()
		var res storage.HeartbeatApplied
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			res, err = storage.ApplyHeartbeatWithin(ctx, tx, hb, 0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return res
	}
	for run := 0; run < 20; run++ {
		t.Run(fmt.Sprint("sequence ", run), func(t *testing.T) {
			dep := fmt.Sprintf("dep-prop-%d", run)
			limit := int64(1 + rng.IntN(120))
			var latest time.Time
			var prev time.Time
			for i := 0; i < 60; i++ {
				// Activity anywhere in the last 10 minutes of a moving clock:
				// later heartbeats often carry older activity.
				now := base.Add(time.Duration(i) * 30 * time.Second)
				act := now.Add(-time.Duration(rng.IntN(600_000)) * time.Millisecond)
				if act.After(latest) {
					latest = act
				}
				res := apply(storage.Heartbeat{DeploymentID: dep, EnvironmentID: env.ID, KeyID: "k", ReceivedAt: now, SentAt: now,
					AgentVersion: "t/1", LimitMinutes: limit, LastActivityAt: act, IdleDeadlineAt: act.Add(time.Duration(limit) * time.Minute)})
				want := latest.Add(time.Duration(limit) * time.Minute)
				if !res.IdleDeadlineAt.Equal(want) {
					t.Fatalf("heartbeat %d: deadline %v, want latest activity + limit = %v", i, res.IdleDeadlineAt, want)
				}
				if res.IdleDeadlineAt.Before(prev) {
					t.Fatalf("heartbeat %d: deadline moved back from %v to %v", i, prev, res.IdleDeadlineAt)
				}
				prev = res.IdleDeadlineAt
			}
			// A shorter limit applies to the latest activity, not to the
			// (older) activity this heartbeat carries.
			now := base.Add(time.Hour)
			res := apply(storage.Heartbeat{DeploymentID: dep, EnvironmentID: env.ID, KeyID: "k", ReceivedAt: now, SentAt: now,
				AgentVersion: "t/1", LimitMinutes: 1, LastActivityAt: latest.Add(-time.Hour), IdleDeadlineAt: latest})
			if want := latest.Add(time.Minute); !res.IdleDeadlineAt.Equal(want) {
				t.Fatalf("after a limit change: %v, want %v", res.IdleDeadlineAt, want)
			}
		})
	}
}

// TestDropletIDNeverChanges: a deployment's droplet id, once known, is
// fixed; a heartbeat naming another is ErrDropletMismatch with nothing
// written, while one naming none (or the same) is applied.
func TestDropletIDNeverChanges(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	env := storagetest.Environment(t, db, storage.Environment{})
	now := time.Now().UTC().Truncate(time.Millisecond)
	apply := func(droplet int64) error {
		return db.Writer.Do(ctx, func(tx storage.Tx) error {
			_, err := storage.ApplyHeartbeatWithin(ctx, tx, storage.Heartbeat{DeploymentID: "dep-d", EnvironmentID: env.ID, KeyID: "k",
				ReceivedAt: now, SentAt: now, AgentVersion: "t/1", LimitMinutes: 30, LastActivityAt: now, DropletID: droplet}, 0)
			return err
		})
	}
	heartbeats := func() (n int) {
		if err := db.Read.QueryRow(`SELECT count(*) FROM heartbeats WHERE deployment_id = 'dep-d'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name    string
		droplet int64
		want    error
		rows    int
	}{
		{"first heartbeat, droplet unknown", 0, nil, 1},
		{"droplet becomes known", 111, nil, 2},
		{"same droplet", 111, nil, 3},
		{"no droplet named", 0, nil, 4},
		{"another droplet", 222, storage.ErrDropletMismatch, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := apply(tc.droplet); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("apply droplet %d: %v, want %v", tc.droplet, err, tc.want)
			}
			if n := heartbeats(); n != tc.rows {
				t.Fatalf("%d heartbeat rows, want %d", n, tc.rows)
			}
		})
	}
	var droplet int64
	if err := db.Read.QueryRow(`SELECT droplet_id FROM deployments WHERE id = 'dep-d'`).Scan(&droplet); err != nil || droplet != 111 {
		t.Fatalf("droplet_id %d (%v), want 111", droplet, err)
	}
}
