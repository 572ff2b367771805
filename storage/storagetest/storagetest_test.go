package storagetest_test

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// NewDB is a migrated file in its own temporary directory, not :memory:.
func TestNewDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storagetest.NewDB(t)
	if filepath.Base(db.Path) != storagetest.DBFileName || !filepath.IsAbs(db.Path) {
		t.Fatalf("database path %q, want an absolute path to %s", db.Path, storagetest.DBFileName)
	}
	if err := storage.IntegrityCheck(ctx, db.Path); err != nil {
		t.Fatalf("the file at %s: %v", db.Path, err)
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v == 0 {
		t.Fatalf("SchemaVersion = %d, %v; want migrated", v, err)
	}
	if err := db.CheckApplied(ctx, nil); err != nil {
		t.Fatal(err)
	}
	other := storagetest.NewDB(t)
	if other.Path == db.Path {
		t.Fatal("two NewDB calls share a file")
	}
	// Each database its own identity, as each migrated database has:
	// replication refuses a replica marked with another database's.
	id1, err1 := storage.DatabaseIdentity(ctx, db.Read)
	id2, err2 := storage.DatabaseIdentity(ctx, other.Read)
	if err1 != nil || err2 != nil || id1 == "" || id1 == id2 {
		t.Fatalf("identities %q (%v) and %q (%v), want two different ones", id1, err1, id2, err2)
	}
}

// Zero seeds get unique defaults, and every fixture returns the row the
// read queries return.
func TestFixtureDefaultsReadBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storagetest.NewDB(t)

	e1 := storagetest.Environment(t, db, storage.Environment{})
	e2 := storagetest.Environment(t, db, storage.Environment{})
	if e1.Slug == e2.Slug || e1.ID == e2.ID {
		t.Fatalf("two default environments collide: %+v, %+v", e1, e2)
	}
	if e1.Name != e1.Slug || e1.Status != "active" || e1.OrgID != storage.PlatformOrgID || e1.CreatedAt.IsZero() || !e1.UpdatedAt.Equal(e1.CreatedAt) {
		t.Errorf("default environment: %+v", e1)
	}
	if got, err := storage.EnvironmentBySlug(ctx, db.Read, e1.Slug); err != nil || got != e1 {
		t.Errorf("EnvironmentBySlug = %+v, %v; fixture returned %+v", got, err, e1)
	}

	d := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: e1.ID})
	if d.ID == "" || d.EnvironmentID != e1.ID || d.Status != storage.DeploymentActive || d.LaunchedAt.IsZero() ||
		!d.LastHeartbeatAt.Equal(d.LaunchedAt) || !d.IdleDeadlineAt.Equal(d.LaunchedAt.Add(30*time.Minute)) ||
		d.Region == "" || d.Size == "" || d.AgentVersion == "" || !d.EndedAt.IsZero() {
		t.Errorf("default deployment: %+v", d)
	}
	if st, err := storage.DeploymentStatus(ctx, db.Read, e1.ID, d.ID); err != nil || st != storage.DeploymentActive {
		t.Errorf("DeploymentStatus = %q, %v", st, err)
	}

	k := storagetest.IngestKey(t, db, storage.IngestKey{EnvironmentID: e1.ID})
	if k.EnvironmentSlug != e1.Slug || k.Status != storage.KeyActive || k.MasterKeyVersion != 1 ||
		!bytes.Equal(k.Envelope, storagetest.PlaceholderEnvelope()) || k.CreatedAt.IsZero() {
		t.Errorf("default ingest key: %+v", k)
	}
	if got, err := storage.IngestKeyByID(ctx, db.Read, k.KeyID); err != nil || !sameKey(got, k) {
		t.Errorf("IngestKeyByID = %+v, %v; fixture returned %+v", got, err, k)
	}

	// Fixtures with no environment make their own.
	lone := storagetest.IngestKey(t, db, storage.IngestKey{})
	if lone.EnvironmentID == e1.ID || lone.EnvironmentID == e2.ID {
		t.Errorf("a key without an environment reused one: %+v", lone)
	}
	hb := storagetest.Heartbeat(t, db, storage.Heartbeat{})
	if hb.EnvironmentID == 0 || hb.DeploymentID == "" || hb.KeyID == "" || hb.ReceivedAt.IsZero() ||
		!hb.IdleDeadlineAt.Equal(hb.LastActivityAt.Add(time.Duration(hb.LimitMinutes)*time.Minute)) {
		t.Errorf("default heartbeat: %+v", hb)
	}
	if st, err := storage.DeploymentStatus(ctx, db.Read, hb.EnvironmentID, hb.DeploymentID); err != nil || st != storage.DeploymentActive {
		t.Errorf("the heartbeat's deployment: %q, %v", st, err)
	}

	envs, err := storage.ListEnvironments(ctx, db.Read)
	if err != nil || len(envs) != 4 {
		t.Fatalf("ListEnvironments: %d environments, %v; want 4", len(envs), err)
	}
	keys, err := storage.ListIngestKeyEnvelopes(ctx, db.Read)
	if err != nil || len(keys) != 2 {
		t.Fatalf("ListIngestKeyEnvelopes: %d keys, %v; want 2", len(keys), err)
	}
}

// Seed fields are stored as given: a sunk environment, an ended deployment
// with a later heartbeat, rotating and revoked keys.
func TestFixtureSeedsAreStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storagetest.NewDB(t)
	at := time.Date(2026, 3, 4, 5, 6, 7, 8_000_000, time.UTC)

	env := storagetest.Environment(t, db, storage.Environment{
		Slug: "demo-harbor", Name: "Demo harbor", Status: "sunk", CreatedAt: at, UpdatedAt: at.Add(time.Hour),
	})
	want := storage.Environment{ID: env.ID, Slug: "demo-harbor", Name: "Demo harbor", Status: "sunk",
		OrgID: storage.PlatformOrgID, CreatedAt: at, UpdatedAt: at.Add(time.Hour)}
	if env != want {
		t.Fatalf("environment = %+v, want %+v", env, want)
	}

	// A deployment fixture leaves the environment as it was.
	ended := storagetest.Deployment(t, db, storage.Deployment{
		EnvironmentID: env.ID, ID: "dep-ended", DropletID: 4242, Region: "ams3", Size: "s-2vcpu-4gb",
		Status: storage.DeploymentEnded, LaunchedAt: at, LastHeartbeatAt: at.Add(time.Minute),
		EndedAt: at.Add(2 * time.Minute), IdleDeadlineAt: at.Add(time.Hour), SessionExpiresAt: at.Add(8 * time.Hour),
		CIActive: true, AgentVersion: "agent/7",
	})
	wantDep := storage.Deployment{ID: "dep-ended", EnvironmentID: env.ID, DropletID: 4242, Region: "ams3", Size: "s-2vcpu-4gb",
		Status: storage.DeploymentEnded, LaunchedAt: at, EndedAt: at.Add(2 * time.Minute), SessionExpiresAt: at.Add(8 * time.Hour),
		IdleDeadlineAt: at.Add(time.Hour), LastHeartbeatAt: at.Add(time.Minute), CIActive: true, AgentVersion: "agent/7"}
	if ended != wantDep {
		t.Fatalf("deployment = %+v, want %+v", ended, wantDep)
	}
	if got, _ := storage.EnvironmentBySlug(ctx, db.Read, env.Slug); got != env {
		t.Errorf("environment after a deployment fixture: %+v, want it unchanged %+v", got, env)
	}

	// A heartbeat's first sight of a deployment creates it and brings the
	// sunk environment back.
	hb := storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: "dep-new", ReceivedAt: at.Add(time.Hour)})
	if got, _ := storage.EnvironmentBySlug(ctx, db.Read, env.Slug); got.Status != "active" {
		t.Errorf("environment after a new deployment's heartbeat: %+v, want active", got)
	}
	storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: "dep-new", ReceivedAt: at.Add(2 * time.Hour)})
	fleet, err := storage.Fleet(ctx, db.Read, math.MaxInt32)
	if err != nil || len(fleet) != 1 || len(fleet[0].Deployments) != 2 {
		t.Fatalf("Fleet = %+v, %v; want one environment with two deployments", fleet, err)
	}
	if d := fleet[0].Deployments[0]; d.ID != "dep-new" || !d.LaunchedAt.Equal(hb.ReceivedAt) || !d.LastHeartbeatAt.Equal(at.Add(2*time.Hour)) {
		t.Errorf("deployment after two heartbeats: %+v", d)
	}
	var heartbeats int
	if err := db.Read.QueryRow(`SELECT count(*) FROM heartbeats WHERE environment_id = ?`, env.ID).Scan(&heartbeats); err != nil || heartbeats != 4 {
		t.Errorf("%d heartbeat rows (%v), want 4 (two for the ended deployment, two sent)", heartbeats, err)
	}

	rotating := storagetest.IngestKey(t, db, storage.IngestKey{EnvironmentID: env.ID, KeyID: "env_demo-harbor_0000000000000001",
		Status: storage.KeyRotating, MasterKeyVersion: 3, Envelope: []byte("sealed elsewhere"), CreatedAt: at, RotatedAt: at.Add(time.Minute)})
	wantKey := storage.IngestKey{KeyID: "env_demo-harbor_0000000000000001", EnvironmentID: env.ID, EnvironmentSlug: "demo-harbor",
		Status: storage.KeyRotating, MasterKeyVersion: 3, Envelope: []byte("sealed elsewhere"), CreatedAt: at, RotatedAt: at.Add(time.Minute)}
	if !sameKey(rotating, wantKey) {
		t.Errorf("rotating key = %+v, want %+v", rotating, wantKey)
	}
	revoked := storagetest.IngestKey(t, db, storage.IngestKey{EnvironmentID: env.ID, Status: storage.KeyRevoked, CreatedAt: at})
	if revoked.Status != storage.KeyRevoked || !revoked.RevokedAt.Equal(at) || !revoked.RotatedAt.IsZero() {
		t.Errorf("revoked key = %+v, want revoked at %v and never rotated", revoked, at)
	}
	if st, err := storage.IngestKeyStatus(ctx, db.Read, revoked.KeyID); err != nil || st != storage.KeyRevoked {
		t.Errorf("IngestKeyStatus = %q, %v", st, err)
	}
	if fleet, _ := storage.Fleet(ctx, db.Read, 1); fleet[0].KeyCounts[storage.KeyRotating] != 1 || fleet[0].KeyCounts[storage.KeyRevoked] != 1 {
		t.Errorf("Fleet key counts: %v", fleet[0].KeyCounts)
	}
}

// sameKey compares ingest key rows (IngestKey holds a byte slice).
func sameKey(a, b storage.IngestKey) bool {
	env := bytes.Equal(a.Envelope, b.Envelope)
	a.Envelope, b.Envelope = nil, nil
	return env && a.KeyID == b.KeyID && a.EnvironmentID == b.EnvironmentID && a.EnvironmentSlug == b.EnvironmentSlug &&
		a.Status == b.Status && a.MasterKeyVersion == b.MasterKeyVersion &&
		a.CreatedAt.Equal(b.CreatedAt) && a.RotatedAt.Equal(b.RotatedAt) && a.RevokedAt.Equal(b.RevokedAt)
}
