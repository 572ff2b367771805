package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestReplicaURLWithGeneration: the generation becomes the last path
// segment of the replica URL, once, with the query kept.
func TestReplicaURLWithGeneration(t *testing.T) {
	for _, tc := range []struct{ in, gen, want string }{
		{"s3://b/chalupa?endpoint=http://127.0.0.1:9000&region=us-east-1", "g1", "s3://b/chalupa/g1?endpoint=http://127.0.0.1:9000&region=us-east-1"},
		{"s3://b", "g1", "s3://b/g1"},
		{"file:///var/lib/chalupa/replica", "g2", "file:///var/lib/chalupa/replica/g2"},
		{"file:///var/lib/chalupa/replica/g2", "g2", "file:///var/lib/chalupa/replica/g2"},
		{"s3://b/chalupa", "", "s3://b/chalupa"},
	} {
		t.Run(tc.in+" "+tc.gen, func(t *testing.T) {
			got, err := storage.ReplicaURLWithGeneration(tc.in, tc.gen)
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestRollbackRefusesABadPoint: a restore point that fails its integrity
// check, or a file that is not a restore point, is refused and the current
// database is left where it was.
func TestRollbackRefusesABadPoint(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	dbPath := db.Path
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(dbPath), storage.RestorePointDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(dir, "chalupa-20261201T120000.000Z-v11.db")
	if err := os.WriteFile(corrupt, []byte("SQLite format 3\x00 but not a database at all, padded out"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "backup.db")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, point string
		want        error
	}{
		{"corrupt", corrupt, nil},
		{"not a restore point", other, storage.ErrNotRestorePoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := storage.Rollback(ctx, dbPath, tc.point, time.Now())
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Rollback to %s: %v, want a refusal (%v)", tc.name, err, tc.want)
			}
			if _, err := os.Stat(dbPath); err != nil {
				t.Fatalf("the current database was moved after a refusal: %v", err)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dbPath), storage.RolledBackDirName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused rollback made %s: %v", storage.RolledBackDirName, err)
			}
		})
	}
	pts, err := storage.ListRestorePoints(ctx, dir)
	if err != nil || len(pts) != 1 || pts[0].Verified() {
		t.Fatalf("ListRestorePoints: %+v, %v; want the corrupt point, unverified", pts, err)
	}
}
