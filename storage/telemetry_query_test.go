package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestTelemetryTablesHaveEveryMetric: the migration's metric columns and
// TelemetryMetrics agree (a metric added on one side only fails here).
func TestTelemetryTablesHaveEveryMetric(t *testing.T) {
	db := storagetest.NewDB(t)
	for _, table := range []string{"telemetry_windows", "telemetry_hourly"} {
		t.Run(table, func(t *testing.T) {
			cols := map[string]bool{}
			rows, err := db.Read.QueryContext(context.Background(), `SELECT name FROM pragma_table_info(?)`, table)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					t.Fatal(err)
				}
				cols[n] = true
			}
			want := 0
			for _, m := range storage.TelemetryMetrics {
				suffixes := []string{"_n", "_sum", "_min", "_max", "_last"}
				if table == "telemetry_hourly" {
					suffixes = append(suffixes, "_last_at")
				}
				for _, s := range suffixes {
					want++
					if !cols[m.Column+s] {
						t.Errorf("%s has no column %s%s", table, m.Column, s)
					}
				}
			}
			metricCols := 0
			for c := range cols {
				for _, m := range storage.TelemetryMetrics {
					if len(c) > len(m.Column) && c[:len(m.Column)+1] == m.Column+"_" {
						metricCols++
						break
					}
				}
			}
			if metricCols != want {
				t.Errorf("%s has %d metric columns, TelemetryMetrics implies %d", table, metricCols, want)
			}
		})
	}
}

// TestEndDeploymentEndsItsSessions: ending a deployment ends its open
// telemetry sessions in the same unit, and leaves other deployments' alone.
func TestEndDeploymentEndsItsSessions(t *testing.T) {
	db := storagetest.NewDB(t)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	w := storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{WindowStart: start})
	other := storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: w.EnvironmentID, WindowStart: start})
	at := start.Add(5 * time.Minute)
	d := storagetest.EndDeployment(t, db, w.EnvironmentID, w.DeploymentID, at)
	if d.Status != storage.DeploymentEnded || !d.EndedAt.Equal(at) {
		t.Fatalf("deployment %s at %v, want ended at %v", d.Status, d.EndedAt, at)
	}
	ctx := context.Background()
	s, err := storage.TelemetrySessionByID(ctx, db.Read, w.EnvironmentID, w.DeploymentID, w.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if !s.EndedAt.Equal(at) || s.EndReason != storage.SessionEndDeploymentEnded || s.Version != 2 {
		t.Fatalf("session ended %v reason %q version %d; want %v, %q, 2", s.EndedAt, s.EndReason, s.Version, at, storage.SessionEndDeploymentEnded)
	}
	o, err := storage.TelemetrySessionByID(ctx, db.Read, other.EnvironmentID, other.DeploymentID, other.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if !o.EndedAt.IsZero() {
		t.Fatalf("another deployment's session ended at %v", o.EndedAt)
	}
	var again bool
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		again, err = storage.EndDeployment(ctx, tx, w.EnvironmentID, w.DeploymentID, at.Add(time.Hour))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if again {
		t.Fatal("ending an ended deployment reported ended")
	}
}
