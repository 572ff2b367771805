package storage_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/storage"
)

// TestReplicationCloseRightAfterStart writes and closes well within
// Litestream's first monitor tick (one second): the final sync must still
// ship every committed write, as the real `litestream restore` shows.
func TestReplicationCloseRightAfterStart(t *testing.T) {
	t.Parallel()
	litestream := daemontest.ToolPath(t, "litestream")
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "chalupa.db")
	replica := filepath.Join(dir, "replica")

	db, err := storage.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	repl, err := storage.StartReplication(ctx, path, storage.ReplicaConfig{URL: (&url.URL{Scheme: "file", Path: replica}).String()})
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for i := range 20 {
		slug := fmt.Sprintf("early-%02d", i)
		slugs = append(slugs, slug)
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			_, err := storage.CreateEnvironment(ctx, tx, slug, slug, time.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := repl.Close(cctx); err != nil {
		t.Fatalf("close replication: %v", err)
	}

	restored := daemontest.Restore(t, litestream, (&url.URL{Scheme: "file", Path: replica}).String(), nil)
	if err := storage.IntegrityCheck(ctx, restored); err != nil {
		t.Fatal(err)
	}
	ro, err := storage.OpenReadOnly(ctx, restored)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, s := range slugs {
		if _, err := storage.EnvironmentBySlug(ctx, ro.Read, s); err != nil {
			t.Errorf("restored replica lacks %s: %v", s, err)
		}
	}
}
