// Package storagetest holds shared test fixtures for chalupa's database: a
// migrated database file per test (NewDB) and row generators with sensible
// defaults (Environment, Deployment, Heartbeat, IngestKey), in the style of
// Coder's dbtestutil and dbgen.
//
// Every fixture takes the database, a seed row whose zero fields get
// defaults, and returns the row as storage's read queries return it. Writes
// go through the database's Writer, one unit per call. A fixture that cannot
// write its row fails the test at once (t.Fatalf); nothing returns an error.
//
// storagetest imports only storage (and the standard library), so the tests
// of any package above storage, including package-internal tests of ingest
// and daemon, can use it. storage's own internal tests (package storage)
// cannot: that would be an import cycle.
//
// There is no Organization fixture: migration 0001 seeds the platform
// organization (storage.PlatformOrgID) and nothing reads other
// organizations yet.
package storagetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage"
)

// DBFileName is the name of the database file NewDB creates in its
// temporary directory (the name serve uses in its data dir).
const DBFileName = "chalupa.db"

// NewDB opens a fresh SQLite database file named DBFileName in t.TempDir()
// with storage.Open (chalupa's pragmas: WAL, foreign keys, synchronous
// full), with every embedded migration applied, and closes it in t.Cleanup
// (before the directory is removed). It is never an in-memory database: WAL,
// the separate read pool and file modes behave as in production. The
// database holds only what migrations seed (the platform organization).
// A failure to open, migrate or close fails the test.
//
// The migrations run once per test process (migratedFile); each NewDB
// starts from a copy of that file, draws the database identity afresh as
// its migration does (every database has its own: replication refuses a
// replica marked with another's), and runs storage's Migrate on it again,
// which finds nothing pending and checks the applied migrations' checksums.
// Migrating from empty costs about 0.4 s of CPU under -race, and the
// suite opens a few hundred databases.
//
// Tests that close the database themselves (to hand it to Litestream, say)
// may: closing twice is harmless.
func NewDB(t testing.TB) *storage.DB {
	t.Helper()
	ctx := context.Background()
	image, err := migratedFile()
	if err != nil {
		t.Fatalf("storagetest: %v", err)
	}
	path := filepath.Join(t.TempDir(), DBFileName)
	if err := os.WriteFile(path, image, 0o600); err != nil {
		t.Fatalf("storagetest: write %s: %v", path, err)
	}
	db, err := storage.Open(ctx, path)
	if err != nil {
		t.Fatalf("storagetest: open %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("storagetest: close %s: %v", path, err)
		}
	})
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE chalupa_database_identity
			SET id = lower(hex(randomblob(8))), created_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)`)
		return err
	}); err != nil {
		t.Fatalf("storagetest: new database identity in %s: %v", path, err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{Logger: zerolog.Nop()}); err != nil {
		t.Fatalf("storagetest: migrate %s: %v", path, err)
	}
	return db
}

// migratedFile returns the bytes of a database file that storage.Open
// created and Migrate brought to the embedded schema, then closed (so the
// WAL is checkpointed into the file and removed). It is made once per
// process, in a directory removed at once.
var migratedFile = sync.OnceValues(func() ([]byte, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "storagetest-")
	if err != nil {
		return nil, fmt.Errorf("migrated database: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, DBFileName)
	db, err := storage.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("migrated database: open: %w", err)
	}
	_, merr := db.Migrate(ctx, storage.MigrateOptions{Logger: zerolog.Nop()})
	if err := errors.Join(merr, db.Close()); err != nil {
		return nil, fmt.Errorf("migrated database: %w", err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		return nil, errors.New("migrated database: the WAL outlived Close")
	}
	return os.ReadFile(path)
})

// seq numbers default slugs and ids; it is shared by every test of the
// process, so defaults never collide within one database either.
var seq atomic.Int64

func next() int64 { return seq.Add(1) }

// now is the default time of fixture rows: the wall clock in UTC, cut to
// the millisecond the schema stores.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// msUTC normalizes t to what a round trip through the schema returns:
// UTC, whole milliseconds. The zero time stays zero.
func msUTC(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// do runs fn as one writer unit with the test's context and fails the test,
// naming what, when it returns an error.
func do(t testing.TB, db *storage.DB, what string, fn storage.TxFunc) {
	t.Helper()
	if err := db.Writer.Do(t.Context(), fn); err != nil {
		t.Fatalf("storagetest: %s: %v", what, err)
	}
}

// nullID is SQL NULL for a zero row id, so SQLite assigns one.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

// environmentByID reads one environment by its row id (storage addresses
// environments by slug only).
func environmentByID(ctx context.Context, q storage.Querier, id int64) (storage.Environment, error) {
	environments, err := storage.ListEnvironments(ctx, q)
	if err != nil {
		return storage.Environment{}, err
	}
	for _, e := range environments {
		if e.ID == id {
			return e, nil
		}
	}
	return storage.Environment{}, fmt.Errorf("environment id %d: %w", id, storage.ErrNotFound)
}

// Environment inserts an environment and returns it as
// storage.EnvironmentBySlug reads it. Defaults for zero fields:
//
//   - Slug: "env-<n>", unique per call within the test process
//   - Name: the slug
//   - Status: "active" ("sunk" is honoured)
//   - OrgID: storage.PlatformOrgID (another id must exist: foreign key)
//   - CreatedAt: now; UpdatedAt: CreatedAt
//
// A zero ID is assigned by SQLite; a non-zero one is used. The row is inserted
// directly rather than with storage.CreateEnvironment, which fixes the
// status, organization and times. Fails the test on any error, for example
// a duplicate slug.
func Environment(t testing.TB, db *storage.DB, seed storage.Environment) storage.Environment {
	t.Helper()
	if seed.Slug == "" {
		seed.Slug = fmt.Sprintf("env-%d", next())
	}
	if seed.Name == "" {
		seed.Name = seed.Slug
	}
	if seed.Status == "" {
		seed.Status = "active"
	}
	if seed.OrgID == 0 {
		seed.OrgID = storage.PlatformOrgID
	}
	if seed.CreatedAt.IsZero() {
		seed.CreatedAt = now()
	}
	if seed.UpdatedAt.IsZero() {
		seed.UpdatedAt = seed.CreatedAt
	}
	var out storage.Environment
	do(t, db, "insert environment "+seed.Slug, func(tx storage.Tx) error {
		ctx := t.Context()
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO environments (id, org_id, slug, name, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			nullID(seed.ID), seed.OrgID, seed.Slug, seed.Name, seed.Status, seed.CreatedAt.UnixMilli(), seed.UpdatedAt.UnixMilli()); err != nil {
			return err
		}
		var err error
		out, err = storage.EnvironmentBySlug(ctx, tx, seed.Slug)
		return err
	})
	return out
}

// Deployment creates a deployment the way production does, through
// storage.RecordHeartbeat (so it also stores one heartbeat row, keyed by a
// placeholder key id), and returns it as storage.Fleet reads it. Defaults
// for zero fields:
//
//   - EnvironmentID: a new Environment fixture
//   - ID: "dep-<n>", unique per call within the test process
//   - Region "nyc3", Size "s-1vcpu-1gb"; DropletID stays 0 (unknown)
//   - Status: storage.DeploymentActive (storage.DeploymentEnded is honoured)
//   - LaunchedAt: now; LastHeartbeatAt: LaunchedAt (a later one is recorded
//     as a second heartbeat)
//   - IdleDeadlineAt: LaunchedAt + 30 minutes
//   - EndedAt, for an ended deployment only: LastHeartbeatAt
//   - AgentVersion: "storagetest/1"
//
// SessionExpiresAt and CIActive are stored as given (zero: none, false).
// An ended deployment is ended through storage.EndDeployment, the one path
// that ends deployments (and their telemetry sessions). The environment keeps its status and times: a sunk environment is
// not brought back as a first heartbeat would (Heartbeat does that). Fails the test on any error, for example an existing deployment id
// in the environment, and for a LastHeartbeatAt before LaunchedAt or an
// EndedAt on an active deployment.
func Deployment(t testing.TB, db *storage.DB, seed storage.Deployment) storage.Deployment {
	t.Helper()
	if seed.EnvironmentID == 0 {
		seed.EnvironmentID = Environment(t, db, storage.Environment{}).ID
	}
	if seed.ID == "" {
		seed.ID = fmt.Sprintf("dep-%d", next())
	}
	if seed.Region == "" {
		seed.Region = "nyc3"
	}
	if seed.Size == "" {
		seed.Size = "s-1vcpu-1gb"
	}
	if seed.Status == "" {
		seed.Status = storage.DeploymentActive
	}
	if seed.LaunchedAt.IsZero() {
		seed.LaunchedAt = now()
	}
	if seed.LastHeartbeatAt.IsZero() {
		seed.LastHeartbeatAt = seed.LaunchedAt
	}
	if seed.LastHeartbeatAt.Before(seed.LaunchedAt) {
		t.Fatalf("storagetest: deployment %s: LastHeartbeatAt %v is before LaunchedAt %v", seed.ID, seed.LastHeartbeatAt, seed.LaunchedAt)
	}
	if seed.IdleDeadlineAt.IsZero() {
		seed.IdleDeadlineAt = seed.LaunchedAt.Add(30 * time.Minute)
	}
	if seed.AgentVersion == "" {
		seed.AgentVersion = "storagetest/1"
	}
	switch {
	case seed.Status == storage.DeploymentEnded && seed.EndedAt.IsZero():
		seed.EndedAt = seed.LastHeartbeatAt
	case seed.Status == storage.DeploymentActive && !seed.EndedAt.IsZero():
		t.Fatalf("storagetest: deployment %s: an active deployment has no EndedAt", seed.ID)
	}
	hb := storage.Heartbeat{
		DeploymentID:  seed.ID,
		EnvironmentID: seed.EnvironmentID,
		KeyID:         fmt.Sprintf("env_storagetest_%016x", next()),
		ReceivedAt:    seed.LaunchedAt,
		SentAt:        seed.LaunchedAt,
		AgentVersion:  seed.AgentVersion,
		DropletID:     seed.DropletID,
		Region:        seed.Region,
		Size:          seed.Size,
		LimitMinutes:  30,
		// The stored deadline is the latest activity plus the limit, so
		// the activity is what yields the seeded deadline.
		LastActivityAt:   seed.IdleDeadlineAt.Add(-30 * time.Minute),
		CIActive:         seed.CIActive,
		IdleDeadlineAt:   seed.IdleDeadlineAt,
		SessionExpiresAt: seed.SessionExpiresAt,
	}
	var out storage.Deployment
	do(t, db, "create deployment "+seed.ID, func(tx storage.Tx) error {
		ctx := t.Context()
		environment, err := environmentByID(ctx, tx, seed.EnvironmentID)
		if err != nil {
			return err
		}
		if _, err := storage.RecordHeartbeat(ctx, tx, hb, false); err != nil {
			return err
		}
		// Undo the first heartbeat's reactivation of a sunk environment.
		if _, err := tx.ExecContext(ctx, `UPDATE environments SET status = ?, updated_at = ? WHERE id = ?`,
			environment.Status, environment.UpdatedAt.UnixMilli(), environment.ID); err != nil {
			return err
		}
		if seed.LastHeartbeatAt.After(seed.LaunchedAt) {
			later := hb
			later.ReceivedAt, later.SentAt = seed.LastHeartbeatAt, seed.LastHeartbeatAt
			if _, err := storage.RecordHeartbeat(ctx, tx, later, true); err != nil {
				return err
			}
		}
		if seed.Status == storage.DeploymentEnded {
			if _, err := storage.EndDeployment(ctx, tx, seed.EnvironmentID, seed.ID, seed.EndedAt); err != nil {
				return err
			}
		}
		out, err = deploymentRow(ctx, tx, seed.EnvironmentID, seed.ID)
		return err
	})
	return out
}

// EndDeployment ends an active deployment at the given time through
// storage.EndDeployment (which also ends its open telemetry sessions) and
// returns the row as read back. Fails the test if the deployment does not
// exist or was not active.
func EndDeployment(t testing.TB, db *storage.DB, environmentID int64, id string, at time.Time) storage.Deployment {
	t.Helper()
	var out storage.Deployment
	do(t, db, "end deployment "+id, func(tx storage.Tx) error {
		ctx := context.Background()
		ended, err := storage.EndDeployment(ctx, tx, environmentID, id, at)
		if err != nil {
			return err
		}
		if !ended {
			return errors.New("deployment was not active")
		}
		out, err = deploymentRow(ctx, tx, environmentID, id)
		return err
	})
	return out
}

// deploymentRow reads one deployment through storage.Fleet, the only
// storage query that returns deployment rows.
func deploymentRow(ctx context.Context, q storage.Querier, environmentID int64, id string) (storage.Deployment, error) {
	fleet, err := storage.Fleet(ctx, q, math.MaxInt32)
	if err != nil {
		return storage.Deployment{}, err
	}
	for _, e := range fleet {
		if e.ID != environmentID {
			continue
		}
		for _, d := range e.Deployments {
			if d.ID == id {
				return d, nil
			}
		}
	}
	return storage.Deployment{}, fmt.Errorf("deployment %s in environment %d: %w", id, environmentID, storage.ErrNotFound)
}

// Heartbeat records one heartbeat with storage.RecordHeartbeat, as the
// ingest handler does: the first heartbeat of a deployment id creates the
// deployment (and reactivates a sunk environment), a later one updates it.
// Defaults for zero fields:
//
//   - EnvironmentID: a new Environment fixture
//   - DeploymentID: "dep-<n>", unique per call within the test process
//   - KeyID: "env_storagetest_<16 hex>" (heartbeats do not reference keys)
//   - ReceivedAt: now; SentAt and LastActivityAt: ReceivedAt
//   - AgentVersion: "storagetest/1"
//   - LimitMinutes: 30
//   - IdleDeadlineAt: LastActivityAt + LimitMinutes (the handler's rule)
//
// DropletID, Region, Size, IdleChecks, CIActive and SessionExpiresAt are
// stored as given (zero: unknown, none or false; on an existing deployment
// zero keeps the stored value). It returns the heartbeat as stored: defaults
// filled in, times in UTC cut to milliseconds. Fails the test on any error,
// and for a heartbeat to an ended deployment (the handler refuses those).
func Heartbeat(t testing.TB, db *storage.DB, seed storage.Heartbeat) storage.Heartbeat {
	t.Helper()
	if seed.EnvironmentID == 0 {
		seed.EnvironmentID = Environment(t, db, storage.Environment{}).ID
	}
	if seed.DeploymentID == "" {
		seed.DeploymentID = fmt.Sprintf("dep-%d", next())
	}
	if seed.KeyID == "" {
		seed.KeyID = fmt.Sprintf("env_storagetest_%016x", next())
	}
	if seed.ReceivedAt.IsZero() {
		seed.ReceivedAt = now()
	}
	if seed.SentAt.IsZero() {
		seed.SentAt = seed.ReceivedAt
	}
	if seed.LastActivityAt.IsZero() {
		seed.LastActivityAt = seed.ReceivedAt
	}
	if seed.AgentVersion == "" {
		seed.AgentVersion = "storagetest/1"
	}
	if seed.LimitMinutes == 0 {
		seed.LimitMinutes = 30
	}
	if seed.IdleDeadlineAt.IsZero() {
		seed.IdleDeadlineAt = seed.LastActivityAt.Add(time.Duration(seed.LimitMinutes) * time.Minute)
	}
	seed.ReceivedAt, seed.SentAt, seed.LastActivityAt = msUTC(seed.ReceivedAt), msUTC(seed.SentAt), msUTC(seed.LastActivityAt)
	seed.IdleDeadlineAt, seed.SessionExpiresAt = msUTC(seed.IdleDeadlineAt), msUTC(seed.SessionExpiresAt)
	do(t, db, "record heartbeat for deployment "+seed.DeploymentID, func(tx storage.Tx) error {
		ctx := t.Context()
		status, err := storage.DeploymentStatus(ctx, tx, seed.EnvironmentID, seed.DeploymentID)
		exists := err == nil
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return err
		case status == storage.DeploymentEnded:
			return errors.New("deployment has ended")
		}
		_, err = storage.RecordHeartbeat(ctx, tx, seed, exists)
		return err
	})
	return seed
}

// PlaceholderEnvelope returns the envelope IngestKey stores when the row
// it is given has none: fixed bytes that are not a sealed envelope, so ingest's keyring
// refuses to open them (envelope.ErrMalformed). A new slice every call.
//
// storagetest cannot seal a real one: a key's envelope is bound to its key
// id by additional data that only package ingest defines, and importing
// ingest here would make storagetest unusable from ingest's own tests (an
// import cycle). A test that needs a key the keyring opens issues it with
// ingest.Keyring.Issue, or seals the envelope itself and passes it in.
func PlaceholderEnvelope() []byte {
	return []byte("storagetest: placeholder, not a sealed envelope")
}

// IngestKey inserts an ingest key row with storage.InsertIngestKey and
// returns it as storage.IngestKeyByID reads it. Defaults for zero fields:
//
//   - EnvironmentID: a new Environment fixture
//   - KeyID: "env_<environment slug>_<16 hex>", the issued-key format,
//     unique per call within the test process
//   - Status: storage.KeyActive (KeyRotating and KeyRevoked are honoured)
//   - MasterKeyVersion: 1
//   - Envelope: PlaceholderEnvelope()
//   - CreatedAt: now
//   - RotatedAt: CreatedAt for a rotating key; a revoked key has none
//     unless given (it was revoked without being rotated first)
//   - RevokedAt, for a revoked key: CreatedAt
//
// EnvironmentSlug is read from the environment and ignored in the row given.
// Rotating is a direct UPDATE (storage.RotateEnvironmentKeys would rotate
// the environment's other keys too); revoking uses storage.RevokeIngestKey.
// Fails the test on any error, for example a duplicate key id, and for a
// seed whose times contradict its status (RotatedAt on an active key,
// RevokedAt on a key that is not revoked).
func IngestKey(t testing.TB, db *storage.DB, seed storage.IngestKey) storage.IngestKey {
	t.Helper()
	if seed.EnvironmentID == 0 {
		seed.EnvironmentID = Environment(t, db, storage.Environment{}).ID
	}
	if seed.Status == "" {
		seed.Status = storage.KeyActive
	}
	if seed.MasterKeyVersion == 0 {
		seed.MasterKeyVersion = 1
	}
	if seed.Envelope == nil {
		seed.Envelope = PlaceholderEnvelope()
	}
	if seed.CreatedAt.IsZero() {
		seed.CreatedAt = now()
	}
	switch seed.Status {
	case storage.KeyActive:
		if !seed.RotatedAt.IsZero() || !seed.RevokedAt.IsZero() {
			t.Fatalf("storagetest: ingest key %q: an active key has no RotatedAt or RevokedAt", seed.KeyID)
		}
	case storage.KeyRotating:
		if !seed.RevokedAt.IsZero() {
			t.Fatalf("storagetest: ingest key %q: a rotating key has no RevokedAt", seed.KeyID)
		}
		if seed.RotatedAt.IsZero() {
			seed.RotatedAt = seed.CreatedAt
		}
	case storage.KeyRevoked:
		if seed.RevokedAt.IsZero() {
			seed.RevokedAt = seed.CreatedAt
		}
	default:
		t.Fatalf("storagetest: ingest key %q: unknown status %q", seed.KeyID, seed.Status)
	}
	var out storage.IngestKey
	do(t, db, "insert ingest key", func(tx storage.Tx) error {
		ctx := t.Context()
		if seed.KeyID == "" {
			environment, err := environmentByID(ctx, tx, seed.EnvironmentID)
			if err != nil {
				return err
			}
			seed.KeyID = fmt.Sprintf("env_%s_%016x", environment.Slug, next())
		}
		if err := storage.InsertIngestKey(ctx, tx, seed, seed.CreatedAt); err != nil {
			return fmt.Errorf("%s: %w", seed.KeyID, err)
		}
		if !seed.RotatedAt.IsZero() {
			if _, err := tx.ExecContext(ctx,
				`UPDATE ingest_keys SET status = 'rotating', rotated_at = ? WHERE key_id = ?`,
				seed.RotatedAt.UnixMilli(), seed.KeyID); err != nil {
				return err
			}
		}
		if seed.Status == storage.KeyRevoked {
			if err := storage.RevokeIngestKey(ctx, tx, seed.KeyID, seed.RevokedAt); err != nil {
				return err
			}
		}
		var err error
		out, err = storage.IngestKeyByID(ctx, tx, seed.KeyID)
		return err
	})
	return out
}

// TelemetryWindow stores one accepted telemetry window the way window
// admission does (receipt, detail row and session update in one writer
// unit) and returns it as stored. Zero fields of seed get defaults:
//   - EnvironmentID, DeploymentID: a new Deployment (active)
//   - SessionID: "sess-<n>"
//   - WindowStart: the current minute, UTC
//   - ReceivedAt: WindowStart + 60 s
//   - Metrics: when every metric is nil, cpuPct {n 12, sum 600, min 10,
//     max 90, last 40} and memUsedBytes/memTotalBytes {n 12, 1 GiB / 4 GiB}
//
// The receipt's body hash is derived from the identity and metrics (not the
// wire encoding ingest hashes), so a fixture row dedups only against
// itself. Fails the test if the identity already exists.
func TelemetryWindow(t testing.TB, db *storage.DB, seed storage.TelemetryWindow) storage.TelemetryWindow {
	t.Helper()
	if seed.EnvironmentID == 0 || seed.DeploymentID == "" {
		d := Deployment(t, db, storage.Deployment{EnvironmentID: seed.EnvironmentID})
		seed.EnvironmentID, seed.DeploymentID = d.EnvironmentID, d.ID
	}
	if seed.SessionID == "" {
		seed.SessionID = fmt.Sprintf("sess-%d", next())
	}
	if seed.WindowStart.IsZero() {
		seed.WindowStart = now().Truncate(time.Minute)
	}
	seed.WindowStart = msUTC(seed.WindowStart)
	if seed.ReceivedAt.IsZero() {
		seed.ReceivedAt = seed.WindowStart.Add(time.Minute)
	}
	seed.ReceivedAt = msUTC(seed.ReceivedAt)
	empty := true
	for _, m := range seed.Metrics {
		if m != nil {
			empty = false
		}
	}
	if empty {
		seed.Metrics[storage.MetricCPUPct] = &storage.MetricAgg{N: 12, Sum: 600, Min: 10, Max: 90, Last: 40}
		seed.Metrics[storage.MetricMemUsedBytes] = &storage.MetricAgg{N: 12, Sum: 12 << 30, Min: 1 << 30, Max: 1 << 30, Last: 1 << 30}
		seed.Metrics[storage.MetricMemTotalBytes] = &storage.MetricAgg{N: 12, Sum: 48 << 30, Min: 4 << 30, Max: 4 << 30, Last: 4 << 30}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d|%s|%s|%d|%t", seed.EnvironmentID, seed.DeploymentID, seed.SessionID, seed.WindowStart.UnixMilli(), seed.Final)
	for i, m := range seed.Metrics {
		if m != nil {
			fmt.Fprintf(h, "|%d:%v", i, *m)
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	do(t, db, "telemetry window", func(tx storage.Tx) error {
		ctx := context.Background()
		if err := storage.InsertTelemetryReceipt(ctx, tx, storage.TelemetryReceipt{
			EnvironmentID: seed.EnvironmentID, DeploymentID: seed.DeploymentID, SessionID: seed.SessionID,
			WindowStart: seed.WindowStart, BodyHash: sum, ReceivedAt: seed.ReceivedAt,
		}); err != nil {
			return err
		}
		if err := storage.InsertTelemetryWindow(ctx, tx, seed); err != nil {
			return err
		}
		_, err := storage.RecordSessionWindow(ctx, tx, seed.EnvironmentID, seed.DeploymentID, seed.SessionID,
			seed.WindowStart, seed.WindowStart.Add(time.Minute), seed.ReceivedAt, seed.Final)
		return err
	})
	return seed
}

// Box creates a box through storage.CreateBox and returns it. Defaults for
// zero fields:
//
//   - EnvironmentSlug: a new Environment fixture's
//   - ID: a fresh ULID; Name: "box-<n>", unique per call within the test
//     process
//   - Config: region nyc3, size s-2vcpu-4gb, image ubuntu-24-04-x64, one
//     SSH key fingerprint, sources 203.0.113.7/32 (customer) and
//     198.51.100.9/32 (control plane), a 10 GiB volume, no tags
//
// The configuration is not validated (boxes.Validate is the admin API's
// rule). Fails the test on any error, for example a duplicate name.
func Box(t testing.TB, db *storage.DB, seed storage.Box) storage.Box {
	t.Helper()
	if seed.EnvironmentSlug == "" {
		seed.EnvironmentSlug = Environment(t, db, storage.Environment{}).Slug
	}
	if seed.ID == "" {
		seed.ID = ulid.Make().String()
	}
	if seed.Name == "" {
		seed.Name = fmt.Sprintf("box-%d", next())
	}
	c := &seed.Config
	if c.Region == "" {
		c.Region = "nyc3"
	}
	if c.Size == "" {
		c.Size = "s-2vcpu-4gb"
	}
	if c.Image == "" {
		c.Image = "ubuntu-24-04-x64"
	}
	if c.SSHKeyFingerprints == nil {
		c.SSHKeyFingerprints = []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"}
	}
	if c.CustomerSource == "" {
		c.CustomerSource = "203.0.113.7/32"
	}
	if c.ControlPlaneSource == "" {
		c.ControlPlaneSource = "198.51.100.9/32"
	}
	if c.VolumeSizeGiB == 0 {
		c.VolumeSizeGiB = 10
	}
	if c.AgentIdleMinutes == 0 {
		c.AgentIdleMinutes = 30 // the agent's default (docs/operations.md, "Boxes")
	}
	var out storage.Box
	do(t, db, "insert box "+seed.Name, func(tx storage.Tx) error {
		var err error
		out, err = storage.CreateBox(t.Context(), tx, seed.ID, seed.Name, seed.EnvironmentSlug, seed.Managed, seed.Config, now())
		return err
	})
	return out
}
