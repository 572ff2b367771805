package e2e

// Agent rollouts with the real agent (docs/operations.md, "Agent install",
// under Upgrade): rollouttest's scenario on three fake droplets whose
// unit runs the built chalupa-agent, stamped v1.0.0, with real signed
// heartbeats; the good release is the built agent stamped v1.3.0, the two
// bad ones the scenario's scripts. What the in-process bed relays, here
// the agent sends: the version a heartbeat carries is the one its binary
// was built with, and the restored binary reports on its own.

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout/rollouttest"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// buildAgent builds cmd/chalupa-agent stamped with version into dir.
func buildAgent(t *testing.T, dir, version string) string {
	t.Helper()
	out := filepath.Join(dir, "chalupa-agent-"+version)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X "+proctest.ModulePath+"/internal/buildinfo.Version="+version, "-o", out, "./cmd/chalupa-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the agent %s: %v\n%s", version, err, b)
	}
	return out
}

// realAgentBed is rollouttest's Bed with the real agent on each fake
// droplet, reaching the in-process daemon through a proxy whose address
// stays when the daemon is reopened with another release.
type realAgentBed struct {
	p        *daemontest.InProcess
	releases string
	good     map[string]string // version -> built agent
	boxes    []string
	drops    map[string]*rollouttest.Droplet
}

func (b *realAgentBed) Admin() *adminapi.Client { return b.p.Admin }
func (b *realAgentBed) Env() string             { return "fleet" }
func (b *realAgentBed) Boxes() []string         { return b.boxes }
func (b *realAgentBed) Installed(t *testing.T, box string) string {
	return b.drops[box].Installed(t)
}

func (b *realAgentBed) UseRelease(t *testing.T, version string, kind rollouttest.Kind) {
	t.Helper()
	rel := rollouttest.WriteRelease(t, b.releases, version, kind)
	if bin, ok := b.good[version]; ok && kind == rollouttest.Good {
		rel = rollouttest.WriteBinaryRelease(t, b.releases, version, bin)
	}
	env := b.p.Env
	env["CHALUPA_AGENT_VERSION"], env["CHALUPA_AGENT_RELEASE_URL"] = rel.Version, rel.URL
	env["CHALUPA_AGENT_SHA256_AMD64"], env["CHALUPA_AGENT_SHA256_ARM64"] = rel.SHA256["amd64"], rel.SHA256["arm64"]
	b.p.Restart(daemontest.AppOptions{})
}

// TestAgentRolloutRealAgents: the two bad releases each stop at the first
// box, which is restored and whose real v1.0.0 agent reports again; a
// release of the real agent stamped v1.3.0 is rolled out to every box and
// counts as done by the heartbeats it sends; the same release again is a
// no-op (rollouttest.BadReleases, rollouttest.GoodThenNoop).
func TestAgentRolloutRealAgents(t *testing.T) {
	proctest.FullRunOnly(t, "builds the agent twice")
	t.Parallel()
	bins := t.TempDir()
	old, good := buildAgent(t, bins, rollouttest.OldVersion), buildAgent(t, bins, "v1.3.0")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	env := daemontest.UnlimitedQuotas()
	env["CHALUPA_SSH_PORT"] = strconv.Itoa(port)
	env["CHALUPA_AGENT_UPGRADE_REPORT_SECONDS"] = "10"
	b := &realAgentBed{releases: t.TempDir(), good: map[string]string{"v1.3.0": good}, drops: map[string]*rollouttest.Droplet{}}
	b.p = daemontest.NewInProcess(t, daemontest.AppOptions{Env: env})
	// The agents' origin: a proxy to whichever daemon is open.
	var target atomic.Value
	target.Store(b.p.URL)
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		u, _ := url.Parse(target.Load().(string))
		r.SetURL(u)
		r.Out.Host = r.In.Host
	}})
	t.Cleanup(proxy.Close)
	ctx := context.Background()
	line, err := sshdeliver.EnsureIdentity(ctx, b.p.App.DB, b.p.App.Sealer, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	key := daemontest.EnvironmentKey(t, b.p.Admin, "fleet")
	for i := range 3 {
		name := fmt.Sprintf("ra-%d", i+1)
		if _, err := b.p.Admin.CreateBox(ctx, adminapi.CreateBoxRequest{Name: name, Environment: "fleet", BoxConfig: adminapi.BoxConfig{
			Region: "nyc3", Size: "s-1vcpu-1gb", Image: "debian-12-x64", SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
			CustomerSource: "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32"}}); err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("127.0.0.%d", i+1)
		d := rollouttest.NewDroplet(t, net.JoinHostPort(ip, strconv.Itoa(port)), int64(9101+i), pub, b.releases)
		keyFile := filepath.Join(d.State(), "ingest.key")
		if err := os.WriteFile(keyFile, []byte(key.KeyMaterial+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.Install(t, old, map[string]string{"CHALUPA_AGENT_URL": proxy.URL, "CHALUPA_AGENT_ENV": "fleet", "CHALUPA_AGENT_KEY_FILE": keyFile,
			"CHALUPA_AGENT_KEY_ID": key.KeyID, "CHALUPA_AGENT_DROPLET_ID": strconv.FormatInt(d.ID, 10), "CHALUPA_AGENT_REGION": "nyc3",
			"CHALUPA_AGENT_SIZE": "s-1vcpu-1gb", "CHALUPA_AGENT_STATE_DIR": filepath.Join(d.State(), "spool"), "CHALUPA_AGENT_NVIDIA_SMI": "none",
			"CHALUPA_AGENT_METADATA_URL": "http://127.0.0.1:1/metadata/v1"})
		now := time.Now().UnixMilli()
		if err := b.p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE cloud_resource SET droplet_id = ?, launch_droplet_id = ?, launch_ipv4 = ?, launched_at = ?, resources_at = ?
				WHERE name = ?`, d.ID, d.ID, ip, now, now, name)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		b.boxes, b.drops[name] = append(b.boxes, name), d
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range b.boxes {
				t.Logf("%s's agent log:\n%s", n, b.drops[n].Log())
			}
		}
	})
	waitHeartbeats(t, b.p.Admin, 3)
	bed := &reopeningBed{realAgentBed: b, target: &target}
	rollouttest.BadReleases(t, bed)
	rollouttest.GoodThenNoop(t, bed)
}

// reopeningBed points the agents' proxy at the daemon each UseRelease
// reopens.
type reopeningBed struct {
	*realAgentBed
	target *atomic.Value
}

func (b *reopeningBed) UseRelease(t *testing.T, version string, kind rollouttest.Kind) {
	t.Helper()
	b.realAgentBed.UseRelease(t, version, kind)
	b.target.Store(b.p.URL)
}

// waitHeartbeats waits up to a minute for n active deployments that have
// heartbeated.
func waitHeartbeats(t *testing.T, cl *adminapi.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		f, err := cl.ListFleet(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, e := range f.Environments {
			for _, d := range e.Deployments {
				if d.Status == "active" && !d.LastHeartbeatAt.IsZero() {
					got++
				}
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d agents heartbeated within a minute", got, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
