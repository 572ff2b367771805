package ingest_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestRotationConfirmedByTheNewKeysHeartbeat: a rotation's key written to a
// box's droplet awaits its first heartbeat; until then the droplet's old
// key keeps verifying (rotating), a heartbeat the daemon refuses confirms
// nothing, and the first accepted heartbeat signed with the new key revokes
// the old one in its own writer unit, once, with an ingest-key-rotated
// event, also after a restart of the daemon between the write and the
// heartbeat. Another droplet's key is untouched (docs/operations.md,
// "Ingest keys").
func TestRotationConfirmedByTheNewKeysHeartbeat(t *testing.T) {
	ctx := context.Background()
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	h.CreateEnv("other-harbor")
	db := h.App.DB
	box := storagetest.Box(t, db, storage.Box{EnvironmentSlug: "demo-harbor"})
	neighbour := storagetest.Box(t, db, storage.Box{EnvironmentSlug: "demo-harbor"})
	old, next, theirs := h.Issue("demo-harbor"), h.Issue("demo-harbor"), h.Issue("demo-harbor")
	now := h.Clock.Now()
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for _, d := range []struct {
			key     string
			box     string
			droplet int64
		}{{old.ID, box.ID, 7}, {theirs.ID, neighbour.ID, 8}} {
			if err := storage.RecordKeyIssued(ctx, tx, d.key, d.box, d.droplet, now); err != nil {
				return err
			}
			if _, err := storage.MarkKeyDelivered(ctx, tx, d.key, now); err != nil {
				return err
			}
		}
		if err := storage.RecordRotationKeyIssued(ctx, tx, next.ID, box.ID, 7, now); err != nil {
			return err
		}
		earlier, err := storage.MarkRotationKeyWritten(ctx, tx, next.ID, now)
		if len(earlier) != 1 || earlier[0] != old.ID {
			t.Errorf("the written key replaces %v, want [%s]", earlier, old.ID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The rotation's state is rows: a daemon restarted between the write
	// and the heartbeat completes it.
	h.Restart()
	status := func(id string) string {
		t.Helper()
		var s string
		if err := h.SQL().QueryRow(`SELECT status FROM ingest_keys WHERE key_id = ?`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	beat := func(k daemontest.Key, env string) daemontest.Response {
		t.Helper()
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: env, Deployment: "droplet-7", DropletID: 7})})
	}
	events := func() int {
		return h.Count(`SELECT count(*) FROM lifecycle_events WHERE kind = ? AND deployment_id = 'droplet-7'`, ingest.EventKeyRotated)
	}
	for _, step := range []struct {
		name   string
		key    daemontest.Key
		env    string
		status int
		old    string
		events int
	}{
		{"the old key still verifies", old, "demo-harbor", http.StatusAccepted, storage.KeyRotating, 0},
		{"a refused heartbeat confirms nothing", next, "other-harbor", http.StatusForbidden, storage.KeyRotating, 0},
		{"the new key's heartbeat revokes the old key", next, "demo-harbor", http.StatusAccepted, storage.KeyRevoked, 1},
		{"the old key is refused", old, "demo-harbor", http.StatusUnauthorized, storage.KeyRevoked, 1},
		{"a later heartbeat confirms nothing more", next, "demo-harbor", http.StatusAccepted, storage.KeyRevoked, 1},
	} {
		t.Run(step.name, func(t *testing.T) {
			if r := beat(step.key, step.env); r.Status != step.status {
				t.Fatalf("heartbeat: %s, want %d", r, step.status)
			}
			if got := status(old.ID); got != step.old {
				t.Fatalf("the old key is %s, want %s", got, step.old)
			}
			if got := events(); got != step.events {
				t.Fatalf("%d ingest-key-rotated events, want %d", got, step.events)
			}
		})
	}
	if got := status(theirs.ID); got != storage.KeyActive {
		t.Fatalf("another droplet's key is %s, want active", got)
	}
	if got := h.Count(`SELECT count(*) FROM ingest_key_deliveries WHERE key_id = ? AND confirm_pending = 0 AND confirmed_at IS NOT NULL`, next.ID); got != 1 {
		t.Fatal("the new key is not recorded confirmed")
	}
}

// TestRevokeNamesWhoGoesSilent: a revocation stays immediate and names the
// active deployments whose newest heartbeat was signed with the key — with
// the box whose droplet it is, or none for another producer — and no
// deployment that moved on to another key or has ended
// (docs/operations.md, "Ingest keys").
func TestRevokeNamesWhoGoesSilent(t *testing.T) {
	ctx := context.Background()
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	db := h.App.DB
	box := storagetest.Box(t, db, storage.Box{EnvironmentSlug: "demo-harbor", Name: "web-1"})
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.RecordBoxResources(ctx, tx, box.ID, storage.BoxResources{DropletID: 9}, h.Clock.Now())
	}); err != nil {
		t.Fatal(err)
	}
	k, other := h.Issue("demo-harbor"), h.Issue("demo-harbor")
	beat := func(key daemontest.Key, dep string, droplet int64) {
		t.Helper()
		r := h.Send(daemontest.SignedReq{KeyID: key.ID, Key: key.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: dep, DropletID: droplet})})
		if r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat of %s: %s", dep, r)
		}
	}
	beat(k, "droplet-9", 9)
	beat(k, "ci-runner-1", 0)
	beat(k, "moved-on", 0)
	beat(other, "moved-on", 0)
	beat(k, "ended", 0)
	if _, err := h.Admin.EndDeployment(ctx, "demo-harbor", "ended"); err != nil {
		t.Fatal(err)
	}
	r, err := h.Admin.RevokeIngestKey(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []adminapi.SigningProducer{{Deployment: "ci-runner-1"}, {Deployment: "droplet-9", DropletID: 9, Box: "web-1"}}
	if !reflect.DeepEqual(r.StillSigning, want) {
		t.Fatalf("stillSigning %+v, want %+v", r.StillSigning, want)
	}
	if got := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "droplet-9", DropletID: 9})}); got.Status != http.StatusUnauthorized {
		t.Fatalf("a heartbeat with the revoked key: %s, want 401", got)
	}
}
