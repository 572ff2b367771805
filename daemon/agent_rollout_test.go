package daemon_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout/rollouttest"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// fakeBed is rollouttest's Bed on the in-process daemon: three boxes whose
// droplets are fake droplets (sshdtest) at 127.0.0.1–3 on one SSH port,
// their agents' beats relayed as signed heartbeats, and the release
// changed by reopening the daemon with its CHALUPA_AGENT_* variables.
type fakeBed struct {
	p        *daemontest.InProcess
	releases string
	boxes    []string
	drops    map[string]*rollouttest.Droplet
	url      atomic.Value // string: the daemon's current base URL
}

func (b *fakeBed) Admin() *adminapi.Client { return b.p.Admin }
func (b *fakeBed) Env() string             { return "fleet" }
func (b *fakeBed) Boxes() []string         { return b.boxes }

func (b *fakeBed) UseRelease(t *testing.T, version string, kind rollouttest.Kind) {
	t.Helper()
	rel := rollouttest.WriteRelease(t, b.releases, version, kind)
	// Restart reopens with the daemon's own variables: set them there.
	env := b.p.Env
	env["CHALUPA_AGENT_VERSION"], env["CHALUPA_AGENT_RELEASE_URL"] = rel.Version, rel.URL
	env["CHALUPA_AGENT_SHA256_AMD64"], env["CHALUPA_AGENT_SHA256_ARM64"] = rel.SHA256["amd64"], rel.SHA256["arm64"]
	b.p.Restart(daemontest.AppOptions{})
	b.url.Store(b.p.URL)
}

func (b *fakeBed) Installed(t *testing.T, box string) string { return b.drops[box].Installed(t) }

// newFakeBed opens the daemon (report bound 5 s, unlimited quotas) and
// three boxes of environment fleet, each with a launched droplet running
// agent rollouttest.OldVersion, and waits for each one's first heartbeat.
func newFakeBed(t *testing.T) *fakeBed {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	env := daemontest.UnlimitedQuotas()
	env["CHALUPA_SSH_PORT"] = strconv.Itoa(port)
	env["CHALUPA_AGENT_UPGRADE_REPORT_SECONDS"] = "5"
	b := &fakeBed{releases: t.TempDir(), drops: map[string]*rollouttest.Droplet{}}
	b.p = daemontest.NewInProcess(t, daemontest.AppOptions{Env: env})
	b.url.Store(b.p.URL)
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
	var drops []*rollouttest.Droplet
	for i := range 3 {
		name := fmt.Sprintf("ro-%d", i+1)
		if _, err := b.p.Admin.CreateBox(ctx, validBox(name, "fleet")); err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("127.0.0.%d", i+1)
		d := rollouttest.NewDroplet(t, net.JoinHostPort(ip, strconv.Itoa(port)), int64(9001+i), pub, b.releases)
		now := time.Now().UnixMilli()
		if err := b.p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE cloud_resource SET droplet_id = ?, launch_droplet_id = ?, launch_ipv4 = ?, launched_at = ?, resources_at = ?
				WHERE name = ?`, d.ID, d.ID, ip, now, now, name)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		b.boxes, b.drops[name] = append(b.boxes, name), d
		drops = append(drops, d)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rollouttest.Relay(rctx, func() string { return b.url.Load().(string) }, key, "fleet", drops)
	}()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := b.p.Admin.ListFleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range f.Environments {
			for _, d := range e.Deployments {
				if d.Status == "active" && !d.LastHeartbeatAt.IsZero() {
					n++
				}
			}
		}
		if n == 3 {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 boxes heartbeated within 30 s", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAgentRolloutBadReleases: the two bad releases of docs/operations.md,
// "Agent install", under Upgrade (one whose run exits 1, one that never
// heartbeats) rolled out to three boxes each stop at the first box, which
// is restored and reports on the old version; the other two are not
// tried; nothing stays upgrading or held (rollouttest.BadReleases).
func TestAgentRolloutBadReleases(t *testing.T) {
	t.Parallel()
	rollouttest.BadReleases(t, newFakeBed(t))
}

// TestAgentRolloutGoodRelease: a good release is rolled out to every box,
// the first alone; the same release again is a no-op that says so
// (rollouttest.GoodThenNoop).
func TestAgentRolloutGoodRelease(t *testing.T) {
	t.Parallel()
	rollouttest.GoodThenNoop(t, newFakeBed(t))
}

// TestBoxAgentUpgradeState: a box's agent upgrade state is in the API
// (agentUpgrade: state, version, since) and on the console's box page,
// for upgrading and upgrade-failed, and absent otherwise
// (docs/operations.md, "Agent install", under Upgrade).
func TestBoxAgentUpgradeState(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	setPassword(t, p)
	ctx := context.Background()
	newEnv(t, p.Admin, "demo")
	box, err := p.Admin.CreateBox(ctx, validBox("box-web", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := p.Admin.GetBox(ctx, "box-web"); err != nil || b.AgentUpgrade != nil {
		t.Fatalf("a box never upgraded: %+v %v", b.AgentUpgrade, err)
	}
	c := newConsoleClient(t, p)
	if r := c.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", r.StatusCode)
	}
	since := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	for state, page := range map[string]string{
		storage.AgentUpgrading:     "Agent upgrading: upgrading to v1.1.0 since",
		storage.AgentUpgradeFailed: "Agent upgrade-failed: the upgrade to v1.1.0",
	} {
		if err := p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
			return storage.SetBoxAgentUpgrade(ctx, tx, box.ID, state, "v1.1.0", since)
		}); err != nil {
			t.Fatal(err)
		}
		b, err := p.Admin.GetBox(ctx, "box-web")
		if err != nil || b.AgentUpgrade == nil || b.AgentUpgrade.State != state || b.AgentUpgrade.Version != "v1.1.0" || !b.AgentUpgrade.Since.Equal(since) {
			t.Fatalf("%s: agentUpgrade %+v %v", state, b.AgentUpgrade, err)
		}
		if _, body := c.get(t, "/app/boxes/box-web"); !strings.Contains(body, page) {
			t.Fatalf("%s: the box page does not say %q:\n%s", state, page, body)
		}
	}
}
