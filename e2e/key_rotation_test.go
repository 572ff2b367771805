package e2e

// Key rotation that reaches running boxes (docs/operations.md, "Ingest
// keys"): a daemon assembled in process, each box's droplet a fake sshd
// (pulumiexec/sshdeliver/sshdtest) on its own loopback address and the one
// CHALUPA_SSH_PORT, its agent the agent's own code in this process. The
// droplet's systemctl is a script that asks the test to restart that
// droplet's agent and answers once the restarted agent has sent the
// heartbeat its start sends, as systemd's restart of chalupa-agent.service
// and the agent's Run would. On a booted machine (the machine bed) the
// same assertions hold with the real sshd, systemd and the built agent
// (TestMachineKeyRotation, e2e/machines_rotate_test.go).

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/agent/agenttest"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
	"github.com/chalupa-run/chalupa/storage"
)

// rotationBox is one box of the rotation fleet: its droplet's sshd, its
// agent's fixture and the running agent.
type rotationBox struct {
	name    string
	droplet int64
	sshd    *sshdtest.Server
	fleet   *agenttest.Fleet
	cfg     agent.Config

	mu    sync.Mutex
	agent *agent.Agent
}

// restart is what the droplet's `systemctl restart chalupa-agent.service`
// does: the running agent stops (its final window and shutdown event
// delivered), a new one starts from the key files and sends its first
// heartbeat. The status is that heartbeat's.
func (b *rotationBox) restart(t *testing.T) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.agent != nil {
		b.agent.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := agent.Start(ctx, b.cfg)
	if err != nil {
		t.Errorf("restart the agent of %s: %v", b.name, err)
		return 0
	}
	b.agent = a
	status, _ := a.Heartbeat(ctx)
	return status
}

// heartbeat sends one heartbeat from the box's running agent.
func (b *rotationBox) heartbeat() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	status, _ := b.agent.Heartbeat(context.Background())
	return status
}

// TestKeyRotationReachesRunningBoxes: `admin keys rotate` gives each running
// box with the agent a fresh key of its own over SSH; each restarted agent
// heartbeats with it, which revokes the box's old key, and the answer says
// rotated for both; a box without the agent is reported and keeps its key;
// the other producers' key is rotating beside a fresh one. `admin box
// deliver-key` does the same for one box. `admin keys revoke` of a key a
// running box signs with names the box, and the box goes silent. With
// every active key a running box's, a rotation issues no other key.
func TestKeyRotationReachesRunningBoxes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One port free on both loopback addresses.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{"CHALUPA_SSH_PORT": strconv.Itoa(port)}})
	producer := daemontest.EnvironmentKey(t, p.Admin, agenttest.Env)
	ssh, err := p.Admin.GetSSHKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	boxes := map[string]*rotationBox{}
	restarter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := boxes[strings.TrimPrefix(r.URL.Path, "/restart/")]
		if b == nil {
			http.NotFound(w, r)
			return
		}
		if status := b.restart(t); status != http.StatusAccepted {
			http.Error(w, "the restarted agent's heartbeat: "+strconv.Itoa(status), http.StatusBadGateway)
		}
	}))
	t.Cleanup(restarter.Close)

	clock := clockwork.NewFakeClockAt(time.Now().UTC())
	for i, name := range []string{"rot-a", "rot-b", "rot-c"} {
		droplet := int64(501 + i)
		agentOn := name != "rot-c"
		if _, err := p.Admin.CreateBox(ctx, adminapi.CreateBoxRequest{Name: name, Environment: agenttest.Env, Agent: &agentOn, BoxConfig: adminapi.BoxConfig{
			Region: "nyc3", Size: "s-1vcpu-1gb", Image: "debian-12-x64", SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
			CustomerSource: "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32"}}); err != nil {
			t.Fatal(err)
		}
		box, err := storage.BoxByRef(ctx, p.App.DB.Read, name)
		if err != nil {
			t.Fatal(err)
		}
		ip := "127.0.0." + strconv.Itoa(i+1)
		// The box's key as converge's up delivered it.
		key, err := p.App.Keys.Issue(ctx, agenttest.Env)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if err := p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			if err := storage.RecordBoxResources(ctx, tx, box.ID, storage.BoxResources{DropletID: droplet}, now); err != nil {
				return err
			}
			if err := storage.RecordBoxLaunch(ctx, tx, box.ID, storage.BoxLaunch{DropletID: droplet, IPv4: ip}, now); err != nil {
				return err
			}
			if _, err := storage.ApplyLaunch(ctx, tx, storage.Launch{EnvironmentID: box.EnvironmentID, DeploymentID: "droplet-" + strconv.FormatInt(droplet, 10),
				DropletID: droplet, Region: "nyc3", At: now, LimitMinutes: 30}, 0); err != nil {
				return err
			}
			if err := storage.RecordKeyIssued(ctx, tx, key.KeyID, box.ID, droplet, now); err != nil {
				return err
			}
			_, err := storage.MarkKeyDelivered(ctx, tx, key.KeyID, now)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !agentOn {
			continue
		}
		b := &rotationBox{name: name, droplet: droplet}
		b.sshd = sshdtest.NewAt(t, net.JoinHostPort(ip, strconv.Itoa(port)), sshdtest.NewSigner(t), sshdtest.Authorized(t, ssh.PublicKey))
		b.sshd.Root = t.TempDir()
		bin := t.TempDir()
		if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\n[ \"$1\" = restart ] || exit 2\nexec curl -fsS -o /dev/null -X POST "+restarter.URL+"/restart/"+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		b.sshd.Path = []string{bin}
		if err := os.MkdirAll(filepath.Dir(b.sshd.AgentBinary()), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.sshd.AgentBinary(), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		b.fleet = agenttest.New(t, p.URL, key, int(droplet), clock)
		b.fleet.WriteKeys(b.sshd.AgentDir())
		b.cfg = b.fleet.Config()
		b.cfg.KeyFile = filepath.Join(b.sshd.AgentDir(), "ingest.key")
		boxes[name] = b
		if status := b.restart(t); status != http.StatusAccepted {
			t.Fatalf("%s's agent's first heartbeat: %d", name, status)
		}
	}
	t.Cleanup(func() {
		for _, b := range boxes {
			b.agent.Stop()
		}
	})
	keyStatus := func(id string) string {
		t.Helper()
		k, err := storage.IngestKeyByID(ctx, p.App.DB.Read, id)
		if err != nil {
			t.Fatal(err)
		}
		return k.Status
	}
	signedWith := func(b *rotationBox) string {
		t.Helper()
		var id string
		if err := p.App.DB.Read.QueryRow(`SELECT key_id FROM heartbeats WHERE deployment_id = ? ORDER BY id DESC LIMIT 1`,
			"droplet-"+strconv.FormatInt(b.droplet, 10)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	byBox := func(rs []adminapi.BoxKeyRotation) map[string]adminapi.BoxKeyRotation {
		out := map[string]adminapi.BoxKeyRotation{}
		for _, r := range rs {
			out[r.Box] = r
		}
		return out
	}
	rotated := func(t *testing.T, r adminapi.BoxKeyRotation, b *rotationBox, old string) {
		t.Helper()
		if r.Outcome != adminapi.RotationRotated || r.KeyID == "" || len(r.RevokedKeyIDs) != 1 || r.RevokedKeyIDs[0] != old {
			t.Fatalf("%s: %+v, want rotated with %s revoked", b.name, r, old)
		}
		if got := signedWith(b); got != r.KeyID {
			t.Fatalf("%s's agent signs with %s, want its new key %s", b.name, got, r.KeyID)
		}
		if s := keyStatus(old); s != storage.KeyRevoked {
			t.Fatalf("%s's old key is %s, want revoked", b.name, s)
		}
		if status := b.heartbeat(); status != http.StatusAccepted {
			t.Fatalf("%s's heartbeat after the rotation: %d", b.name, status)
		}
	}

	oldA, oldB := signedWith(boxes["rot-a"]), signedWith(boxes["rot-b"])
	offKeys, err := storage.DropletKeys(ctx, p.App.DB.Read, mustBox(t, p, "rot-c").ID, 503)
	if err != nil || len(offKeys) != 1 {
		t.Fatalf("rot-c's keys %v (%v)", offKeys, err)
	}
	var first adminapi.IssuedKey
	t.Run("rotate", func(t *testing.T) {
		first, err = p.Admin.RotateIngestKey(ctx, agenttest.Env)
		if err != nil {
			t.Fatal(err)
		}
		if first.Boxes == nil {
			t.Fatal("the rotation's answer has no boxes")
		}
		got := byBox(*first.Boxes)
		if len(got) != 3 {
			t.Fatalf("the rotation reports %d boxes, want 3: %+v", len(got), *first.Boxes)
		}
		rotated(t, got["rot-a"], boxes["rot-a"], oldA)
		rotated(t, got["rot-b"], boxes["rot-b"], oldB)
		if c := got["rot-c"]; c.Outcome != adminapi.RotationNoAgent || keyStatus(offKeys[0]) != storage.KeyActive {
			t.Fatalf("rot-c: %+v, key %s; want no-agent with its key active", c, keyStatus(offKeys[0]))
		}
		if len(first.RotatedKeyIDs) != 1 || first.RotatedKeyIDs[0] != producer.KeyID || keyStatus(producer.KeyID) != storage.KeyRotating {
			t.Fatalf("rotated %v, want only the other producers' key %s", first.RotatedKeyIDs, producer.KeyID)
		}
		if first.KeyID == "" || first.KeyMaterial == "" || keyStatus(first.KeyID) != storage.KeyActive {
			t.Fatalf("no fresh key for the other producers: %+v", first)
		}
		var events int
		if err := p.App.DB.Read.QueryRow(`SELECT count(*) FROM lifecycle_events WHERE kind = ?`, ingest.EventKeyRotated).Scan(&events); err != nil || events != 2 {
			t.Fatalf("%d ingest-key-rotated events (%v), want 2", events, err)
		}
	})
	if t.Failed() {
		return
	}
	t.Run("deliver-key", func(t *testing.T) {
		b := boxes["rot-b"]
		old := signedWith(b)
		r, err := p.Admin.DeliverBoxKey(ctx, "rot-b")
		if err != nil {
			t.Fatal(err)
		}
		rotated(t, r, b, old)
		if _, err := p.Admin.DeliverBoxKey(ctx, "rot-c"); err == nil || !strings.Contains(err.Error(), "agent_off") {
			t.Fatalf("deliver-key to a box without the agent: %v, want 409 agent_off", err)
		}
	})
	t.Run("revoke names the boxes it silences", func(t *testing.T) {
		b := boxes["rot-a"]
		key := signedWith(b)
		r, err := p.Admin.RevokeIngestKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.StillSigning) != 1 || r.StillSigning[0].Box != "rot-a" || r.StillSigning[0].Deployment != "droplet-501" {
			t.Fatalf("revoke answered %+v, want rot-a (droplet-501) still signing", r.StillSigning)
		}
		if status := b.heartbeat(); status != http.StatusUnauthorized {
			t.Fatalf("rot-a's heartbeat with its revoked key: %d, want 401", status)
		}
		// rot-a gets a key again the way that silences nobody.
		if r, err := p.Admin.DeliverBoxKey(ctx, "rot-a"); err != nil || r.Outcome != adminapi.RotationRotated {
			t.Fatalf("deliver-key after the revocation: %+v, %v", r, err)
		}
	})
	t.Run("every active key a box's", func(t *testing.T) {
		if _, err := p.Admin.RevokeIngestKey(ctx, first.KeyID); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Admin.RevokeIngestKey(ctx, offKeys[0]); err != nil {
			t.Fatal(err)
		}
		r, err := p.Admin.RotateIngestKey(ctx, agenttest.Env)
		if err != nil {
			t.Fatal(err)
		}
		if r.KeyID != "" || r.KeyMaterial != "" || len(r.RotatedKeyIDs) != 0 {
			t.Fatalf("a rotation of boxes only issued %+v, want no other key", r)
		}
		if r.Boxes == nil || len(*r.Boxes) != 3 {
			t.Fatalf("the rotation's boxes: %v, want 3", r.Boxes)
		}
		for _, b := range byBox(*r.Boxes) {
			if b.Box != "rot-c" && b.Outcome != adminapi.RotationRotated {
				t.Fatalf("%+v, want rotated", b)
			}
		}
	})
}

// mustBox reads a box by name.
func mustBox(t *testing.T, p *daemontest.InProcess, name string) storage.Box {
	t.Helper()
	b, err := storage.BoxByRef(context.Background(), p.App.DB.Read, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
