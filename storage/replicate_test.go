package storage_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestReplicationCloseRightAfterStart writes and closes well within
// Litestream's first monitor tick (one second): the final sync must still
// ship every committed write, as the real `litestream restore` shows.
func TestReplicationCloseRightAfterStart(t *testing.T) {
	t.Parallel()
	litestream := proctest.ToolPath(t, "litestream")
	ctx := context.Background()
	replica := filepath.Join(t.TempDir(), "replica")

	db := storagetest.NewDB(t)
	repl, err := storage.StartReplication(ctx, db.Path, storage.ReplicaConfig{URL: (&url.URL{Scheme: "file", Path: replica}).String()})
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for i := range 20 {
		slug := fmt.Sprintf("early-%02d", i)
		slugs = append(slugs, slug)
		storagetest.Environment(t, db, storage.Environment{Slug: slug})
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := repl.Close(cctx); err != nil {
		t.Fatalf("close replication: %v", err)
	}

	restored := proctest.Restore(t, litestream, (&url.URL{Scheme: "file", Path: replica}).String(), nil)
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
