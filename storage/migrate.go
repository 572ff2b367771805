package storage

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/pressly/goose/v3"
	"github.com/rs/zerolog"
)

// ErrMigrationEdited is returned when a migration file's content differs from
// the checksum recorded when it was applied. The wrapping error names the file.
var ErrMigrationEdited = errors.New("applied migration was edited")

// ErrSchemaTooNew is returned when the database holds migrations this binary
// does not know (it was migrated by a newer chalupa).
var ErrSchemaTooNew = errors.New("database schema is newer than this binary")

// checksumTable records the SHA-256 of every applied migration file. goose
// records versions only; the checksum is what lets start-up refuse a migration
// edited after it ran (its edit would never reach existing databases).
const checksumTable = `CREATE TABLE IF NOT EXISTS chalupa_migration_checksums (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    sha256     TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT`

// MigrateOptions configures Migrate. The zero value uses the embedded schema
// and takes restore points in the database's directory.
type MigrateOptions struct {
	// FS holds the migration files; nil means the set this binary ships
	// (schema.FS).
	FS fs.FS
	// RestorePointDir is where VACUUM INTO restore points are written; empty
	// means "<dir of the database>/restore-points".
	RestorePointDir string
	// Clock names restore points and stamps the checksum records'
	// applied_at; nil means the real clock.
	Clock clockwork.Clock
	// Logger receives one line per applied migration and the restore point's path.
	Logger zerolog.Logger
}

// MigrationStatus is one migration as seen by `chalupa migrate status`.
type MigrationStatus struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time
	SHA256    string
}

// MigrateResult reports what Migrate did.
type MigrateResult struct {
	// From and To are the schema versions before and after.
	From, To int64
	// Applied names the files applied by this call, in order.
	Applied []string
	// RestorePoint is the path of the restore point taken before applying,
	// empty when none was needed (fresh database or nothing pending).
	RestorePoint string
}

func (o *MigrateOptions) fsys() fs.FS {
	if o.FS != nil {
		return o.FS
	}
	return migrationsFS()
}

func (o *MigrateOptions) clock() clockwork.Clock {
	if o.Clock != nil {
		return o.Clock
	}
	return clockwork.NewRealClock()
}

func newProvider(db *sql.DB, fsys fs.FS) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

// sourcePaths returns every migration file's path, by version.
func sourcePaths(p *goose.Provider) map[int64]string {
	out := map[int64]string{}
	for _, s := range p.ListSources() {
		out[s.Version] = s.Path
	}
	return out
}

// fileSums returns the SHA-256 of every migration file in fsys, by version.
func fileSums(p *goose.Provider, fsys fs.FS) (map[int64]string, map[int64]string, error) {
	sums, names := map[int64]string{}, map[int64]string{}
	for _, s := range p.ListSources() {
		b, err := fs.ReadFile(fsys, s.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("read migration %s: %w", s.Path, err)
		}
		h := sha256.Sum256(b)
		sums[s.Version] = hex.EncodeToString(h[:])
		names[s.Version] = path.Base(s.Path)
	}
	return sums, names, nil
}

// verifyApplied compares every applied migration's file with its recorded
// checksum. A missing record (a database migrated before checksums were kept,
// or a crash between goose's commit and ours) is recorded now.
func verifyApplied(ctx context.Context, db *sql.DB, clock clockwork.Clock, statuses []*goose.MigrationStatus, sums, names map[int64]string) error {
	recorded := map[int64]string{}
	rows, err := db.QueryContext(ctx, "SELECT version, sha256 FROM chalupa_migration_checksums")
	if err != nil {
		return fmt.Errorf("read migration checksums: %w", err)
	}
	for rows.Next() {
		var v int64
		var s string
		if err := rows.Scan(&v, &s); err != nil {
			rows.Close()
			return fmt.Errorf("read migration checksums: %w", err)
		}
		recorded[v] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read migration checksums: %w", err)
	}
	for _, st := range statuses {
		if st.State != goose.StateApplied {
			continue
		}
		v := st.Source.Version
		want, ok := recorded[v]
		if !ok {
			if err := recordChecksum(ctx, db, v, names[v], sums[v], clock.Now()); err != nil {
				return err
			}
			continue
		}
		if want != sums[v] {
			return fmt.Errorf("%w: %s (recorded sha256 %s, file now %s); restore the file and add a new migration instead",
				ErrMigrationEdited, names[v], want[:12], sums[v][:12])
		}
	}
	return nil
}

func recordChecksum(ctx context.Context, db *sql.DB, version int64, name, sum string, at time.Time) error {
	_, err := db.ExecContext(ctx,
		`INSERT INTO chalupa_migration_checksums (version, name, sha256, applied_at) VALUES (?, ?, ?, ?)
		 ON CONFLICT (version) DO NOTHING`,
		version, name, sum, at.UnixMilli())
	if err != nil {
		return fmt.Errorf("record migration checksum: %w", err)
	}
	return nil
}

// Migrate verifies the checksums of applied migrations and applies pending
// ones. Before applying to a database that already holds a schema, it takes a
// restore point (VACUUM INTO a timestamped file), runs PRAGMA integrity_check
// on it, and refuses to migrate if that fails. It must run before the writer
// is used: it borrows the write connection.
//
// A database a newer release migrated is used as it is when every migration
// above this binary's newest is an expand and this binary is at or above the
// database's floor (docs/operations.md, "Migrations and restore points").
//
// Errors: ErrMigrationEdited (naming the file), ErrSchemaIncompatible (which
// wraps ErrSchemaTooNew, naming the migration), a failed
// restore point or integrity check, or the failing migration's error.
func (db *DB) Migrate(ctx context.Context, opt MigrateOptions) (MigrateResult, error) {
	var res MigrateResult
	fsys := opt.fsys()
	clock := opt.clock()
	if _, err := db.write.ExecContext(ctx, checksumTable); err != nil {
		return res, fmt.Errorf("create checksum table: %w", err)
	}
	if _, err := db.write.ExecContext(ctx, kindsTable); err != nil {
		return res, fmt.Errorf("create migration kinds table: %w", err)
	}
	p, err := newProvider(db.write, fsys)
	if err != nil {
		return res, err
	}
	sums, names, err := fileSums(p, fsys)
	if err != nil {
		return res, err
	}
	kinds, err := fileKinds(fsys, sourcePaths(p))
	if err != nil {
		return res, err
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return res, fmt.Errorf("read schema version: %w", err)
	}
	res.From, res.To = current, current
	if current > target {
		// A newer release migrated this database: run on it only when
		// everything above this binary only expanded the schema.
		if err := checkCompatible(ctx, db.write, target); err != nil {
			return res, err
		}
	}
	statuses, err := p.Status(ctx)
	if err != nil {
		return res, fmt.Errorf("read migration status: %w", err)
	}
	if err := verifyApplied(ctx, db.write, clock, statuses, sums, names); err != nil {
		return res, err
	}
	for _, st := range statuses {
		// A crash between goose's commit and ours leaves a kind unrecorded.
		if v := st.Source.Version; st.State == goose.StateApplied && v > LastLegacyMigration {
			if err := recordKind(ctx, db.write, v, kinds[v]); err != nil {
				return res, err
			}
		}
	}
	if current > target {
		return res, nil
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return res, fmt.Errorf("check pending migrations: %w", err)
	}
	if !pending {
		return res, nil
	}
	if current > 0 {
		rp, err := db.restorePoint(ctx, opt, current)
		if err != nil {
			return res, err
		}
		res.RestorePoint = rp
		opt.Logger.Info().Str("path", rp).Int64("schema_version", current).Msg("restore point taken and integrity-checked before migrating")
	}
	results, err := p.Up(ctx)
	for _, r := range results {
		if r.Error != nil {
			continue
		}
		name := path.Base(r.Source.Path)
		res.Applied = append(res.Applied, name)
		opt.Logger.Info().Str("migration", name).Dur("took", r.Duration).Msg("migration applied")
		if rerr := recordChecksum(ctx, db.write, r.Source.Version, name, sums[r.Source.Version], clock.Now()); rerr != nil {
			return res, rerr
		}
		if v := r.Source.Version; v > LastLegacyMigration {
			if rerr := recordKind(ctx, db.write, v, kinds[v]); rerr != nil {
				return res, rerr
			}
		}
	}
	if err != nil {
		return res, fmt.Errorf("apply migrations: %w", err)
	}
	res.To = target
	return res, nil
}

// restorePoint writes VACUUM INTO <dir>/chalupa-<UTC time>-v<version>.db and
// integrity-checks the copy. Returns the path.
func (db *DB) restorePoint(ctx context.Context, opt MigrateOptions, version int64) (string, error) {
	dir := opt.RestorePointDir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(db.Path), "restore-points")
	}
	if err := mkdirPrivate(dir); err != nil {
		return "", fmt.Errorf("create restore point dir: %w", err)
	}
	name := fmt.Sprintf("chalupa-%s-v%d.db", opt.clock().Now().UTC().Format("20060102T150405.000Z"), version)
	p := filepath.Join(dir, name)
	if _, err := db.write.ExecContext(ctx, "VACUUM INTO ?", p); err != nil {
		return "", fmt.Errorf("take restore point: %w", err)
	}
	// VACUUM INTO creates the file 0644; it holds what the 0600 database holds.
	if err := os.Chmod(p, 0o600); err != nil {
		return "", fmt.Errorf("restrict restore point file mode: %w", err)
	}
	if err := IntegrityCheck(ctx, p); err != nil {
		return "", fmt.Errorf("restore point %s failed its check, refusing to migrate: %w", name, err)
	}
	return p, nil
}

// MigrationStatuses lists every known migration, applied or pending, in
// version order. It reads only; it never applies anything.
func (db *DB) MigrationStatuses(ctx context.Context, fsys fs.FS) ([]MigrationStatus, error) {
	if fsys == nil {
		fsys = migrationsFS()
	}
	p, err := newProvider(db.Read, fsys)
	if err != nil {
		return nil, err
	}
	sums, names, err := fileSums(p, fsys)
	if err != nil {
		return nil, err
	}
	var statuses []*goose.MigrationStatus
	// goose creates its version table when it is missing, which a read-only
	// connection cannot do: a database with no table has nothing applied.
	var n int
	if err := db.Read.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'goose_db_version'").Scan(&n); err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	if n > 0 {
		statuses, err = p.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("read migration status: %w", err)
		}
	}
	applied := map[int64]time.Time{}
	for _, s := range statuses {
		if s.State == goose.StateApplied {
			applied[s.Source.Version] = s.AppliedAt
		}
	}
	var out []MigrationStatus
	for v, name := range names {
		at, ok := applied[v]
		out = append(out, MigrationStatus{Version: v, Name: name, Applied: ok, AppliedAt: at, SHA256: sums[v]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// SchemaVersion returns the highest applied migration version (0 for none).
func (db *DB) SchemaVersion(ctx context.Context) (int64, error) {
	var v sql.NullInt64
	err := db.Read.QueryRowContext(ctx, "SELECT max(version_id) FROM goose_db_version WHERE is_applied").Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v.Int64, nil
}

// CheckApplied verifies, without writing, what Migrate would refuse: an
// applied migration whose file changed since (ErrMigrationEdited, naming the
// file) or a schema newer than fsys knows that this binary cannot run on
// (ErrSchemaIncompatible, see checkCompatible). fsys nil means the set this
// binary ships. `chalupa config check` and `migrate status` use it so that they
// fail whenever serve would.
func (db *DB) CheckApplied(ctx context.Context, fsys fs.FS) error {
	if fsys == nil {
		fsys = migrationsFS()
	}
	sts, err := db.MigrationStatuses(ctx, fsys)
	if err != nil {
		return err
	}
	var known int64
	sums := map[int64]MigrationStatus{}
	for _, s := range sts {
		sums[s.Version] = s
		known = max(known, s.Version)
	}
	var n int
	if err := db.Read.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'goose_db_version'").Scan(&n); err != nil || n == 0 {
		return err
	}
	if v, err := db.SchemaVersion(ctx); err != nil {
		return err
	} else if v > known {
		if err := checkCompatible(ctx, db.Read, known); err != nil {
			return err
		}
	}
	if err := db.Read.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'chalupa_migration_checksums'").Scan(&n); err != nil || n == 0 {
		return err
	}
	rows, err := db.Read.QueryContext(ctx, "SELECT version, sha256 FROM chalupa_migration_checksums")
	if err != nil {
		return fmt.Errorf("read migration checksums: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int64
		var sum string
		if err := rows.Scan(&v, &sum); err != nil {
			return fmt.Errorf("read migration checksums: %w", err)
		}
		if s, ok := sums[v]; ok && s.Applied && s.SHA256 != sum {
			return fmt.Errorf("%w: %s (recorded sha256 %s, file now %s); restore the file and add a new migration instead",
				ErrMigrationEdited, s.Name, sum[:12], s.SHA256[:12])
		}
	}
	return rows.Err()
}
