package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// RestorePointDirName is the restore points' directory inside the data dir
// (docs/operations.md, "Migrations and restore points").
const RestorePointDirName = "restore-points"

// RolledBackDirName is where a rollback moves the current database aside,
// one sub-directory per rollback (docs/operations.md, "Rollback").
const RolledBackDirName = "rolled-back"

// ErrNotRestorePoint is returned for a file whose name is not a restore
// point's (chalupa-<UTC time>-v<version>.db).
var ErrNotRestorePoint = errors.New("not a restore point (want restore-points/chalupa-<UTC time>-v<version>.db)")

// restorePointName matches the names restorePoint writes.
var restorePointName = lazyre.New(`^chalupa-(\d{8}T\d{6}\.\d{3}Z)-v(\d+)\.db$`)

// RestorePoint is one restore point file.
type RestorePoint struct {
	// Path is the file's path; Name its base name.
	Path, Name string
	// TakenAt is when it was taken (from its name, UTC); every write after
	// it is lost by rolling back to it.
	TakenAt time.Time
	// SchemaVersion is the schema it holds (the version before the
	// migration it was taken for).
	SchemaVersion int64
	// SizeBytes is the file's size in bytes.
	SizeBytes int64
	// Check is "ok" when PRAGMA integrity_check passed, else the failure.
	Check string
}

// Verified reports whether the point passed its integrity check.
func (p RestorePoint) Verified() bool { return p.Check == "ok" }

// ParseRestorePoint stats and integrity-checks the restore point at p.
// Errors: ErrNotRestorePoint, or the file cannot be read.
func ParseRestorePoint(ctx context.Context, p string) (RestorePoint, error) {
	m := restorePointName.FindStringSubmatch(filepath.Base(p))
	if m == nil {
		return RestorePoint{}, ErrNotRestorePoint
	}
	at, err := time.Parse("20060102T150405.000Z", m[1])
	if err != nil {
		return RestorePoint{}, ErrNotRestorePoint
	}
	v, _ := strconv.ParseInt(m[2], 10, 64)
	fi, err := os.Stat(p)
	if err != nil {
		return RestorePoint{}, fmt.Errorf("restore point: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return RestorePoint{}, ErrNotRestorePoint
	}
	rp := RestorePoint{Path: p, Name: filepath.Base(p), TakenAt: at.UTC(), SchemaVersion: v, SizeBytes: fi.Size(), Check: "ok"}
	if err := IntegrityCheck(ctx, p); err != nil {
		rp.Check = err.Error()
	}
	return rp, nil
}

// ListRestorePoints returns the restore points in dir, each integrity-
// checked, newest first; none when dir does not exist. Files that are not
// restore points are skipped.
func ListRestorePoints(ctx context.Context, dir string) ([]RestorePoint, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list restore points: %w", err)
	}
	var out []RestorePoint
	for _, e := range ents {
		rp, err := ParseRestorePoint(ctx, filepath.Join(dir, e.Name()))
		if errors.Is(err, ErrNotRestorePoint) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TakenAt.After(out[j].TakenAt) })
	return out, nil
}

// TableLoss is one table's row counts in the current database and in a
// restore point.
type TableLoss struct {
	Table string
	// Now is the table's rows in the current database; InPoint in the
	// restore point (0 when the point's schema lacks the table).
	Now, InPoint int64
	// MissingInPoint is true when the point's schema has no such table
	// (a newer migration made it).
	MissingInPoint bool
}

// RollbackPlan is what rolling back to a restore point loses.
type RollbackPlan struct {
	Point RestorePoint
	// LastWriteAt is when the current database (or its WAL) was last
	// modified: the lost writes span Point.TakenAt to LastWriteAt.
	LastWriteAt time.Time
	// CurrentSchema is the current database's schema version.
	CurrentSchema int64
	// Tables are every table of either database whose row count differs,
	// by name.
	Tables []TableLoss
}

// PlanRollback compares the database at dbPath with the restore point at
// pointPath, read-only. Errors: ErrNotRestorePoint, a point that fails its
// integrity check, or a database that cannot be read.
func PlanRollback(ctx context.Context, dbPath, pointPath string) (RollbackPlan, error) {
	var plan RollbackPlan
	rp, err := ParseRestorePoint(ctx, pointPath)
	if err != nil {
		return plan, err
	}
	if !rp.Verified() {
		return plan, fmt.Errorf("restore point %s failed its check: %s", rp.Name, rp.Check)
	}
	plan.Point = rp
	for _, p := range []string{dbPath, dbPath + "-wal"} {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(plan.LastWriteAt) {
			plan.LastWriteAt = fi.ModTime().UTC()
		}
	}
	cur, err := OpenReadOnly(ctx, dbPath)
	if err != nil {
		return plan, err
	}
	defer cur.Close()
	if plan.CurrentSchema, err = cur.SchemaVersion(ctx); err != nil {
		return plan, err
	}
	now, err := tableCounts(ctx, cur.Read)
	if err != nil {
		return plan, err
	}
	pc, err := sql.Open("sqlite", "file:"+pointPath+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return plan, fmt.Errorf("open restore point: %w", err)
	}
	defer pc.Close()
	then, err := tableCounts(ctx, pc)
	if err != nil {
		return plan, err
	}
	names := map[string]bool{}
	for n := range now {
		names[n] = true
	}
	for n := range then {
		names[n] = true
	}
	for n := range names {
		a, inNow := now[n]
		b, inPoint := then[n]
		if a == b && inNow == inPoint {
			continue
		}
		plan.Tables = append(plan.Tables, TableLoss{Table: n, Now: a, InPoint: b, MissingInPoint: !inPoint})
	}
	sort.Slice(plan.Tables, func(i, j int) bool { return plan.Tables[i].Table < plan.Tables[j].Table })
	return plan, nil
}

// tableCounts counts the rows of every table of q's database.
func tableCounts(ctx context.Context, q Querier) (map[string]int64, error) {
	// Litestream's own tables (_litestream_*) hold no data of chalupa's.
	rows, err := q.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '\_litestream\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list tables: %w", err)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	out := map[string]int64{}
	for _, n := range names {
		var c int64
		// n comes from sqlite_master; quoted as an identifier.
		if err := q.QueryRowContext(ctx, `SELECT count(*) FROM "`+strings.ReplaceAll(n, `"`, `""`)+`"`).Scan(&c); err != nil {
			return nil, fmt.Errorf("count rows: %w", err)
		}
		out[n] = c
	}
	return out, nil
}

// replicaGenerationTable records the replica histories a database has
// started. Like the migration checksums it is chalupa's bookkeeping, not a
// migration: rollback writes it into restore points of any schema version,
// and a binary that predates it ignores it.
const replicaGenerationTable = `CREATE TABLE IF NOT EXISTS chalupa_replica_generations (
    generation TEXT    PRIMARY KEY,
    started_at INTEGER NOT NULL,
    restore_point TEXT NOT NULL
) STRICT`

// ReplicaGeneration returns the database's current replica generation (the
// newest recorded), "" when it never rolled back: it then replicates to the
// replica URL itself.
func ReplicaGeneration(ctx context.Context, q Querier) (string, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'chalupa_replica_generations'`).Scan(&n); err != nil {
		return "", fmt.Errorf("read replica generation: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	var g sql.NullString
	if err := q.QueryRowContext(ctx, `SELECT generation FROM chalupa_replica_generations ORDER BY started_at DESC, generation DESC LIMIT 1`).Scan(&g); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("read replica generation: %w", err)
	}
	return g.String, nil
}

// ReplicaURLWithGeneration returns the replica URL u with generation gen
// appended to its path (u itself when gen is "" or u's path already ends
// with it). Errors: ErrBadReplicaURL (never repeating u).
func ReplicaURLWithGeneration(u, gen string) (string, error) {
	if gen == "" {
		return u, nil
	}
	p, err := url.Parse(u)
	if err != nil {
		return "", ErrBadReplicaURL
	}
	if path.Base(p.Path) == gen {
		return u, nil
	}
	p.Path = path.Join("/", p.Path, gen)
	p.RawPath = ""
	return p.String(), nil
}

// RollbackResult is what Rollback did.
type RollbackResult struct {
	// MovedTo is the directory now holding the previous database, its WAL
	// and SHM and Litestream's local state.
	MovedTo string
	// Generation is the replica generation the rolled-back database
	// replicates to: a path under the replica URL with no history yet.
	Generation string
}

// Rollback replaces the database at dbPath with a copy of the restore point
// at pointPath (docs/operations.md, "Rollback"). The caller holds the data
// dir lock (the daemon is stopped). In order: check the point's integrity;
// move the database, its -wal and -shm and Litestream's local state
// (.<name>-litestream) into rolled-back/<UTC time>/ beside it; copy the point
// in (0600, fsynced); record a new replica generation in it, so replication
// starts a fresh history instead of writing behind the replica's newer one;
// check the result's integrity. now names the directory and the generation.
// Errors: ErrNotRestorePoint, a failed check (nothing moved), or a file
// operation's error naming the step.
func Rollback(ctx context.Context, dbPath, pointPath string, now time.Time) (RollbackResult, error) {
	var res RollbackResult
	rp, err := ParseRestorePoint(ctx, pointPath)
	if err != nil {
		return res, err
	}
	if !rp.Verified() {
		return res, fmt.Errorf("restore point %s failed its check, nothing changed: %s", rp.Name, rp.Check)
	}
	stamp := now.UTC().Format("20060102T150405.000Z")
	dir := filepath.Dir(dbPath)
	res.MovedTo = filepath.Join(dir, RolledBackDirName, stamp)
	res.Generation = "g" + strings.ReplaceAll(stamp, ".", "")
	if err := mkdirPrivate(res.MovedTo); err != nil {
		return res, fmt.Errorf("create %s: %w", RolledBackDirName, err)
	}
	base := filepath.Base(dbPath)
	for _, name := range []string{base, base + "-wal", base + "-shm", "." + base + "-litestream"} {
		err := os.Rename(filepath.Join(dir, name), filepath.Join(res.MovedTo, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("move %s aside: %w", name, err)
		}
	}
	tmp := dbPath + ".rollback"
	if err := copyFileSync(pointPath, tmp); err != nil {
		return res, fmt.Errorf("copy restore point: %w", err)
	}
	if err := os.Rename(tmp, dbPath); err != nil {
		return res, fmt.Errorf("install restore point: %w", err)
	}
	c, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)&_pragma=synchronous(FULL)")
	if err != nil {
		return res, fmt.Errorf("open rolled-back database: %w", err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, replicaGenerationTable); err != nil {
		return res, fmt.Errorf("record replica generation: %w", err)
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO chalupa_replica_generations (generation, started_at, restore_point) VALUES (?, ?, ?)`,
		res.Generation, ms(now), rp.Name); err != nil {
		return res, fmt.Errorf("record replica generation: %w", err)
	}
	if err := c.Close(); err != nil {
		return res, fmt.Errorf("close rolled-back database: %w", err)
	}
	if err := IntegrityCheck(ctx, dbPath); err != nil {
		return res, fmt.Errorf("rolled-back database: %w", err)
	}
	return res, nil
}

// copyFileSync copies src to a new file dst (0600) and fsyncs it.
func copyFileSync(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
