package e2e

// The bounded lifecycle proof (docs/operations.md, "Converge", "Agent
// install", "SSH key delivery", "Agent", "Reaper"): the built binary, the
// real pulumi CLI, the DigitalOcean API test server whose droplets "boot"
// their user data into a sandbox root, a release built by
// contrib/release.sh served over loopback https, and the test SSH server
// standing in for the droplets' sshd.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
	"github.com/chalupa-run/chalupa/storage"
)

const (
	// lifecycleVersion is the version the test release is built as.
	lifecycleVersion = "v0.0.0-lifecycle"
)

// TestLifecycleProof: box 1 goes up; its droplet boots the agent install
// (the archive verified against the release's digest), the ingest key
// arrives over SSH, the installed agent (the release's binary, run with the
// installed agent.env) heartbeats and sends windows, deployment
// droplet-<id> is live; `down` removes droplet and firewall and keeps the
// volume. Box 2 goes up with a one-minute idle limit; its agent runs, then
// stops; the reaper destroys the droplet at its deadline with the write
// token; `converge destroy` afterwards succeeds and keeps the volume. Each
// box's events tell that story in order. The two stories overlap in time:
// box 2 goes up while box 1's agent fills its first whole minute (an agent
// sends only complete windows) and box 2's idle minute runs while box 1
// goes down, so the proof waits on the real clock for about one window
// and one idle limit at once, not one after the other.
func TestLifecycleProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin, rel := proctest.BuildBinary(t), lifecycleBuildRelease(t)
	boot := &lifecycleBoot{rel: rel, repo: proctest.RepoRoot(t), dir: t.TempDir(), roots: map[int]string{}}
	boot.link = filepath.Join(boot.dir, "current")
	api := dofake.New(t, dofake.WithPublicIPv4("127.0.0.1"), dofake.WithOnCreate(boot.boot))
	sshd := sshdtest.New(t, sshdtest.NewSigner(t), nil)
	sshd.Root = boot.link
	cli := proctest.ToolPath(t, "pulumi")
	env := map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": api.AddToken("provision", dofake.FullAccess...),
		"DIGITALOCEAN_WRITE_TOKEN": api.AddToken("write", dofake.FullAccess...), "CHALUPA_REAPER": "live",
		"CHALUPA_DO_API_URL": api.URL, "CHALUPA_PULUMI_CLI": cli, "CHALUPA_SSH_PORT": strconv.Itoa(sshd.Port()),
		"PULUMI_HOME": proctest.PulumiHome(t, cli, pulumiexec.ProviderVersion)}
	maps.Copy(env, rel.daemonEnv())
	d := proctest.StartDaemon(t, bin, env)
	cl := d.Admin()
	k, err := cl.GetSSHKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sshd.Authorize(sshdtest.Authorized(t, k.PublicKey))
	live := func(d adminapi.FleetDeployment) bool {
		return d.Status == "active" && !d.LastHeartbeatAt.IsZero() && d.AgentVersion == "chalupa-agent/"+lifecycleVersion
	}

	// Box 1: up, its agent live.
	drop1, root1 := lifecycleUp(t, cl, api, boot, "proof-1", "box-1", 30)
	a1 := lifecycleStartAgent(t, root1, drop1, d.URL, "proof-1", 30)
	dep1 := lifecycleDeployment(t, cl, "proof-1", "droplet-"+strconv.Itoa(drop1.ID), time.Minute, live)

	// Box 2: up (box 1's key is delivered: the SSH server now writes into
	// box 2's root), its agent live, then its activity stops.
	drop2, root2 := lifecycleUp(t, cl, api, boot, "proof-2", "box-2", 1)
	a2 := lifecycleStartAgent(t, root2, drop2, d.URL, "proof-2", 1)
	dep2 := lifecycleDeployment(t, cl, "proof-2", "droplet-"+strconv.Itoa(drop2.ID), time.Minute, live)
	if dep2.IdleDeadlineAt.After(dep2.LastHeartbeatAt.Add(2 * time.Minute)) {
		t.Fatalf("box 2's idle deadline %v: its one-minute limit did not reach the agent", dep2.IdleDeadlineAt)
	}
	_ = a2.cmd.Process.Signal(syscall.SIGTERM) // its final window and shutdown event, then silence
	if err := <-a2.exited; err != nil {
		t.Fatalf("box 2's agent on SIGTERM: %v", err)
	}

	// Box 1: its agent sends windows; down.
	testwait.Eventually(t, testwait.Long, "a telemetry window from box 1's agent", func() (bool, string) {
		p, err := cl.GetDeploymentPerformance(ctx, adminapi.DeploymentPerformanceRequest{EnvironmentSlug: "proof-1", DeploymentID: dep1.ID})
		return err == nil && len(p.Sessions) > 0 && p.Sessions[0].Windows > 0, fmt.Sprintf("%+v %v", p.Sessions, err)
	})
	if j := lifecycleConverge(t, cl, "box-1", "destroy"); j.Status != storage.JobSucceeded {
		t.Fatalf("down: %s: %s", j.Status, j.Error)
	}
	_ = a1.cmd.Process.Kill() // its droplet is gone
	if _, ok := api.Droplet(drop1.ID); ok || slices.ContainsFunc(api.Firewalls(), func(f dofake.Firewall) bool { return slices.Contains(f.Tags, "chalupa:box:box-1") }) {
		t.Errorf("box 1's droplet (%v) or firewall survived down: %+v", ok, api.Firewalls())
	}
	lifecycleVolumeKept(t, cl, api, "box-1")
	lifecycleStory(t, cl, "proof-1", "launched", "deployment-ended+sunk")

	// Box 2: the reaper destroys the droplet at its deadline; destroy
	// afterwards.
	reaped := func() []dofake.Request {
		return api.Requests(dofake.WithToken("write"), func(r dofake.Request) bool { return r.Method == http.MethodDelete })
	}
	testwait.Eventually(t, testwait.Bound(time.Until(dep2.IdleDeadlineAt)+2*time.Minute), "the reaper's DELETE", func() (bool, string) {
		return len(reaped()) > 0, fmt.Sprint(api.Requests())
	})
	if del := reaped(); len(del) != 1 || del[0].Path != "/v2/droplets/"+strconv.Itoa(drop2.ID) || del[0].At.Before(dep2.IdleDeadlineAt) {
		t.Fatalf("the write token's DELETEs %v, want one of droplet %d at or after its deadline %v", del, drop2.ID, dep2.IdleDeadlineAt)
	}
	lifecycleDeployment(t, cl, "proof-2", dep2.ID, 30*time.Second, func(d adminapi.FleetDeployment) bool { return d.Status == "ended" })
	lifecycleStory(t, cl, "proof-2", "launched", "shutdown", "reaper-destroyed")

	if j := lifecycleConverge(t, cl, "box-2", "destroy"); j.Status != storage.JobSucceeded {
		t.Fatalf("destroy after the reaper: %s: %s", j.Status, j.Error)
	}
	lifecycleVolumeKept(t, cl, api, "box-2")
	// The destroy found the droplet already gone and says so (docs/operations.md,
	// "Converge", destroy after the reaper); the reaper's end stands.
	lifecycleStory(t, cl, "proof-2", "launched", "shutdown", "reaper-destroyed", "sunk")
}

// lifecycleRelease is a release contrib/release.sh built for the host's
// architecture, served over loopback https: its version (lifecycleVersion
// when empty), its directory URL, the PEM file of its server's
// certificate, and checksums.txt (name → sha256).
type lifecycleRelease struct {
	version, url, ca string
	sha256           map[string]string
}

func lifecycleBuildRelease(t *testing.T) lifecycleRelease {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("sh", filepath.Join(proctest.RepoRoot(t), "contrib/release.sh"), lifecycleVersion, out)
	cmd.Env = append(os.Environ(), "CHALUPA_RELEASE_ALLOW_DIRTY=1", "CHALUPA_RELEASE_ARCHES="+runtime.GOARCH)
	b, err := cmd.CombinedOutput()
	sums, _ := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if err != nil || len(sums) == 0 {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	rel := lifecycleRelease{ca: filepath.Join(t.TempDir(), "ca.pem"), sha256: map[string]string{}}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		rel.sha256[name] = sum
	}
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(out)))
	t.Cleanup(srv.Close)
	rel.url = srv.URL
	if err := os.WriteFile(rel.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return rel
}

// lifecycleArchive names the release's agent archive for arch
// (agentrelease.ArchiveName).
func lifecycleArchive(arch string) string { return agentrelease.ArchiveName(lifecycleVersion, arch) }

// daemonEnv is the agent release configuration (docs/operations.md,
// "Configuration"). The architecture not built gets a digest no archive
// has: a droplet of that architecture would refuse to install.
func (r lifecycleRelease) daemonEnv() map[string]string {
	version := cmp.Or(r.version, lifecycleVersion)
	env := map[string]string{"CHALUPA_AGENT_VERSION": version, "CHALUPA_AGENT_RELEASE_URL": r.url}
	for _, arch := range []string{"amd64", "arm64"} {
		none := sha256.Sum256(nil)
		env["CHALUPA_AGENT_SHA256_"+strings.ToUpper(arch)] = cmp.Or(r.sha256[agentrelease.ArchiveName(version, arch)], hex.EncodeToString(none[:]))
	}
	return env
}

// lifecycleBoot boots each droplet the API creates (dofake.WithOnCreate):
// its user data runs against a sandbox root of its own, dir/<id>, which
// link then names (every droplet is 127.0.0.1: the SSH server writes into
// the one that booted last).
type lifecycleBoot struct {
	rel             lifecycleRelease
	repo, dir, link string
	mu              sync.Mutex
	roots           map[int]string // droplet id → root, once booted
	errs            []error
}

func (b *lifecycleBoot) boot(d dofake.Droplet) {
	root, installs := filepath.Join(b.dir, strconv.Itoa(d.ID)), lifecycleArchive(runtime.GOARCH)
	ud, out := d.UserData, ""
	err := error(nil)
	if want := b.rel.sha256[installs]; err == nil && (want == "" || !strings.Contains(ud, want)) {
		err = fmt.Errorf("the user data does not pin %s's digest %q", installs, want)
	}
	if err == nil {
		out, err = lifecycleCloudInit(ud, root, append(os.Environ(), "CHALUPA_INSTALL_ROOT="+root, "CURL_CA_BUNDLE="+b.rel.ca))
	}
	if err == nil {
		_ = os.Remove(b.link + ".new")
		if err = os.Symlink(root, b.link+".new"); err == nil {
			err = os.Rename(b.link+".new", b.link)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.errs = append(b.errs, fmt.Errorf("boot of droplet %d: %w\n%s", d.ID, err, out))
		return
	}
	b.roots[d.ID] = root
}

// lifecycleCloudInit does what cloud-init does with userData under root:
// write_files, then each runcmd (a list is argv, a string runs in sh) with
// the paths it wrote resolved under root, stopping at the first failure.
func lifecycleCloudInit(userData, root string, env []string) (string, error) {
	var ci struct {
		WriteFiles []struct{ Path, Permissions, Content, Encoding string } `yaml:"write_files"`
		RunCmd     []any                                                   `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal([]byte(userData), &ci); err != nil || !strings.HasPrefix(userData, "#cloud-config\n") {
		return "", fmt.Errorf("user data is not #cloud-config: %v", err)
	}
	var rooted []string // old, new pairs for strings.NewReplacer
	for _, f := range ci.WriteFiles {
		perm, err := strconv.ParseUint(cmp.Or(f.Permissions, "0644"), 8, 32)
		if err != nil || f.Encoding != "" {
			return "", fmt.Errorf("write_files %s: permissions %q, encoding %q not supported", f.Path, f.Permissions, f.Encoding)
		}
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(f.Content), os.FileMode(perm)); err != nil {
			return "", err
		}
		rooted = append(rooted, f.Path, p)
	}
	var log strings.Builder
	for _, c := range ci.RunCmd {
		argv := []string{"sh", "-c", fmt.Sprint(c)}
		if list, ok := c.([]any); ok {
			argv = argv[:0]
			for _, a := range list {
				argv = append(argv, fmt.Sprint(a))
			}
		}
		for i := range argv {
			argv[i] = strings.NewReplacer(rooted...).Replace(argv[i])
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &log, &log
		if err := cmd.Run(); err != nil {
			return log.String(), fmt.Errorf("runcmd %v: %w", argv, err)
		}
	}
	return log.String(), nil
}

// lifecycleUp creates environment env and its box (1 GiB volume), runs its
// up, and returns the droplet and the root it booted into, requiring the
// boot to have installed and the key to have arrived over SSH (and not to
// be in the user data).
func lifecycleUp(t *testing.T, cl *adminapi.Client, api *dofake.Server, boot *lifecycleBoot, env, box string, limitMinutes int) (dofake.Droplet, string) {
	t.Helper()
	ctx := context.Background()
	cfg := adminapi.BoxConfig{Region: "nyc3", Size: "s-1vcpu-1gb", Image: "ubuntu-24-04-x64",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: 1}
	cfg.AgentIdleMinutes = int64(limitMinutes)
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: env}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateBox(ctx, adminapi.CreateBoxRequest{Name: box, Environment: env, BoxConfig: cfg}); err != nil {
		t.Fatal(err)
	}
	if j := lifecycleConverge(t, cl, box, "up"); j.Status != storage.JobSucceeded {
		t.Fatalf("up %s: %s: %s", box, j.Status, j.Error)
	}
	b, err := cl.GetBox(ctx, box)
	d, ok := api.Droplet(int(b.Resources.DropletID))
	boot.mu.Lock()
	root, errs := boot.roots[d.ID], errors.Join(boot.errs...)
	boot.mu.Unlock()
	if err != nil || !ok || root == "" || errs != nil {
		t.Fatalf("box %s: droplet %d (listed %v, %v) not booted: %v", box, b.Resources.DropletID, ok, err, errs)
	}
	key, err := os.ReadFile(filepath.Join(root, "etc/chalupa-agent/ingest.key"))
	if k := strings.TrimSpace(string(key)); err != nil || k == "" || strings.Contains(d.UserData, k) {
		t.Fatalf("box %s: the ingest key did not arrive over SSH, or is in the user data: %v", box, err)
	}
	return d, root
}

// lifecycleConverge runs action on box and returns the finished job.
func lifecycleConverge(t *testing.T, cl *adminapi.Client, box, action string) adminapi.Job {
	t.Helper()
	ctx := context.Background()
	j, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: box}, Action: action})
	if err != nil {
		t.Fatalf("%s %s: %v", action, box, err)
	}
	testwait.Eventually(t, testwait.Long, action+" of "+box, func() (bool, string) {
		if j, err = cl.GetJob(ctx, j.ID); err != nil {
			return false, err.Error()
		}
		return j.Done(), j.Status + " " + string(j.Progress)
	})
	return j
}

// lifecycleAgent is the installed agent, running from a droplet's root.
type lifecycleAgent struct {
	cmd    *exec.Cmd
	log    *proctest.SyncBuffer
	exited chan error
}

// lifecycleStartAgent starts the binary the boot installed under root as
// its unit would, with the installed agent.env, and the droplet's /proc,
// /dev, /run, state dir, keys and metadata service (knowing droplet d) the
// sandbox's.
func lifecycleStartAgent(t *testing.T, root string, d dofake.Droplet, url, env string, limitMinutes int) *lifecycleAgent {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "etc/chalupa-agent/agent.env"))
	if err != nil {
		t.Fatalf("the install wrote no agent.env: %v", err)
	}
	settings := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			settings[k] = strings.Trim(v, `"'`)
		}
	}
	// What converge rendered into the user data reached the agent's settings.
	for k, want := range map[string]string{"CHALUPA_AGENT_URL": url, "CHALUPA_AGENT_ENV": env, "CHALUPA_AGENT_LIMIT_MINUTES": strconv.Itoa(limitMinutes)} {
		if settings[k] != want {
			t.Errorf("the installed agent.env has %s=%q, want %q", k, settings[k], want)
		}
	}
	for name, content := range map[string]string{"proc/stat": "cpu  100 0 0 900 0 0 0 0 0 0\n",
		"proc/meminfo": "MemTotal:       1048576 kB\nMemAvailable:    524288 kB\n", "proc/loadavg": "0.10 0.05 0.01 1/99 100\n",
		"proc/net/dev": "Inter-|\n face |\n  eth0: 1000 1 0 0 0 0 0 0 1000 1 0 0 0 0 0 0\n", "dev/pts/.keep": "", "run/.keep": ""} {
		if err := errors.Join(os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755), os.WriteFile(filepath.Join(root, name), []byte(content), 0o644)); err != nil {
			t.Fatal(err)
		}
	}
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, map[string]string{"/metadata/v1/id": strconv.Itoa(d.ID), "/metadata/v1/region": d.Region}[r.URL.Path])
	}))
	t.Cleanup(md.Close)
	in := func(p string) string { return filepath.Join(root, p) }
	maps.Copy(settings, map[string]string{"CHALUPA_AGENT_KEY_FILE": in("etc/chalupa-agent/ingest.key"), "CHALUPA_AGENT_STATE_DIR": in("var/lib/chalupa-agent"),
		"CHALUPA_AGENT_PROC_ROOT": in("proc"), "CHALUPA_AGENT_DEV_ROOT": in("dev"), "CHALUPA_AGENT_RUN_ROOT": in("run"), "CHALUPA_AGENT_DISK_PATH": root,
		"CHALUPA_AGENT_METADATA_URL": md.URL + "/metadata/v1", "CHALUPA_AGENT_NVIDIA_SMI": "none"})
	argv := []string{in("usr/local/bin/chalupa-agent"), "run"}
	a := &lifecycleAgent{cmd: exec.Command(argv[0], argv[1:]...), log: &proctest.SyncBuffer{}, exited: make(chan error, 1)}
	a.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CHALUPA_AGENT_") })
	for k, v := range settings {
		a.cmd.Env = append(a.cmd.Env, k+"="+v)
	}
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("agent of droplet %d:\n%s", d.ID, a.log.String())
		}
	})
	return a
}

// lifecycleDeployment polls (up to within) for deployment id of env to
// satisfy ok, and returns it.
func lifecycleDeployment(t *testing.T, cl *adminapi.Client, env, id string, within time.Duration, ok func(adminapi.FleetDeployment) bool) adminapi.FleetDeployment {
	t.Helper()
	var dep adminapi.FleetDeployment
	testwait.Eventually(t, testwait.Bound(within), "deployment "+id+" of "+env, func() (bool, string) {
		f, err := cl.ListFleet(context.Background())
		for _, e := range f.Environments {
			for _, d := range e.Deployments {
				if e.Slug == env && d.ID == id {
					dep = d
					return ok(d), fmt.Sprintf("%+v", d)
				}
			}
		}
		return false, fmt.Sprint("not listed ", err)
	})
	return dep
}

// lifecycleVolumeKept requires box's droplet and firewall gone from its
// record and its volume kept, recorded and still at the provider.
func lifecycleVolumeKept(t *testing.T, cl *adminapi.Client, api *dofake.Server, box string) {
	t.Helper()
	b, err := cl.GetBox(context.Background(), box)
	if err != nil || b.Resources.DropletID != 0 || b.Resources.FirewallID != "" || b.Resources.VolumeID == "" ||
		!slices.ContainsFunc(api.Volumes(), func(v dofake.Volume) bool { return v.ID == b.Resources.VolumeID }) {
		t.Errorf("box %s after destroy: %+v (%v); volumes %+v", box, b.Resources, err, api.Volumes())
	}
}

// lifecycleStory requires env's events, oldest first, to be want; events of
// one transaction (the same instant) are one step, their kinds joined by
// "+" in name order.
func lifecycleStory(t *testing.T, cl *adminapi.Client, env string, want ...string) {
	t.Helper()
	evs, err := cl.ListEvents(context.Background(), adminapi.ListEventsRequest{Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for i := len(evs.Events) - 1; i >= 0; i-- { // newest first
		if n := len(steps); n > 0 && evs.Events[i].OccurredAt.Equal(evs.Events[i+1].OccurredAt) {
			kinds := append(strings.Split(steps[n-1], "+"), evs.Events[i].Kind)
			slices.Sort(kinds)
			steps[n-1] = strings.Join(kinds, "+")
		} else {
			steps = append(steps, evs.Events[i].Kind)
		}
	}
	if !slices.Equal(steps, want) {
		t.Errorf("events of %s tell %v, want %v:\n%+v", env, steps, want, evs.Events)
	}
}
