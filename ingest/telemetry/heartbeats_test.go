package telemetry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// heartbeatTimes returns each deployment's stored heartbeat times, oldest
// first.
func heartbeatTimes(t *testing.T, db *storage.DB) map[string][]time.Time {
	t.Helper()
	rows, err := db.Read.QueryContext(context.Background(), `SELECT deployment_id, received_at FROM heartbeats ORDER BY received_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]time.Time{}
	for rows.Next() {
		var dep string
		var at int64
		if err := rows.Scan(&dep, &at); err != nil {
			t.Fatal(err)
		}
		out[dep] = append(out[dep], time.UnixMilli(at).UTC())
	}
	return out
}

func countRows(t *testing.T, db *storage.DB, table string) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHeartbeatPruning: heartbeats older than 7 days are deleted except
// each deployment's latest (an ended deployment that went quiet keeps its
// last one however old); recent heartbeats and every lifecycle event stay.
// The walk runs in several small steps (limit 3) as well as in one pass.
func TestHeartbeatPruning(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cutoff := now.Add(-HeartbeatRetention)
	for _, tc := range []struct {
		name string
		tick bool // a whole retention pass, else storage steps of 3 rows
	}{{"retention-pass", true}, {"steps-of-3", false}} {
		t.Run(tc.name, func(t *testing.T) {
			db := storagetest.NewDB(t)
			env := storagetest.Environment(t, db, storage.Environment{})
			// busy: a heartbeat every day for 10 days and up to now.
			busyStart := now.Add(-10 * 24 * time.Hour)
			busy := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: busyStart})
			// quiet: heartbeats 12 and 9 days ago, nothing since (ended).
			quiet := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: now.Add(-12 * 24 * time.Hour)})
			storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: quiet.ID, ReceivedAt: now.Add(-9 * 24 * time.Hour)})
			storagetest.EndDeployment(t, db, env.ID, quiet.ID, now.Add(-9*24*time.Hour))
			// lone: one heartbeat 30 days ago.
			lone := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, LaunchedAt: now.Add(-30 * 24 * time.Hour)})
			for d := 1; d <= 10; d++ {
				storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: busy.ID, ReceivedAt: busyStart.Add(time.Duration(d) * 24 * time.Hour)})
			}
			// Exactly at the cutoff is kept (older than 7 days is pruned).
			storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: busy.ID, ReceivedAt: cutoff})
			for i := range 5 {
				if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
					_, err := tx.ExecContext(context.Background(),
						`INSERT INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, occurred_at) VALUES (?, ?, ?, ?, 'test', ?)`,
						fmt.Sprintf("ev-%d", i), storage.PlatformOrgID, env.ID, quiet.ID, now.Add(-40*24*time.Hour).UnixMilli())
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			before := heartbeatTimes(t, db)

			var pruned int64
			if tc.tick {
				r, _ := newRetention(db, now)
				rep, err := r.Tick(context.Background(), RetentionTriggerSchedule)
				if err != nil {
					t.Fatal(err)
				}
				pruned = rep.HeartbeatsPruned
			} else {
				var after int64
				for steps := 0; ; steps++ {
					if steps > 100 {
						t.Fatal("the walk did not end")
					}
					var n int64
					var done bool
					if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
						var err error
						n, after, done, err = storage.PruneHeartbeats(context.Background(), tx, after, cutoff, 3)
						return err
					}); err != nil {
						t.Fatal(err)
					}
					pruned += n
					if done {
						break
					}
				}
			}

			got := heartbeatTimes(t, db)
			want := map[string][]time.Time{
				busy.ID:  nil,
				quiet.ID: {now.Add(-9 * 24 * time.Hour)},
				lone.ID:  {now.Add(-30 * 24 * time.Hour)},
			}
			for _, at := range before[busy.ID] {
				if !at.Before(cutoff) {
					want[busy.ID] = append(want[busy.ID], at)
				}
			}
			for dep, w := range want {
				if fmt.Sprint(got[dep]) != fmt.Sprint(w) {
					t.Errorf("deployment %s keeps %v, want %v", dep, got[dep], w)
				}
			}
			var total, left int
			for dep := range before {
				total += len(before[dep])
				left += len(got[dep])
			}
			if pruned != int64(total-left) {
				t.Errorf("reported %d pruned, %d were deleted", pruned, total-left)
			}
			if n := countRows(t, db, "lifecycle_events"); n != 5 {
				t.Errorf("%d lifecycle events left, want all 5", n)
			}
		})
	}
}
