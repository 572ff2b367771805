package storage_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestSessionPolicyOnEveryLaunchPath: in an environment with a session
// policy, a deployment created by a `launched` event or adopted by
// inventory expires at its launch + the maximum; in one without, it has no
// expiry (docs/operations.md, "Session policies").
func TestSessionPolicyOnEveryLaunchPath(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	bounded := storagetest.Environment(t, db, storage.Environment{})
	open := storagetest.Environment(t, db, storage.Environment{})
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, _, err := storage.SetSessionPolicy(ctx, tx, storage.SessionPolicy{EnvironmentID: bounded.ID, Kind: storage.SessionKindDemo, MaxSeconds: 5400, UpdatedAt: at})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	expiry := func(env int64, id string) time.Time {
		t.Helper()
		var v sql.NullInt64
		if err := db.Read.QueryRow(`SELECT session_expires_at FROM deployments WHERE environment_id = ? AND id = ?`, env, id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if !v.Valid {
			return time.Time{}
		}
		return time.UnixMilli(v.Int64).UTC()
	}
	for _, tc := range []struct {
		name string
		env  int64
		want time.Time
	}{
		{"with a policy", bounded.ID, at.Add(90 * time.Minute)},
		{"without", open.ID, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
				if _, err := storage.ApplyLaunch(ctx, tx, storage.Launch{EnvironmentID: tc.env, DeploymentID: "launched-1", At: at, LimitMinutes: 30}, 0); err != nil {
					return err
				}
				_, err := storage.AdoptDroplet(ctx, tx, storage.AdoptedDroplet{EnvironmentID: tc.env, DeploymentID: "droplet-7", DropletID: 7 + tc.env*100,
					CreatedAt: at, ObservedAt: at.Add(time.Hour)})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"launched-1", "droplet-7"} {
				if got := expiry(tc.env, id); !got.Equal(tc.want) {
					t.Errorf("%s: expiry %s, want %s", id, got, tc.want)
				}
			}
		})
	}
}
