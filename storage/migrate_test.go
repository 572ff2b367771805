package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/schema"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// extraMigration is a migration this binary does not ship, numbered after
// every real one, for tests that need a pending migration.
const extraName, extraVersion = "9999_migrate_test_extra.sql", 9999

const extraMigration = `-- +goose Up
CREATE TABLE migrate_test_extra (id INTEGER PRIMARY KEY, note TEXT NOT NULL) STRICT;
INSERT INTO migrate_test_extra (note) VALUES ('added by 9999');
-- +goose Down
DROP TABLE migrate_test_extra;
`

// schemaFiles returns the embedded migration file names in version order.
func schemaFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations in schema.FS (%v)", err)
	}
	sort.Slice(names, func(i, j int) bool { return version(t, names[i]) < version(t, names[j]) })
	return names
}

// version parses NNNN of NNNN_name.sql.
func version(t *testing.T, name string) int64 {
	t.Helper()
	n, _, _ := strings.Cut(name, "_")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		t.Fatalf("migration %s is not named NNNN_description.sql", name)
	}
	return v
}

// schemaCopy returns a MapFS holding the named embedded migrations (all of
// them when names is nil).
func schemaCopy(t *testing.T, names []string) fstest.MapFS {
	t.Helper()
	if names == nil {
		names = schemaFiles(t)
	}
	m := fstest.MapFS{}
	for _, n := range names {
		b, err := fs.ReadFile(schema.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		m[n] = &fstest.MapFile{Data: b, Mode: 0o444}
	}
	return m
}

func openDB(t *testing.T, path string) *storage.DB {
	t.Helper()
	db, err := storage.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func tableExists(t *testing.T, db *storage.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.Read.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestMigrateFreshDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := schemaFiles(t)
	latest := version(t, files[len(files)-1])
	dir := t.TempDir()
	db := openDB(t, filepath.Join(dir, "chalupa.db"))
	rpDir := filepath.Join(dir, "restore-points")

	res, err := db.Migrate(ctx, storage.MigrateOptions{RestorePointDir: rpDir})
	if err != nil {
		t.Fatalf("Migrate on a fresh database: %v", err)
	}
	if res.From != 0 || res.To != latest {
		t.Errorf("migrated from %d to %d, want 0 to %d", res.From, res.To, latest)
	}
	if strings.Join(res.Applied, ",") != strings.Join(files, ",") {
		t.Errorf("applied %v, want every migration %v", res.Applied, files)
	}
	if res.RestorePoint != "" || len(dirEntries(t, rpDir)) != 0 {
		t.Errorf("a fresh database got a restore point (%q, dir %v)", res.RestorePoint, dirEntries(t, rpDir))
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v != latest {
		t.Errorf("SchemaVersion = %d, %v; want %d", v, err, latest)
	}
	sts, err := db.MigrationStatuses(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sts {
		if !s.Applied || s.AppliedAt.IsZero() || len(s.SHA256) != 64 {
			t.Errorf("after Migrate: %+v, want applied with a time and a checksum", s)
		}
	}
	var sums int
	if err := db.Read.QueryRow("SELECT count(*) FROM chalupa_migration_checksums").Scan(&sums); err != nil || sums != len(files) {
		t.Errorf("recorded %d checksums (%v), want %d", sums, err, len(files))
	}
	if err := storage.IntegrityCheck(ctx, db.Path); err != nil {
		t.Error(err)
	}
}

func TestMigrateTwiceIsNoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := openDB(t, filepath.Join(dir, "chalupa.db"))
	rpDir := filepath.Join(dir, "restore-points")
	first, err := db.Migrate(ctx, storage.MigrateOptions{RestorePointDir: rpDir})
	if err != nil {
		t.Fatal(err)
	}
	second, err := db.Migrate(ctx, storage.MigrateOptions{RestorePointDir: rpDir})
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(second.Applied) != 0 || second.RestorePoint != "" || second.From != first.To || second.To != first.To {
		t.Errorf("second Migrate was not a no-op: %+v (first %+v)", second, first)
	}
	if es := dirEntries(t, rpDir); len(es) != 0 {
		t.Errorf("second Migrate took a restore point: %v", es)
	}
}

func TestMigrateRefusesEditedMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := schemaFiles(t)
	dir := t.TempDir()
	db := openDB(t, filepath.Join(dir, "chalupa.db"))
	rpDir := filepath.Join(dir, "restore-points")
	if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: schemaCopy(t, nil), RestorePointDir: rpDir}); err != nil {
		t.Fatal(err)
	}
	before, _ := db.SchemaVersion(ctx)

	// Edit the newest applied file (a trailing comment is enough: the
	// checksum is over the bytes) and offer a pending migration as well.
	edited := schemaCopy(t, nil)
	victim := files[len(files)-1]
	edited[victim] = &fstest.MapFile{Data: append(append([]byte{}, edited[victim].Data...), "\n-- edited after it was applied\n"...)}
	edited[extraName] = &fstest.MapFile{Data: []byte(extraMigration)}

	// CheckApplied (config check, migrate status) sees it without writing.
	if err := db.CheckApplied(ctx, edited); !errors.Is(err, storage.ErrMigrationEdited) || !strings.Contains(err.Error(), victim) {
		t.Fatalf("CheckApplied with an edited applied migration: err = %v, want ErrMigrationEdited naming %s", err, victim)
	}
	if err := db.CheckApplied(ctx, schemaCopy(t, nil)); err != nil {
		t.Fatalf("CheckApplied with the original files: %v", err)
	}

	_, err := db.Migrate(ctx, storage.MigrateOptions{FS: edited, RestorePointDir: rpDir})
	if !errors.Is(err, storage.ErrMigrationEdited) {
		t.Fatalf("Migrate with an edited applied migration: err = %v, want ErrMigrationEdited", err)
	}
	if !strings.Contains(err.Error(), victim) {
		t.Errorf("error does not name the edited file %s: %v", victim, err)
	}
	if v, _ := db.SchemaVersion(ctx); v != before {
		t.Errorf("schema version moved from %d to %d after a refusal", before, v)
	}
	if tableExists(t, db, "migrate_test_extra") {
		t.Error("the pending migration was applied although an applied one was edited")
	}
	if es := dirEntries(t, rpDir); len(es) != 0 {
		t.Errorf("a refused Migrate took a restore point: %v", es)
	}
	// Restoring the file makes the database usable again.
	if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: schemaCopy(t, nil), RestorePointDir: rpDir}); err != nil {
		t.Errorf("Migrate with the original files after a refusal: %v", err)
	}
}

func TestMigrateTakesCheckedRestorePoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := schemaFiles(t)
	latest := version(t, files[len(files)-1])
	dir := t.TempDir()
	db := openDB(t, filepath.Join(dir, "chalupa.db"))
	if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: schemaCopy(t, nil)}); err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for i := range 25 {
		slug := fmt.Sprintf("before-migration-%02d", i)
		slugs = append(slugs, slug)
		storagetest.Environment(t, db, storage.Environment{Slug: slug, Name: "env " + slug})
	}

	next := schemaCopy(t, nil)
	next[extraName] = &fstest.MapFile{Data: []byte(extraMigration)}
	rpDir := filepath.Join(dir, "rp")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	res, err := db.Migrate(ctx, storage.MigrateOptions{FS: next, RestorePointDir: rpDir, Clock: clockwork.NewFakeClockAt(at)})
	if err != nil {
		t.Fatalf("Migrate with a pending migration: %v", err)
	}
	if res.From != latest || res.To != extraVersion || strings.Join(res.Applied, ",") != extraName {
		t.Errorf("result %+v, want %d → %d applying %s", res, latest, extraVersion, extraName)
	}
	want := filepath.Join(rpDir, fmt.Sprintf("chalupa-20260102T030405.000Z-v%d.db", latest))
	if res.RestorePoint != want {
		t.Errorf("restore point %q, want %q", res.RestorePoint, want)
	}
	fi, err := os.Stat(res.RestorePoint)
	if err != nil {
		t.Fatalf("restore point file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("restore point mode %v, want 0600 like the database", fi.Mode().Perm())
	}
	if err := storage.IntegrityCheck(ctx, res.RestorePoint); err != nil {
		t.Errorf("restore point fails its integrity check: %v", err)
	}
	if !tableExists(t, db, "migrate_test_extra") {
		t.Error("the pending migration was not applied to the live database")
	}
	var appliedAt int64
	if err := db.Read.QueryRowContext(ctx, `SELECT applied_at FROM chalupa_migration_checksums WHERE version = ?`, extraVersion).Scan(&appliedAt); err != nil {
		t.Fatalf("checksum record of %s: %v", extraName, err)
	}
	if appliedAt != at.UnixMilli() {
		t.Errorf("checksum record applied_at %d, want the injected clock's %d", appliedAt, at.UnixMilli())
	}

	rp, err := storage.OpenReadOnly(ctx, res.RestorePoint)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	envs, err := storage.ListEnvironments(ctx, rp.Read)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range envs {
		got[e.Slug] = true
	}
	for _, s := range slugs {
		if !got[s] {
			t.Errorf("restore point lacks pre-migration row %s", s)
		}
	}
	if v, err := rp.SchemaVersion(ctx); err != nil || v != latest {
		t.Errorf("restore point at schema version %d (%v), want the pre-migration %d", v, err, latest)
	}
	if tableExists(t, rp, "migrate_test_extra") {
		t.Error("restore point holds the table of the migration it was taken before")
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "chalupa.db"))
	newer := schemaCopy(t, nil)
	newer[extraName] = &fstest.MapFile{Data: []byte(extraMigration)}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: newer}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{}); !errors.Is(err, storage.ErrSchemaTooNew) {
		t.Fatalf("Migrate of a database from a newer binary: err = %v, want ErrSchemaTooNew", err)
	}
	if err := db.CheckApplied(ctx, nil); !errors.Is(err, storage.ErrSchemaTooNew) {
		t.Fatalf("CheckApplied of a database from a newer binary: err = %v, want ErrSchemaTooNew", err)
	}
}

// TestMigrateRunsOnAnExpandedSchema: a database a newer release migrated
// with expand-only migrations is used as it is by this binary (no restore,
// every row kept); a contract above it, or a floor above this binary, is
// refused naming the migration (docs/operations.md, "Migrations and restore
// points").
func TestMigrateRunsOnAnExpandedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mig := func(kind, table string) []byte {
		return []byte("-- chalupa:migration " + kind + "\n-- +goose Up\nCREATE TABLE " + table + " (id INTEGER PRIMARY KEY) STRICT;\nINSERT INTO " + table + " (id) VALUES (1);\n-- +goose Down\nDROP TABLE " + table + ";\n")
	}
	with := func(files map[string][]byte) fstest.MapFS {
		m := schemaCopy(t, nil)
		for n, b := range files {
			m[n] = &fstest.MapFile{Data: b, Mode: 0o444}
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		newer   map[string][]byte // what the newer release applied
		older   map[string][]byte // what the older binary ships beyond schema.FS
		refused string            // the migration the refusal names; "" = runs
	}{
		{"one expand above", map[string][]byte{"9998_a.sql": mig("expand", "compat_a")}, nil, ""},
		{"two expands above", map[string][]byte{"9997_a.sql": mig("expand", "compat_a"), "9998_b.sql": mig("expand", "compat_b")}, nil, ""},
		{"a contract above", map[string][]byte{"9997_a.sql": mig("expand", "compat_a"), "9998_b.sql": mig("contract", "compat_b")}, nil, "9998_b.sql"},
		{"an undeclared migration above is a contract", map[string][]byte{"9998_a.sql": []byte(extraMigration)}, nil, "9998_a.sql"},
		{"a floor above this binary", map[string][]byte{"9997_a.sql": []byte("-- chalupa:migration contract floor=9998\n-- +goose Up\nSELECT 1;\n"), "9998_b.sql": mig("expand", "compat_b")},
			map[string][]byte{"9997_a.sql": []byte("-- chalupa:migration contract floor=9998\n-- +goose Up\nSELECT 1;\n")}, "9997_a.sql"},
		{"a contract this binary knows", map[string][]byte{"9997_a.sql": mig("contract", "compat_a"), "9998_b.sql": mig("expand", "compat_b")},
			map[string][]byte{"9997_a.sql": mig("contract", "compat_a")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := openDB(t, filepath.Join(t.TempDir(), "chalupa.db"))
			newer := with(tc.newer)
			for n, b := range tc.older {
				if string(b) != string(tc.newer[n]) {
					t.Fatalf("the older binary's %s differs from the newer's", n)
				}
			}
			if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: newer}); err != nil {
				t.Fatal(err)
			}
			if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
				_, err := storage.CreateEnvironment(ctx, tx, "compat-env", "compat-env", time.Now())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			older := with(tc.older)
			res, err := db.Migrate(ctx, storage.MigrateOptions{FS: older})
			cerr := db.CheckApplied(ctx, older)
			if tc.refused != "" {
				if !errors.Is(err, storage.ErrSchemaIncompatible) || !errors.Is(err, storage.ErrSchemaTooNew) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("Migrate: err = %v, want ErrSchemaIncompatible naming %s", err, tc.refused)
				}
				if cerr == nil || cerr.Error() != err.Error() {
					t.Fatalf("CheckApplied: %v, want the same refusal as Migrate", cerr)
				}
				return
			}
			if err != nil || cerr != nil {
				t.Fatalf("Migrate: %v, CheckApplied: %v; want the older binary to run", err, cerr)
			}
			if res.RestorePoint != "" || len(res.Applied) != 0 {
				t.Fatalf("the older binary changed the database: %+v", res)
			}
			if _, err := storage.EnvironmentBySlug(ctx, db.Read, "compat-env"); err != nil {
				t.Fatalf("a row written on the newer schema is gone: %v", err)
			}
		})
	}
}

// TestMigrateStatusBinary runs the built `chalupa migrate status` against a
// data dir with no database, a partly migrated one and a fully migrated one.
func TestMigrateStatusBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := proctest.BuildBinary(t)
	files := schemaFiles(t)
	dataDir := t.TempDir()
	dbPath := filepath.Join(dataDir, "chalupa.db")
	env := map[string]string{"CHALUPA_DATA_DIR": dataDir}

	status := func(wantApplied int) {
		t.Helper()
		out, code := proctest.RunCommand(t, bin, "", env, "migrate", "status", "--json")
		if code != 0 {
			t.Fatalf("migrate status --json exited %d:\n%s", code, out)
		}
		var sts []storage.MigrationStatus
		if err := json.Unmarshal([]byte(out), &sts); err != nil {
			t.Fatalf("migrate status --json: %v\n%s", err, out)
		}
		if len(sts) != len(files) {
			t.Fatalf("migrate status lists %d migrations, want %d:\n%s", len(sts), len(files), out)
		}
		for i, s := range sts {
			wantApp := i < wantApplied
			if s.Name != files[i] || s.Applied != wantApp || s.AppliedAt.IsZero() == wantApp {
				t.Errorf("migration %d: %+v, want %s applied=%v", i, s, files[i], wantApp)
			}
		}
		out, code = proctest.RunCommand(t, bin, "", env, "migrate", "status")
		if code != 0 {
			t.Fatalf("migrate status exited %d:\n%s", code, out)
		}
		for i, f := range files {
			state := "pending"
			if i < wantApplied {
				state = "applied"
			}
			found := false
			for _, l := range strings.Split(out, "\n") {
				fl := strings.Fields(l)
				if len(fl) >= 3 && fl[1] == f && fl[2] == state {
					found = true
				}
			}
			if !found {
				t.Errorf("migrate status does not list %s as %s:\n%s", f, state, out)
			}
		}
	}

	// No database: everything pending, and status creates nothing.
	status(0)
	if _, err := os.Stat(dbPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("migrate status created the database (%v)", err)
	}

	// Every migration but the last applied (none when there is only one:
	// then the file exists without goose's table).
	partial := len(files) - 1
	db, err := storage.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if partial > 0 {
		if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: schemaCopy(t, files[:partial])}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	status(partial)

	// Fully migrated.
	db, err = storage.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	status(len(files))
	// Status applied nothing: the schema version is what Migrate left.
	ro, err := storage.OpenReadOnly(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if v, err := ro.SchemaVersion(ctx); err != nil || v != version(t, files[len(files)-1]) {
		t.Errorf("schema version after status: %d, %v", v, err)
	}
}
