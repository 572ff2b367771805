package pulumiexec

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestRotateOutcomes: each way a box's rotation can end short of a
// confirming heartbeat leaves the keys so that nobody goes silent
// (docs/operations.md, "Ingest keys"): a box without the agent and a
// droplet without one get nothing and keep their key; an unreachable
// droplet keeps its key and the issued one is revoked; a droplet whose
// files took the new key but whose agent did not heartbeat with it in time
// (or whose restart failed) holds the new key active and awaiting, and its
// old key rotating, still verifying.
func TestRotateOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		agentOff bool
		setup    func(t *testing.T, d *sshdtest.Server, systemctl string)
		closed   bool // the droplet's port refuses connections
		outcome  string
		oldKey   string // the old key's status after
		newKey   string // the issued key's status after ("" none issued)
		mention  string
	}{
		{name: "agent off", agentOff: true, outcome: adminapi.RotationNoAgent, oldKey: storage.KeyActive, mention: "--agent=false"},
		{name: "no agent installed", setup: func(t *testing.T, d *sshdtest.Server, _ string) {
			if err := os.Remove(d.AgentBinary()); err != nil {
				t.Fatal(err)
			}
		}, outcome: adminapi.RotationNoAgent, oldKey: storage.KeyActive, newKey: storage.KeyRevoked, mention: "no agent installed"},
		{name: "unreachable", closed: true, outcome: adminapi.RotationUnreachable, oldKey: storage.KeyActive, newKey: storage.KeyRevoked, mention: "did not come up"},
		{name: "not confirmed", outcome: adminapi.RotationNotConfirmed, oldKey: storage.KeyRotating, newKey: storage.KeyActive, mention: "no heartbeat signed with the new key"},
		{name: "restart failed", setup: func(t *testing.T, _ *sshdtest.Server, systemctl string) {
			if err := os.WriteFile(systemctl, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, outcome: adminapi.RotationNotConfirmed, oldKey: storage.KeyRotating, newKey: storage.KeyActive, mention: "restarting chalupa-agent.service failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := storagetest.NewDB(t)
			env := storagetest.Environment(t, db, storage.Environment{})
			box := storagetest.Box(t, db, storage.Box{EnvironmentSlug: env.Slug})
			box.Config.Agent = !tc.agentOff
			sealer, err := envelope.New(bytes.Repeat([]byte{9}, envelope.KeySize), 1)
			if err != nil {
				t.Fatal(err)
			}
			clock := clockwork.NewRealClock()
			line, err := sshdeliver.EnsureIdentity(ctx, db, sealer, clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			droplet := sshdtest.New(t, sshdtest.NewSigner(t), sshdtest.Authorized(t, line))
			droplet.Root = t.TempDir()
			bin := t.TempDir()
			systemctl := filepath.Join(bin, "systemctl")
			if err := os.WriteFile(systemctl, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			droplet.Path = []string{bin}
			if err := os.MkdirAll(filepath.Dir(droplet.AgentBinary()), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(droplet.AgentBinary(), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			port := droplet.Port()
			if tc.closed {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				port = ln.Addr().(*net.TCPAddr).Port
				ln.Close()
			}
			keys := ingest.NewKeyring(db, sealer, nil)
			kd := &KeyDelivery{DB: db, Keys: keys, Sealer: sealer, Clock: clock, Port: port, Log: zerolog.Nop(), ConfirmWait: 200 * time.Millisecond}
			kd.deliverer = sshdeliver.New(db, sealer, clock)
			kd.deliverer.UpgradeWait, kd.deliverer.Retry = 300*time.Millisecond, 100*time.Millisecond
			var old []string
			if !tc.closed {
				// The droplet's current key, as converge delivered it.
				if _, err := kd.Deliver(ctx, box, 101, "127.0.0.1"); err != nil {
					t.Fatal(err)
				}
				if old, err = storage.DropletKeys(ctx, db.Read, box.ID, 101); err != nil || len(old) != 1 {
					t.Fatalf("the droplet's keys %v (%v), want the one converge delivered", old, err)
				}
			} else {
				// Nothing answers on the port: record the key as a
				// running droplet would hold it.
				k, err := keys.Issue(ctx, env.Slug)
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
					if err := storage.RecordKeyIssued(ctx, tx, k.KeyID, box.ID, 101, clock.Now()); err != nil {
						return err
					}
					_, err := storage.MarkKeyDelivered(ctx, tx, k.KeyID, clock.Now())
					return err
				}); err != nil {
					t.Fatal(err)
				}
				old = []string{k.KeyID}
			}
			if tc.setup != nil {
				tc.setup(t, droplet, systemctl)
			}
			box.Resources.DropletID, box.Launch.DropletID, box.Launch.IPv4 = 101, 101, "127.0.0.1"
			got := kd.Rotate(ctx, box)
			if got.Outcome != tc.outcome || !strings.Contains(got.Reason, tc.mention) {
				t.Fatalf("rotation %+v, want %s mentioning %q", got, tc.outcome, tc.mention)
			}
			if strings.Contains(got.Reason, "127.0.0.1") {
				t.Fatalf("the reason %q names the address", got.Reason)
			}
			status := func(id string) string {
				k, err := storage.IngestKeyByID(ctx, db.Read, id)
				if err != nil {
					t.Fatal(err)
				}
				return k.Status
			}
			if s := status(old[0]); s != tc.oldKey {
				t.Fatalf("the old key is %s, want %s", s, tc.oldKey)
			}
			var issued []string
			rows, err := db.Read.QueryContext(ctx, `SELECT key_id FROM ingest_key_deliveries WHERE confirm_pending = 1 OR key_id IN
				(SELECT key_id FROM ingest_keys WHERE key_id <> ?)`, old[0])
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				issued = append(issued, id)
			}
			rows.Close()
			switch {
			case tc.newKey == "" && len(issued) != 0:
				t.Fatalf("keys %v issued, want none", issued)
			case tc.newKey != "" && len(issued) != 1:
				t.Fatalf("keys %v issued, want one", issued)
			case tc.newKey != "" && status(issued[0]) != tc.newKey:
				t.Fatalf("the issued key is %s, want %s", status(issued[0]), tc.newKey)
			}
			if tc.outcome == adminapi.RotationNotConfirmed {
				if got.KeyID != issued[0] || len(got.PendingKeyIDs) != 1 || got.PendingKeyIDs[0] != old[0] {
					t.Fatalf("rotation %+v, want the new key %s and the old %s pending", got, issued[0], old[0])
				}
				if pending, _ := storage.KeyAwaitsConfirmation(ctx, db.Read, issued[0]); !pending {
					t.Fatal("the new key does not await its heartbeat")
				}
				b, err := os.ReadFile(filepath.Join(droplet.AgentDir(), "key-id"))
				if err != nil || strings.TrimSpace(string(b)) != issued[0] {
					t.Fatalf("the droplet's key-id holds %q (%v), want the new key", b, err)
				}
			}
		})
	}
}
