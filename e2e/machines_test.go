package e2e

// The lifecycle on a booted machine (docs/architecture.md, "Tests"): the
// built binary runs inside the test bed's private namespace
// (digitalocean/dofake/machines), converge drives the real pulumi CLI and
// the test provider against dofake, and the droplet it creates is a booted
// Debian whose cloud-init installs the release, whose systemd starts the
// agent and whose real sshd takes the key delivery.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/digitalocean/dofake/machines"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/storage"
)

// TestMachineLifecycleProof is the bounded lifecycle proof (seed
// "Bounded lifecycle proof"; docs/operations.md, "Converge", "Agent
// install", "SSH key delivery", "Reaper") on booted machines. Box 1:
// `converge up` creates a droplet that boots; cloud-init installs the
// pinned release (the digest picked by `uname -m`), the agent's user
// exists, systemd runs the unit's ExecStart, the ingest key arrives over
// the box's real sshd (0600, the agent's), and the agent's heartbeat
// arrives through the TLS front: deployment droplet-<id> is live with the
// release's version; `down` removes droplet and firewall (the machine
// powers off and is gone) and keeps the volume. Box 2, with a one-minute
// idle limit and nobody on it: the reaper destroys the droplet at its
// deadline with the write token, the machine powers off, and `converge
// destroy` afterwards succeeds and keeps the volume.
func TestMachineLifecycleProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	api, bed, d, fingerprint := machineDaemon(t, "live")
	cl := d.Admin()

	start := time.Now()
	x1, dep1 := machineUp(t, cl, bed, []string{fingerprint}, "proof-1", "box-1", 30)
	t.Logf("box 1: converge up to the first heartbeat: %v", time.Since(start).Round(100*time.Millisecond))
	x2, dep2 := machineUp(t, cl, bed, []string{fingerprint}, "proof-2", "box-2", 1)
	if dep2.IdleDeadlineAt.After(dep2.LastHeartbeatAt.Add(2 * time.Minute)) {
		t.Fatalf("box 2's idle deadline %v: its one-minute limit did not reach the agent", dep2.IdleDeadlineAt)
	}

	// Box 1: down. The DELETE powers the machine off and removes it.
	if j := lifecycleConverge(t, cl, "box-1", "destroy"); j.Status != storage.JobSucceeded {
		t.Fatalf("down: %s: %s", j.Status, j.Error)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := x1.WaitRemoved(wctx); err != nil {
		t.Errorf("box 1's machine after down: %v", err)
	}
	if _, ok := api.Droplet(x1.Droplet.ID); ok || slices.ContainsFunc(api.Firewalls(), func(f dofake.Firewall) bool { return slices.Contains(f.Tags, "chalupa:box:box-1") }) {
		t.Errorf("box 1's droplet (%v) or firewall survived down: %+v", ok, api.Firewalls())
	}
	lifecycleVolumeKept(t, cl, api, "box-1")
	lifecycleStory(t, cl, "proof-1", "launched", "deployment-ended+sunk")
	_ = dep1

	// Box 2: nobody on it; the reaper destroys it at its deadline and the
	// machine powers off.
	reaped := func() []dofake.Request {
		return api.Requests(dofake.WithToken("write"), func(r dofake.Request) bool { return r.Method == http.MethodDelete })
	}
	testwait.Eventually(t, testwait.Bound(time.Until(dep2.IdleDeadlineAt)+2*time.Minute), "the reaper's DELETE", func() (bool, string) {
		return len(reaped()) > 0, fmt.Sprint(api.Requests())
	})
	if del := reaped(); len(del) != 1 || del[0].Path != "/v2/droplets/"+strconv.Itoa(x2.Droplet.ID) || del[0].At.Before(dep2.IdleDeadlineAt) {
		t.Fatalf("the write token's DELETEs %v, want one of droplet %d at or after its deadline %v", del, x2.Droplet.ID, dep2.IdleDeadlineAt)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	if err := x2.WaitRemoved(rctx); err != nil {
		t.Errorf("box 2's machine after the reaper: %v", err)
	}
	lifecycleDeployment(t, cl, "proof-2", dep2.ID, 30*time.Second, func(d adminapi.FleetDeployment) bool { return d.Status == "ended" })
	if j := lifecycleConverge(t, cl, "box-2", "destroy"); j.Status != storage.JobSucceeded {
		t.Fatalf("destroy after the reaper: %s: %s", j.Status, j.Error)
	}
	lifecycleVolumeKept(t, cl, api, "box-2")
	t.Logf("the whole proof: %v", time.Since(start).Round(100*time.Millisecond))
}

// TestMachineSessionActivity: activity from a real session (docs/operations.md,
// "Agent"). On a booted box with a two-minute idle limit, a TCP connection
// to its sshd that never authenticates does not move the idle deadline; an
// authenticated session (root, over the box's real sshd) does, at every
// check while it is open; once it ended, the deadline stops moving.
func TestMachineSessionActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, bed, d, fingerprint := machineDaemon(t, "off")
	cl := d.Admin()
	signer, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	person := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	if err := bed.AddAccountKey(person); err != nil {
		t.Fatal(err)
	}
	const limit = 2 * time.Minute
	x, dep := machineUp(t, cl, bed, []string{fingerprint, ssh.FingerprintLegacyMD5(signer.PublicKey())}, "activity", "box-a", int(limit/time.Minute))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// checkedAfter waits for a heartbeat sent a whole heartbeat interval
	// after at (so the agent has looked at least once since) and returns
	// the deployment it left.
	checkedAfter := func(at time.Time) adminapi.FleetDeployment {
		t.Helper()
		return lifecycleDeployment(t, cl, "activity", dep.ID, 2*time.Minute, func(d adminapi.FleetDeployment) bool {
			return d.LastHeartbeatAt.After(at.Add(31 * time.Second))
		})
	}

	// A TCP connection that never authenticates: sshd's banner, then silence.
	raw, err := bed.Dial(wctx, net.JoinHostPort(x.Addr.String(), "22"))
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	if d := checkedAfter(opened); !d.IdleDeadlineAt.Before(opened.Add(limit)) {
		t.Errorf("an unauthenticated connection moved the idle deadline to %v (opened %v, limit %v)", d.IdleDeadlineAt, opened, limit)
	}
	raw.Close()

	// An authenticated session, open across checks.
	sc, err := x.SSH(wctx, "root", signer)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sc.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("sleep 600"); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if d := checkedAfter(started); d.IdleDeadlineAt.Before(started.Add(limit)) {
		t.Errorf("an open session left the idle deadline at %v (opened %v, limit %v)", d.IdleDeadlineAt, started, limit)
	}
	sc.Close() // the session ends with its connection

	// Ended: the deadline stops moving.
	ended := time.Now()
	d1 := checkedAfter(ended)
	d2 := checkedAfter(d1.LastHeartbeatAt)
	// The same deadline at both beats, give or take the milliseconds of the
	// server's reckoning from elapsed time (docs/operations.md, "Heartbeats and
	// deadlines"):
	// one still moving with a session would be a heartbeat interval later.
	if d := d2.IdleDeadlineAt.Sub(d1.IdleDeadlineAt); d.Abs() > time.Second || d1.IdleDeadlineAt.After(ended.Add(limit+5*time.Second)) {
		t.Errorf("after the session ended at %v: deadlines %v then %v; want one, no later than the end plus the limit", ended, d1.IdleDeadlineAt, d2.IdleDeadlineAt)
	}
}

// TestMachineJournalShipped: private logs from the journal of a booted box
// (docs/operations.md, "Logs", "Agent"): with CHALUPA_AGENT_LOG_UNITS
// naming cloud-final.service (on the default allowlist) in the installed
// agent.env, the agent, as its unit runs it, reads that unit's journal
// through the box's journalctl and ships it; the chunks are committed in
// the S3 store (versitygw, behind the bed's TLS as a bucket endpoint would
// be) and `admin logs get` reads back the install script's last line,
// which cloud-init's final stage logged.
func TestMachineJournalShipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gw := proctest.StartVersityGW(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	_, bed, d, fingerprint := machineDaemon(t, "off", func(bed *machines.Bed) map[string]string {
		gwURL, err := url.Parse(gw.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		// The bucket endpoint as boxes and the daemon reach it: TLS of the
		// test CA in front of versitygw, the Host header kept (it is signed).
		endpoint := bed.ServeTLS(9443, &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(gwURL)
			r.Out.Host = r.In.Host
		}})
		if err := os.WriteFile(ca, bed.CAPEM(), 0o644); err != nil {
			t.Fatal(err)
		}
		env := e2eLogsEnv(gw, endpoint)
		env["SSL_CERT_FILE"] = ca // the daemon trusts the bucket's endpoint
		return env
	})
	cl := d.Admin()
	x, dep := machineUp(t, cl, bed, []string{fingerprint}, "journal", "box-j", 30)
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if _, err := x.Exec(wctx, "sh", "-c", "echo CHALUPA_AGENT_LOG_UNITS=cloud-final.service >> /etc/chalupa-agent/agent.env && systemctl restart chalupa-agent"); err != nil {
		t.Fatal(err)
	}
	line := "install-agent: chalupa-agent " + lifecycleVersion + " linux/" + runtime.GOARCH + " installed"
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := x.Exec(context.Background(), "journalctl", "--no-pager", "-n", "60", "-u", "chalupa-agent")
			t.Logf("the box's journal of chalupa-agent:\n%s", out)
		}
	})
	testwait.Eventually(t, testwait.Bound(3*time.Minute), "a committed chunk of cloud-final.service", func() (bool, string) {
		l, err := cl.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: "journal", DeploymentID: dep.ID})
		for _, s := range l.Sessions {
			for _, c := range s.Chunks {
				if s.Service == "cloud-final.service" && c.State == "committed" {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%+v %v", l.Sessions, err)
	})
	// `admin logs get` fetches through a grant on the bucket's endpoint,
	// which only the bed reaches: the CLI runs there, trusting the test CA.
	file := filepath.Join(t.TempDir(), "logs.gz")
	out, code := proctest.RunCommand(t, bed.Wrap(proctest.BuildBinary(t)), "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(),
		"CHALUPA_URL": d.URL, "SSL_CERT_FILE": ca}, "admin", "logs", "get", "journal", dep.ID, "--service", "cloud-final.service", "--out", file)
	if code != 0 {
		t.Fatalf("admin logs get: exit %d\n%s", code, out)
	}
	gz, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !strings.Contains(string(got), line) {
		t.Errorf("read back %q (%v); want the line %q", got, err, line)
	}
}

// machineDaemon starts the built binary inside a new test bed (reaper in
// mode reaper), with converge against the bed's dofake through the real
// pulumi CLI and a release built by contrib/release.sh served to the boxes
// over the test CA's TLS, plus the environment each extra returns; the
// daemon's SSH identity is an account key. It returns the API server, the
// bed, the daemon and that key's MD5 fingerprint for
// BoxConfig.SSHKeyFingerprints.
func machineDaemon(t *testing.T, reaper string, extra ...func(*machines.Bed) map[string]string) (*dofake.Server, *machines.Bed, *proctest.Daemon, string) {
	t.Helper()
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
		"DIGITALOCEAN_WRITE_TOKEN": api.AddToken("write", dofake.FullAccess...), "CHALUPA_REAPER": reaper,
		"CHALUPA_DO_API_URL": api.URL, "CHALUPA_PULUMI_CLI": cli, "PULUMI_HOME": home,
		"CHALUPA_LISTEN": bed.Publish(), "CHALUPA_ORIGIN": bed.ControlURL()}
	for k, v := range (lifecycleRelease{url: bed.ServeTLS(8443, http.FileServer(http.Dir(dir))), sha256: sums}).daemonEnv() {
		env[k] = v
	}
	for _, f := range extra {
		maps.Copy(env, f(bed))
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
	return api, bed, d, ssh.FingerprintLegacyMD5(pk)
}

// TestMachineAgentSurvives: what a droplet goes through, on a booted box
// (docs/operations.md, "Agent"). The unit's hardening as systemd scores it
// on the booted machine (`systemd-analyze security`) is at most 2.5; the
// agent killed with SIGKILL is restarted by systemd and heartbeats again;
// after a reboot it comes back by itself and heartbeats again.
func TestMachineAgentSurvives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, bed, d, fingerprint := machineDaemon(t, "off")
	cl := d.Admin()
	x, dep := machineUp(t, cl, bed, []string{fingerprint}, "survive", "box-s", 30)
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()

	out, err := x.Exec(wctx, "systemd-analyze", "security", "--no-pager", "chalupa-agent.service")
	if err != nil {
		t.Fatalf("systemd-analyze security: %v", err)
	}
	var score float64
	if i := strings.Index(out, "Overall exposure level for chalupa-agent.service: "); i < 0 {
		t.Errorf("systemd-analyze security gave no overall exposure:\n%s", out)
	} else if _, err := fmt.Sscanf(out[i+len("Overall exposure level for chalupa-agent.service: "):], "%g", &score); err != nil || score > 2.5 {
		t.Errorf("the agent unit's exposure on a booted systemd: %v (%v); want at most 2.5:\n%s", score, err, out)
	}
	t.Logf("systemd-analyze security chalupa-agent.service on the box: %.1f", score)

	heartbeatAfter := func(what string, after time.Time) {
		t.Helper()
		lifecycleDeployment(t, cl, "survive", dep.ID, 2*time.Minute, func(d adminapi.FleetDeployment) bool {
			return d.Status == "active" && d.LastHeartbeatAt.After(after)
		})
		if got, err := x.Exec(wctx, "systemctl", "is-active", "chalupa-agent"); err != nil || strings.TrimSpace(got) != "active" {
			t.Errorf("after %s: the unit is %q, %v", what, got, err)
		}
	}
	mainPID := func() string {
		t.Helper()
		got, err := x.Exec(wctx, "systemctl", "show", "-p", "MainPID", "--value", "chalupa-agent")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(got)
	}

	// SIGKILL: systemd restarts it (Restart=always).
	before, killed := mainPID(), time.Now()
	if _, err := x.Exec(wctx, "systemctl", "kill", "-s", "KILL", "chalupa-agent"); err != nil {
		t.Fatal(err)
	}
	heartbeatAfter("SIGKILL", killed)
	if after := mainPID(); after == before || after == "0" {
		t.Errorf("MainPID %s before SIGKILL, %s after: not restarted", before, after)
	}

	// A reboot: the machine boots again and the agent comes back by itself.
	rebooted := time.Now()
	if _, err := x.Exec(wctx, "systemctl", "reboot"); err != nil {
		t.Fatal(err)
	}
	if err := x.WaitBoots(wctx, 2); err != nil {
		t.Fatal(err)
	}
	if out, err := x.WaitCloudInit(wctx); err != nil {
		t.Fatalf("cloud-init after the reboot: %v\n%s", err, out)
	}
	heartbeatAfter("the reboot", rebooted)
}

// machineUp creates environment env and box name (idle limit in minutes),
// runs `converge up`, and requires from the booted machine's own evidence
// what the install promises (docs/operations.md, "Agent install"): cloud-init
// done, the unit active with systemd's ExecStart the installed binary, the
// agent's user, its directory 0700 and key and settings 0600 its own (the
// key arrived over the box's sshd), the release's version; then the
// agent's heartbeat: it returns the box and the live deployment.
func machineUp(t *testing.T, cl *adminapi.Client, bed *machines.Bed, fingerprints []string, env, name string, limitMinutes int) (*machines.Box, adminapi.FleetDeployment) {
	t.Helper()
	if _, err := cl.CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: env}); err != nil {
		t.Fatal(err)
	}
	return machineBoxUp(t, cl, bed, fingerprints, env, name, limitMinutes)
}

// machineBoxUp is machineUp for a box of an environment that exists, so
// several boxes share one environment.
func machineBoxUp(t *testing.T, cl *adminapi.Client, bed *machines.Bed, fingerprints []string, env, name string, limitMinutes int) (*machines.Box, adminapi.FleetDeployment) {
	t.Helper()
	ctx := context.Background()
	cfg := adminapi.BoxConfig{Region: "nyc3", Size: "s-1vcpu-1gb", Image: "debian-12-x64",
		SSHKeyFingerprints: fingerprints,
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: 1, AgentIdleMinutes: int64(limitMinutes)}
	if _, err := cl.CreateBox(ctx, adminapi.CreateBoxRequest{Name: name, Environment: env, BoxConfig: cfg}); err != nil {
		t.Fatal(err)
	}
	if j := lifecycleConverge(t, cl, name, "up"); j.Status != storage.JobSucceeded {
		t.Fatalf("up %s: %s: %s", name, j.Status, j.Error)
	}
	b, err := cl.GetBox(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	x := bed.Box(int(b.Resources.DropletID))
	if x == nil {
		t.Fatalf("box %s: no machine for droplet %d", name, b.Resources.DropletID)
	}
	t.Cleanup(func() {
		if t.Failed() {
			con := x.Console()
			if len(con) > 8000 {
				con = con[len(con)-8000:]
			}
			t.Logf("console of %s (%s), tail:\n%s", x.Name, name, con)
		}
	})
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if out, err := x.WaitCloudInit(wctx); err != nil {
		t.Fatalf("box %s: cloud-init: %v\n%s", name, err, out)
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
			t.Errorf("box %s: %s: %q, %v; want %q", name, strings.Join(c.args, " "), got, err, c.want)
		}
	}
	if got, err := x.Exec(wctx, "systemctl", "show", "-p", "ExecStart", "chalupa-agent"); err != nil || !strings.Contains(got, "path=/usr/local/bin/chalupa-agent") {
		t.Errorf("box %s: the ExecStart systemd ran: %q, %v", name, got, err)
	}
	live := func(d adminapi.FleetDeployment) bool {
		return d.Status == "active" && !d.LastHeartbeatAt.IsZero() && d.AgentVersion == "chalupa-agent/"+lifecycleVersion
	}
	dep := lifecycleDeployment(t, cl, env, "droplet-"+strconv.Itoa(x.Droplet.ID), 2*time.Minute, live)
	if reads := x.MetadataReads(); !slices.Contains(reads, "id") {
		t.Errorf("box %s: the agent read no droplet id from the metadata service: %v", name, reads)
	}
	return x, dep
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
