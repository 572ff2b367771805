package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestQuotaEventWriterRecordsOnce: Record writes a quota-exceeded lifecycle
// event once per stable id (a second Record, as after a restart, inserts
// nothing); the deployment column is set only for a deployment that exists;
// an unknown environment records nothing.
func TestQuotaEventWriterRecordsOnce(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	env := storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-1"})
	w := &ingest.QuotaEventWriter{DB: db}
	at := time.Date(2026, 12, 1, 10, 41, 0, 0, time.UTC)

	for _, tc := range []struct {
		name     string
		ev       ingest.QuotaEvent
		inserted bool
		dep      string // the stored deployment_id, "-" for NULL; "" for no row
	}{
		{"a deployment's warning", ingest.QuotaEvent{ID: "quota:deployment_heartbeats:demo-harbor:dep-1:2026-12-01T10", EnvironmentSlug: "demo-harbor", DeploymentID: "dep-1", Message: "m"}, true, "dep-1"},
		{"the same id again", ingest.QuotaEvent{ID: "quota:deployment_heartbeats:demo-harbor:dep-1:2026-12-01T10", EnvironmentSlug: "demo-harbor", DeploymentID: "dep-1", Message: "m"}, false, "dep-1"},
		{"a deployment never created", ingest.QuotaEvent{ID: "quota:deployment_heartbeats:demo-harbor:dep-new:2026-12-01T10", EnvironmentSlug: "demo-harbor", DeploymentID: "dep-new", Message: "m"}, true, "-"},
		{"an unknown environment", ingest.QuotaEvent{ID: "quota:environment_heartbeats:no-such-env::2026-12-01T10", EnvironmentSlug: "no-such-env", Message: "m"}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ev.At = at
			inserted, err := w.Record(ctx, tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if inserted != tc.inserted {
				t.Fatalf("inserted = %v, want %v", inserted, tc.inserted)
			}
			var dep, kind string
			var n int
			if err := db.Read.QueryRowContext(ctx, `SELECT count(*), coalesce(max(coalesce(deployment_id, '-')), ''), coalesce(max(kind), '') FROM lifecycle_events WHERE id = ?`, tc.ev.ID).Scan(&n, &dep, &kind); err != nil {
				t.Fatal(err)
			}
			if tc.dep == "" {
				if n != 0 {
					t.Fatalf("%d rows, want none", n)
				}
				return
			}
			if n != 1 || dep != tc.dep || kind != ingest.QuotaEventKind {
				t.Fatalf("%d rows, deployment %q, kind %q; want 1, %q, %q", n, dep, kind, tc.dep, ingest.QuotaEventKind)
			}
		})
	}
}
