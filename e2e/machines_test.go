package e2e

// The lifecycle on a booted machine (docs/architecture.md, "Tests"): the
// built binary runs inside the test bed's private namespace
// (digitalocean/dofake/machines), converge drives the real pulumi CLI and
// the test provider against dofake, and the droplet it creates is a booted
// Debian whose cloud-init installs the release, whose systemd starts the
// agent and whose real sshd takes the key delivery.

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/digitalocean/dofake/machines"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/storage"
)

// TestMachineLifecycleUp: `converge up` of one box creates a droplet that
// boots; cloud-init installs the pinned release (the digest picked by
// `uname -m`), the agent's user exists, systemd runs the unit's ExecStart,
// the ingest key arrives over the box's real sshd (0600, the agent's),
// and the agent's heartbeat arrives through the TLS front: deployment
// droplet-<id> is live with the release's version.
func TestMachineLifecycleUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := proctest.BuildBinary(t)
	cli := proctest.ToolPath(t, "pulumi")
	home := proctest.PulumiHome(t, cli, pulumiexec.ProviderVersion)
	api, bed := machines.NewServer(t, machines.Config{})
	apiURL, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	bed.Expose(apiURL.Host) // the daemon and pulumi reach dofake from inside the bed

	dir, sums := machineRelease(t)
	env := map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": api.AddToken("provision", dofake.FullAccess...),
		"DIGITALOCEAN_WRITE_TOKEN": api.AddToken("write", dofake.FullAccess...), "CHALUPA_REAPER": "off",
		"CHALUPA_DO_API_URL": api.URL, "CHALUPA_PULUMI_CLI": cli, "PULUMI_HOME": home,
		"CHALUPA_LISTEN": bed.Publish(), "CHALUPA_ORIGIN": bed.ControlURL()}
	for k, v := range (lifecycleRelease{url: bed.ServeTLS(8443, http.FileServer(http.Dir(dir))), sha256: sums}).daemonEnv() {
		env[k] = v
	}
	bed.SetUpstream(env["CHALUPA_LISTEN"])
	d := proctest.StartDaemon(t, bed.Wrap(bin), env)
	cl := d.Admin()
	k, err := cl.GetSSHKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.AddAccountKey(k.PublicKey); err != nil {
		t.Fatal(err)
	}
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.PublicKey))
	if err != nil {
		t.Fatal(err)
	}

	cfg := adminapi.BoxConfig{Region: "nyc3", Size: "s-1vcpu-1gb", Image: "debian-12-x64",
		SSHKeyFingerprints: []string{ssh.FingerprintLegacyMD5(pk)},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: 1, AgentIdleMinutes: 30}
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "machine"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateBox(ctx, adminapi.CreateBoxRequest{Name: "m-1", Environment: "machine", BoxConfig: cfg}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if j := lifecycleConverge(t, cl, "m-1", "up"); j.Status != storage.JobSucceeded {
		t.Fatalf("up: %s: %s", j.Status, j.Error)
	}
	t.Logf("converge up: %v", time.Since(start).Round(100*time.Millisecond))
	b, err := cl.GetBox(ctx, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	x := bed.Box(int(b.Resources.DropletID))
	if x == nil {
		t.Fatalf("no machine for droplet %d", b.Resources.DropletID)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console of %s:\n%s", x.Name, x.Console())
		}
	})
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if out, err := x.WaitCloudInit(wctx); err != nil {
		t.Fatalf("cloud-init: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"systemctl", "is-active", "chalupa-agent"}, "active"},
		{[]string{"id", "-un", "chalupa-agent"}, "chalupa-agent"},
		{[]string{"stat", "-c", "%a %U", "/etc/chalupa-agent", "/etc/chalupa-agent/ingest.key", "/etc/chalupa-agent/agent.env"}, "700 chalupa-agent\n600 chalupa-agent\n600 chalupa-agent"},
		{[]string{"/usr/local/bin/chalupa-agent", "version"}, lifecycleVersion},
	} {
		got, err := x.Exec(wctx, c.args...)
		if err != nil || !strings.Contains(strings.TrimSpace(got), c.want) {
			t.Errorf("%s: %q, %v; want %q", strings.Join(c.args, " "), got, err, c.want)
		}
	}
	if got, err := x.Exec(wctx, "systemctl", "show", "-p", "ExecStart", "chalupa-agent"); err != nil || !strings.Contains(got, "path=/usr/local/bin/chalupa-agent") {
		t.Errorf("the ExecStart systemd ran: %q, %v", got, err)
	}
	live := func(d adminapi.FleetDeployment) bool {
		return d.Status == "active" && !d.LastHeartbeatAt.IsZero() && d.AgentVersion == "chalupa-agent/"+lifecycleVersion
	}
	lifecycleDeployment(t, cl, "machine", "droplet-"+strconv.Itoa(x.Droplet.ID), 2*time.Minute, live)
	t.Logf("converge up to the first heartbeat: %v", time.Since(start).Round(100*time.Millisecond))
	if reads := x.MetadataReads(); !strings.Contains(strings.Join(reads, " "), "id") {
		t.Errorf("the agent read no droplet id from the metadata service: %v", reads)
	}
}

// machineRelease builds a release of the host's architecture with
// contrib/release.sh and returns its directory and digests by archive.
func machineRelease(t *testing.T) (string, map[string]string) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("sh", filepath.Join(proctest.RepoRoot(t), "contrib/release.sh"), lifecycleVersion, out)
	cmd.Env = append(os.Environ(), "CHALUPA_RELEASE_ALLOW_DIRTY=1", "CHALUPA_RELEASE_ARCHES="+runtime.GOARCH)
	b, err := cmd.CombinedOutput()
	sums, _ := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if err != nil || len(sums) == 0 {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	digests := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		digests[name] = sum
	}
	return out, digests
}
