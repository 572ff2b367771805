package storage_test

import (
	"context"
	"errors"
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
	later.ReceivedAt, later.IdleDeadlineAt = now.Add(time.Minute), now.Add(31*time.Minute)
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
