package storage

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestPruneHeartbeatsPlan: the heartbeat prune reads heartbeats by rowid
// range and finds each row's deployment by the deployments primary key —
// never a scan of either table, and no index on heartbeats is needed
// (schema/0009_heartbeats_unindexed.sql; docs/operations.md, "Storage and
// the writer"). It also checks that migration dropped the per-deployment
// index every heartbeat used to land on.
func TestPruneHeartbeatsPlan(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "chalupa.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Migrate(ctx, MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'heartbeats'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("heartbeats has %d indexes, want none but its rowid", n)
	}
	rows, err := db.Read.QueryContext(ctx, "EXPLAIN QUERY PLAN "+pruneHeartbeatsSQL, 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(plan, "\n")
	for _, want := range []string{"SEARCH h USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)", "SEARCH d USING INDEX sqlite_autoindex_deployments_1 (environment_id=? AND id=?)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("plan lacks %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "SCAN") {
		t.Errorf("plan scans a table:\n%s", joined)
	}
}
