package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestHeartbeatActivityOnTheServersClock: with ActivityAt set (the ingest
// path, docs/operations.md "Heartbeats and deadlines"), the deployment keeps
// the latest ActivityAt, its deadline is that plus the heartbeat's limit and
// never later than ReceivedAt plus the limit, and the heartbeat row keeps
// the agent's own LastActivityAt. A late heartbeat is stored (late = 1)
// and changes nothing on its deployment, yet is still refused for an ended
// deployment or another droplet.
func TestHeartbeatActivityOnTheServersClock(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	env := storagetest.Environment(t, db, storage.Environment{})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	apply := func(hb storage.Heartbeat) (storage.HeartbeatApplied, error) {
		var res storage.HeartbeatApplied
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			res, err = storage.ApplyHeartbeatWithin(ctx, tx, hb, 0)
			return err
		})
		return res, err
	}
	type row struct {
		activity, deadline, last int64
		ci                       bool
		droplet                  any
	}
	read := func(dep string) row {
		t.Helper()
		var r row
		if err := db.Read.QueryRow(`SELECT last_activity_at, idle_deadline_at, last_heartbeat_at, ci_active, droplet_id FROM deployments WHERE id = ?`, dep).
			Scan(&r.activity, &r.deadline, &r.last, &r.ci, &r.droplet); err != nil {
			t.Fatal(err)
		}
		return r
	}
	hb := func(received, activity time.Time, limit int64) storage.Heartbeat {
		return storage.Heartbeat{
			DeploymentID: "dep-1", EnvironmentID: env.ID, KeyID: "env_x", ReceivedAt: received, SentAt: received.Add(-4 * time.Minute),
			AgentVersion: "test/1", LimitMinutes: limit, LastActivityAt: activity.Add(-4 * time.Minute), ActivityAt: activity,
			IdleDeadlineAt: activity.Add(time.Duration(limit) * time.Minute),
		}
	}
	steps := []struct {
		name         string
		hb           storage.Heartbeat
		wantActivity time.Time
		wantDeadline time.Time
	}{
		{"first heartbeat", hb(t0, t0.Add(-time.Minute), 30), t0.Add(-time.Minute), t0.Add(29 * time.Minute)},
		{"newer activity", hb(t0.Add(time.Minute), t0.Add(30*time.Second), 30), t0.Add(30 * time.Second), t0.Add(30*time.Minute + 30*time.Second)},
		{"older activity keeps the latest", hb(t0.Add(2*time.Minute), t0, 30), t0.Add(30 * time.Second), t0.Add(30*time.Minute + 30*time.Second)},
		{"a lowered limit applies", hb(t0.Add(3*time.Minute), t0, 10), t0.Add(30 * time.Second), t0.Add(10*time.Minute + 30*time.Second)},
		// The server's clock stepped back an hour: the stored activity is
		// ahead of the arrival, and the deadline is the arrival + limit.
		{"capped at arrival + limit", hb(t0.Add(-time.Hour), t0.Add(-time.Hour-time.Minute), 10), t0.Add(30 * time.Second), t0.Add(-time.Hour + 10*time.Minute)},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			res, err := apply(s.hb)
			if err != nil {
				t.Fatal(err)
			}
			r := read("dep-1")
			if r.activity != s.wantActivity.UnixMilli() || r.deadline != s.wantDeadline.UnixMilli() || !res.IdleDeadlineAt.Equal(s.wantDeadline) {
				t.Fatalf("activity %s, deadline %s (answered %s); want %s, %s", time.UnixMilli(r.activity).UTC(), time.UnixMilli(r.deadline).UTC(),
					res.IdleDeadlineAt, s.wantActivity, s.wantDeadline)
			}
		})
	}
	var sent int64
	if err := db.Read.QueryRow(`SELECT last_activity_at FROM heartbeats WHERE deployment_id = 'dep-1' ORDER BY id LIMIT 1`).Scan(&sent); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(-5 * time.Minute).UnixMilli(); sent != want {
		t.Fatalf("heartbeat row's last_activity_at %d, want the agent's own %d", sent, want)
	}

	t.Run("late", func(t *testing.T) {
		before := read("dep-1")
		late := hb(t0.Add(4*time.Minute), t0.Add(4*time.Minute), 60)
		late.Late, late.CIActive, late.DropletID = true, true, 77
		res, err := apply(late)
		if err != nil {
			t.Fatal(err)
		}
		if got := read("dep-1"); got != before || res.IdleDeadlineAt.UnixMilli() != before.deadline || res.Created {
			t.Fatalf("a late heartbeat moved the deployment: %+v, was %+v (answered %+v)", got, before, res)
		}
		var n int
		if err := db.Read.QueryRow(`SELECT count(*) FROM heartbeats WHERE deployment_id = 'dep-1' AND late = 1`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d late heartbeat rows (%v), want 1", n, err)
		}
		if n := countRows(t, db, `SELECT count(*) FROM heartbeats WHERE deployment_id = 'dep-1' AND late IS NULL`); n != len(steps) {
			t.Fatalf("%d heartbeat rows not late, want %d", n, len(steps))
		}
	})
	t.Run("late, another droplet", func(t *testing.T) {
		storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-drop", DropletID: 5})
		late := hb(t0, t0, 30)
		late.DeploymentID, late.Late, late.DropletID = "dep-drop", true, 6
		if _, err := apply(late); !errors.Is(err, storage.ErrDropletMismatch) {
			t.Fatalf("late heartbeat naming another droplet: %v, want ErrDropletMismatch", err)
		}
	})
	t.Run("late, ended", func(t *testing.T) {
		storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-ended", Status: storage.DeploymentEnded})
		late := hb(t0, t0, 30)
		late.DeploymentID, late.Late = "dep-ended", true
		if _, err := apply(late); !errors.Is(err, storage.ErrDeploymentEnded) {
			t.Fatalf("late heartbeat of an ended deployment: %v, want ErrDeploymentEnded", err)
		}
	})
}

func countRows(t *testing.T, db *storage.DB, query string) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
