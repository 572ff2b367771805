package storage

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/chalupa-run/chalupa/schema"
)

// Migration kinds (docs/operations.md, "Migrations and restore points"). An
// expand migration only adds — tables, nullable columns or columns with a
// default, indexes — so the release before it runs on the expanded schema
// unchanged; a contract migration drops, renames or tightens, so a release
// that still used what it removes cannot.
const (
	KindExpand   = "expand"
	KindContract = "contract"
)

// LastLegacyMigration is the newest migration written before kinds were
// declared (0018). Those migrations are recorded as contract: a release
// from before the rule refuses every newer schema anyway, and a release with
// the rule can be rolled back only to itself or later.
const LastLegacyMigration = 18

// ErrSchemaIncompatible is returned when the database holds migrations this
// binary does not know and it cannot run on them: one of them contracts, or
// the binary is older than the database's compatibility floor. It wraps
// ErrSchemaTooNew; the message names the migration.
var ErrSchemaIncompatible = fmt.Errorf("%w and not compatible with it", ErrSchemaTooNew)

// kindsTable records, for every migration applied by a binary that knows
// kinds, its kind and the compatibility floor it sets: the oldest newest-
// migration a binary may have to run on this database (0 for an expand).
// Like the checksums it is chalupa's bookkeeping, created outside goose, so
// that a binary that does not know the newer migrations can still read it.
const kindsTable = `CREATE TABLE IF NOT EXISTS chalupa_migration_kinds (
    version INTEGER PRIMARY KEY,
    kind    TEXT    NOT NULL CHECK (kind IN ('expand', 'contract')),
    floor   INTEGER NOT NULL
) STRICT`

// withheldMigrations is a build setting for tests only (`go build -ldflags
// "-X github.com/chalupa-run/chalupa/storage.withheldMigrations=N"`): the
// binary leaves out its newest N migrations, standing in for the previous
// release in TestRollbackToPreviousRelease. Empty in every release build.
var withheldMigrations string

// migrationKind is one file's declaration: a line `-- chalupa:migration
// expand` or `-- chalupa:migration contract [floor=N]` before `-- +goose Up`.
type migrationKind struct {
	Kind  string
	Floor int64
}

// parseKind reads a migration file's declaration. A file without one is a
// contract with its own version as floor (the safe reading); a malformed one
// is an error naming the file.
func parseKind(name string, version int64, body []byte) (migrationKind, error) {
	k := migrationKind{Kind: KindContract, Floor: version}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "-- +goose") {
			break
		}
		rest, ok := strings.CutPrefix(line, "-- chalupa:migration ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		switch {
		case len(f) == 1 && f[0] == KindExpand:
			return migrationKind{Kind: KindExpand}, nil
		case len(f) == 1 && f[0] == KindContract:
			return k, nil
		case len(f) == 2 && f[0] == KindContract && strings.HasPrefix(f[1], "floor="):
			n, err := strconv.ParseInt(strings.TrimPrefix(f[1], "floor="), 10, 64)
			if err != nil || n < version {
				return k, fmt.Errorf("migration %s: floor must be a migration number at or above its own (%d)", name, version)
			}
			return migrationKind{Kind: KindContract, Floor: n}, nil
		default:
			return k, fmt.Errorf("migration %s: %q: want `-- chalupa:migration expand` or `-- chalupa:migration contract [floor=N]`", name, line)
		}
	}
	return k, nil
}

// fileKinds returns every migration file's declared kind, by version.
func fileKinds(fsys fs.FS, paths map[int64]string) (map[int64]migrationKind, error) {
	out := map[int64]migrationKind{}
	for v, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", p, err)
		}
		k, err := parseKind(path.Base(p), v, b)
		if err != nil {
			return nil, err
		}
		out[v] = k
	}
	return out, nil
}

func recordKind(ctx context.Context, db *sql.DB, version int64, k migrationKind) error {
	if _, err := db.ExecContext(ctx, `INSERT INTO chalupa_migration_kinds (version, kind, floor) VALUES (?, ?, ?)
		ON CONFLICT (version) DO NOTHING`, version, k.Kind, k.Floor); err != nil {
		return fmt.Errorf("record migration kind: %w", err)
	}
	return nil
}

// checkCompatible decides whether a binary whose newest migration is known
// may run on a database at a version above it (docs/operations.md,
// "Migrations and restore points"): every applied migration above known must
// be recorded as expand, and known must be at or above the database's floor
// — the highest floor recorded, at least LastLegacyMigration, with every
// applied migration that has no record counted as a contract at its own
// version. q reads the database.
//
// Errors: ErrSchemaIncompatible naming the migration, or a read error.
func checkCompatible(ctx context.Context, q *sql.DB, known int64) error {
	versions, err := queryInts(ctx, q, "SELECT version_id FROM goose_db_version WHERE is_applied AND version_id > 0 ORDER BY version_id")
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	names := map[int64]string{}
	kinds := map[int64]migrationKind{}
	if ok, err := tableExists(ctx, q, "chalupa_migration_checksums"); err != nil {
		return err
	} else if ok {
		if err := scanRows(ctx, q, "SELECT version, name FROM chalupa_migration_checksums", func(r *sql.Rows) error {
			var v int64
			var n string
			err := r.Scan(&v, &n)
			names[v] = n
			return err
		}); err != nil {
			return fmt.Errorf("read migration names: %w", err)
		}
	}
	if ok, err := tableExists(ctx, q, "chalupa_migration_kinds"); err != nil {
		return err
	} else if ok {
		if err := scanRows(ctx, q, "SELECT version, kind, floor FROM chalupa_migration_kinds", func(r *sql.Rows) error {
			var v int64
			var k migrationKind
			err := r.Scan(&v, &k.Kind, &k.Floor)
			kinds[v] = k
			return err
		}); err != nil {
			return fmt.Errorf("read migration kinds: %w", err)
		}
	}
	name := func(v int64) string {
		if n := names[v]; n != "" {
			return n
		}
		return fmt.Sprintf("migration %d", v)
	}
	floor, floorBy := int64(LastLegacyMigration), name(LastLegacyMigration)
	for _, v := range versions {
		k, ok := kinds[v]
		if !ok {
			k = migrationKind{Kind: KindContract, Floor: v}
		}
		if v > known && k.Kind != KindExpand {
			return fmt.Errorf("%w: %s is a contract migration this binary does not know (it knows up to %d): install a release that knows it, or roll back to a restore point (`chalupa migrate rollback`)",
				ErrSchemaIncompatible, name(v), known)
		}
		if k.Floor > floor {
			floor, floorBy = k.Floor, name(v)
		}
	}
	if known < floor {
		return fmt.Errorf("%w: this binary knows migrations up to %d, below the database's compatibility floor %d (set by %s): install a release at or after it",
			ErrSchemaIncompatible, known, floor, floorBy)
	}
	return nil
}

// tableExists reports whether the database has the named table.
func tableExists(ctx context.Context, q *sql.DB, name string) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", name).Scan(&n); err != nil {
		return false, fmt.Errorf("read schema: %w", err)
	}
	return n > 0, nil
}

func queryInts(ctx context.Context, q *sql.DB, query string) ([]int64, error) {
	var out []int64
	err := scanRows(ctx, q, query, func(r *sql.Rows) error {
		var v int64
		err := r.Scan(&v)
		out = append(out, v)
		return err
	})
	return out, err
}

func scanRows(ctx context.Context, q *sql.DB, query string, scan func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// migrationsFS is the migration set this binary ships: schema.FS, less the
// newest withheldMigrations files in a test build.
func migrationsFS() fs.FS {
	n, err := strconv.Atoi(withheldMigrations)
	if withheldMigrations == "" || err != nil || n <= 0 {
		return schema.FS
	}
	names, _ := fs.Glob(schema.FS, "*.sql")
	byVersion := map[int64]string{}
	var versions []int64
	for _, name := range names {
		p, _, _ := strings.Cut(name, "_")
		if v, err := strconv.ParseInt(p, 10, 64); err == nil {
			byVersion[v] = name
			versions = append(versions, v)
		}
	}
	slices.Sort(versions)
	skip := map[string]bool{}
	for i := 0; i < n && i < len(versions); i++ {
		skip[byVersion[versions[len(versions)-1-i]]] = true
	}
	return withheldFS{FS: schema.FS, skip: skip}
}

// withheldFS hides some files of a migration set.
type withheldFS struct {
	fs.FS
	skip map[string]bool
}

// Open implements fs.FS.
func (w withheldFS) Open(name string) (fs.File, error) {
	if w.skip[name] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return w.FS.Open(name)
}

// ReadDir implements fs.ReadDirFS.
func (w withheldFS) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := fs.ReadDir(w.FS, name)
	if err != nil {
		return nil, err
	}
	out := es[:0:0]
	for _, e := range es {
		if !w.skip[path.Join(name, e.Name())] {
			out = append(out, e)
		}
	}
	return out, nil
}
