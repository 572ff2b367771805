package e2e

// Key rotation that reaches running boxes, on booted machines
// (docs/operations.md, "Ingest keys", under Rotation that reaches the fleet):
// the daemon's rotation writes the new pair over each box's real sshd and
// restarts chalupa-agent.service under the box's systemd; the restarted
// agent, the built binary, reads the new key at start and heartbeats with
// it through the bed's TLS front.

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/digitalocean/dofake/machines"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// rotateBox is one booted box of TestMachineKeyRotation.
type rotateBox struct {
	name string
	x    *machines.Box
	dep  adminapi.FleetDeployment
	// session is the authenticated SSH connection kept open on the box.
	session *ssh.Client
}

// rotateKeyState is what a box's own files and systemd say of its key:
// the key id file, a digest of the key file (never the material), both
// files' mode and owner, and the agent unit's main PID.
type rotateKeyState struct {
	keyID, keySum, modes, mainPID string
}

// TestMachineKeyRotation: `admin keys rotate ENV` with two booted boxes
// running (docs/operations.md, "Ingest keys", under Rotation that reaches the
// fleet). Both boxes have a two-minute idle limit and an authenticated SSH
// session open on them throughout (the activity that keeps a box alive: a
// restart is not activity, so without a session the reaper, live here,
// would rightly destroy both at their deadlines, and "stays live" would
// prove nothing). The rotation answers rotated for both boxes and issues no
// key for other producers (every active key is a box's); on each box the
// key file changed, still 0600 and the agent's, and the unit's MainPID
// changed (the rotation restarts the unit); the deployment's heartbeats are
// signed with the new key id, and the old key was revoked no earlier than
// the first of them, with an ingest-key-rotated event; the fleet view
// counts the environment's keys so (there is no listing of keys). `admin box
// deliver-key` then gives one box yet another key the same way. Both
// deployments are still active a heartbeat past the idle deadline that
// stood before the rotation, no heartbeat since a box's new key is signed
// with another, and the write token made no DELETE. Last, `admin keys
// revoke` of the key a box signs with names that box in stillSigning (it
// goes silent: documented, and the reason to rotate instead).
func TestMachineKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const env, limitMinutes = "rotate", 2
	api, bed, d, fingerprint := machineDaemon(t, "live")
	cl := d.Admin()
	signer, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.AddAccountKey(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))); err != nil {
		t.Fatal(err)
	}
	fingerprints := []string{fingerprint, ssh.FingerprintLegacyMD5(signer.PublicKey())}
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: env}); err != nil {
		t.Fatal(err)
	}
	boxes := []*rotateBox{{name: "box-r1"}, {name: "box-r2"}}
	t.Cleanup(func() {
		for _, b := range boxes {
			if b.session != nil {
				b.session.Close()
			}
		}
	})
	t.Run("up", func(t *testing.T) {
		for _, b := range boxes {
			t.Run(b.name, func(t *testing.T) {
				t.Parallel()
				b.x, b.dep = machineBoxUp(t, cl, bed, fingerprints, env, b.name, limitMinutes, lifecycleVersion)
				// The session opens well inside the first deadline (the
				// agent's start plus the limit) and lasts the whole test.
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				sc, err := b.x.SSH(sctx, "root", signer)
				if err != nil {
					t.Fatal(err)
				}
				b.session = sc
				sess, err := sc.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				if err := sess.Start("sleep 1800"); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	upAt := time.Now()

	db, err := storage.OpenReadOnly(ctx, d.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	onBox := func(b *rotateBox) rotateKeyState {
		t.Helper()
		var s rotateKeyState
		for _, c := range []struct {
			to   *string
			args []string
		}{
			{&s.keyID, []string{"cat", "/etc/chalupa-agent/key-id"}},
			{&s.keySum, []string{"sh", "-c", "sha256sum < /etc/chalupa-agent/ingest.key"}},
			{&s.modes, []string{"stat", "-c", "%a %U", "/etc/chalupa-agent", "/etc/chalupa-agent/ingest.key", "/etc/chalupa-agent/key-id"}},
			{&s.mainPID, []string{"systemctl", "show", "-p", "MainPID", "--value", "chalupa-agent"}},
		} {
			out, err := b.x.Exec(wctx, c.args...)
			if err != nil {
				t.Fatalf("%s: %s: %v", b.name, c.args[0], err)
			}
			*c.to = strings.TrimSpace(out)
		}
		return s
	}
	// signedWith is the key id of the deployment's newest heartbeat, as
	// the server recorded it (heartbeats.key_id).
	signedWith := func(b *rotateBox) string {
		t.Helper()
		var id string
		if err := db.Read.QueryRowContext(ctx, `SELECT key_id FROM heartbeats WHERE deployment_id = ? ORDER BY id DESC LIMIT 1`, b.dep.ID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// firstSigned is when the first heartbeat of the deployment signed
	// with key arrived (unix ms).
	firstSigned := func(b *rotateBox, key string) int64 {
		t.Helper()
		var at sql.NullInt64
		if err := db.Read.QueryRowContext(ctx, `SELECT min(received_at) FROM heartbeats WHERE deployment_id = ? AND key_id = ?`, b.dep.ID, key).Scan(&at); err != nil || !at.Valid {
			t.Fatalf("%s: no heartbeat signed with %s (%v)", b.name, key, err)
		}
		return at.Int64
	}
	key := func(id string) storage.IngestKey {
		t.Helper()
		k, err := storage.IngestKeyByID(ctx, db.Read, id)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	rotatedEvents := func(b *rotateBox) int {
		t.Helper()
		ev, err := cl.ListEvents(ctx, adminapi.ListEventsRequest{Environment: env, Kind: ingest.EventKeyRotated})
		if err != nil {
			t.Fatal(err)
		}
		return len(slices.DeleteFunc(ev.Events, func(e adminapi.Event) bool { return e.Deployment != b.dep.ID }))
	}
	// rotated requires what a rotation of b from before promises, from the
	// answer r, the box's own files and systemd, and the server's rows.
	rotated := func(b *rotateBox, before rotateKeyState, events int, r adminapi.BoxKeyRotation) rotateKeyState {
		t.Helper()
		if r.Outcome != adminapi.RotationRotated || r.KeyID == "" || r.KeyID == before.keyID || !slices.Equal(r.RevokedKeyIDs, []string{before.keyID}) {
			t.Fatalf("%s: %+v; want rotated to a new key with %s revoked", b.name, r, before.keyID)
		}
		after := onBox(b)
		if after.keyID != r.KeyID || after.keySum == before.keySum {
			t.Errorf("%s: the box's key-id %q (key changed: %v); want %s in a changed key file", b.name, after.keyID, after.keySum != before.keySum, r.KeyID)
		}
		if after.modes != "700 chalupa-agent\n600 chalupa-agent\n600 chalupa-agent" {
			t.Errorf("%s: modes and owners after the rotation %q; want the directory 0700 and both files 0600, the agent's", b.name, after.modes)
		}
		if after.mainPID == before.mainPID || after.mainPID == "0" {
			t.Errorf("%s: MainPID %s before, %s after; want the unit restarted", b.name, before.mainPID, after.mainPID)
		}
		if got, err := b.x.Exec(wctx, "systemctl", "is-active", "chalupa-agent"); err != nil || strings.TrimSpace(got) != "active" {
			t.Errorf("%s: the unit after the rotation is %q, %v", b.name, got, err)
		}
		if got := signedWith(b); got != r.KeyID {
			t.Errorf("%s: the newest heartbeat is signed with %s, want the new key %s", b.name, got, r.KeyID)
		}
		old, first := key(before.keyID), firstSigned(b, r.KeyID)
		if old.Status != storage.KeyRevoked || old.RevokedAt.UnixMilli() < first {
			t.Errorf("%s: the old key is %s, revoked at %v; want revoked no earlier than the first heartbeat with the new key, %v",
				b.name, old.Status, old.RevokedAt, time.UnixMilli(first).UTC())
		}
		if k := key(r.KeyID); k.Status != storage.KeyActive {
			t.Errorf("%s: the new key is %s, want active", b.name, k.Status)
		}
		if n := rotatedEvents(b); n != events+1 {
			t.Errorf("%s: %d ingest-key-rotated events, want %d", b.name, n, events+1)
		}
		return after
	}

	before := map[string]rotateKeyState{}
	events := map[string]int{}
	var staleBy time.Time // the latest idle deadline before the rotation
	for _, b := range boxes {
		s := onBox(b)
		if got := signedWith(b); got != s.keyID {
			t.Fatalf("%s: the box's key-id %s, its heartbeats signed with %s", b.name, s.keyID, got)
		}
		before[b.name], events[b.name] = s, rotatedEvents(b)
		dep := lifecycleDeployment(t, cl, env, b.dep.ID, time.Minute, func(adminapi.FleetDeployment) bool { return true })
		if dep.IdleDeadlineAt.After(staleBy) {
			staleBy = dep.IdleDeadlineAt
		}
	}

	start := time.Now()
	r, err := cl.RotateIngestKey(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admin keys rotate %s, two boxes: %v", env, time.Since(start).Round(100*time.Millisecond))
	if r.Boxes == nil || len(*r.Boxes) != 2 {
		t.Fatalf("the rotation's boxes: %+v; want both", r.Boxes)
	}
	if r.KeyID != "" || r.KeyMaterial != "" || len(r.RotatedKeyIDs) != 0 {
		t.Errorf("the rotation issued a key for other producers (%s, rotated %v); every active key was a box's", r.KeyID, r.RotatedKeyIDs)
	}
	for _, b := range boxes {
		i := slices.IndexFunc(*r.Boxes, func(o adminapi.BoxKeyRotation) bool { return o.Box == b.name })
		if i < 0 {
			t.Fatalf("the rotation does not report %s: %+v", b.name, *r.Boxes)
		}
		before[b.name] = rotated(b, before[b.name], events[b.name], (*r.Boxes)[i])
		events[b.name]++
	}
	keyCounts := func() map[string]int {
		t.Helper()
		f, err := cl.ListFleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range f.Environments {
			if e.Slug == env {
				return e.Keys
			}
		}
		t.Fatalf("environment %s is not in the fleet", env)
		return nil
	}
	// The fleet view (the admin API's only view of key statuses) agrees:
	// the two new keys active, the two old ones revoked, none rotating.
	if got := keyCounts(); got["active"] != 2 || got["revoked"] != 2 || got["rotating"] != 0 {
		t.Errorf("the environment's keys after the rotation %v; want 2 active, 2 revoked", got)
	}
	if t.Failed() {
		return
	}

	// deliver-key: box 1 gets yet another key the same way.
	b1 := boxes[0]
	dr, err := cl.DeliverBoxKey(ctx, b1.name)
	if err != nil {
		t.Fatal(err)
	}
	before[b1.name] = rotated(b1, before[b1.name], events[b1.name], dr)
	t.Logf("admin box deliver-key %s: %v after the rotation's start", b1.name, time.Since(start).Round(100*time.Millisecond))
	if got := keyCounts(); got["active"] != 2 || got["revoked"] != 3 || got["rotating"] != 0 {
		t.Errorf("the environment's keys after deliver-key %v; want 2 active, 3 revoked", got)
	}

	// Both stay live past the deadline that stood before the rotation: a
	// heartbeat half a minute after it, the deployment active and its
	// deadline moving, every heartbeat since its newest key signed with it,
	// and no DELETE.
	for _, b := range boxes {
		dep := lifecycleDeployment(t, cl, env, b.dep.ID, time.Until(staleBy)+2*time.Minute, func(d adminapi.FleetDeployment) bool {
			return d.Status != "active" || d.LastHeartbeatAt.After(staleBy.Add(30*time.Second))
		})
		if dep.Status != "active" || !dep.IdleDeadlineAt.After(staleBy) {
			t.Errorf("%s past the deadline %v that stood before the rotation: %+v; want active with its deadline moved on", b.name, staleBy, dep)
		}
		k := before[b.name].keyID
		var others int
		if err := db.Read.QueryRowContext(ctx, `SELECT count(*) FROM heartbeats WHERE deployment_id = ? AND received_at >= ? AND key_id != ?`,
			b.dep.ID, firstSigned(b, k), k).Scan(&others); err != nil || others != 0 {
			t.Errorf("%s: %d heartbeats (%v) since its key %s signed with another", b.name, others, err, k)
		}
	}
	if del := api.Requests(dofake.WithToken("write"), func(r dofake.Request) bool { return r.Method == http.MethodDelete }); len(del) != 0 {
		t.Errorf("the write token made DELETEs: %v", del)
	}
	t.Logf("both boxes live %v after both were up, %v past the deadline that stood before the rotation",
		time.Since(upAt).Round(time.Second), time.Since(staleBy).Round(time.Second))
	if t.Failed() {
		return
	}

	// Last: revoking the key box 2 signs with names box 2; it goes silent.
	b2 := boxes[1]
	rv, err := cl.RevokeIngestKey(ctx, before[b2.name].keyID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rv.StillSigning) != 1 || rv.StillSigning[0] != (adminapi.SigningProducer{Deployment: b2.dep.ID, DropletID: int64(b2.x.Droplet.ID), Box: b2.name}) {
		t.Errorf("revoking %s's key answered stillSigning %+v; want %s (%s)", b2.name, rv.StillSigning, b2.name, b2.dep.ID)
	}
}
