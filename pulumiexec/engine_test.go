package pulumiexec_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/pulumiexec"
)

var (
	homeOnce sync.Once
	homeDir  string
	homeErr  error
)

// pulumiHome builds the test provider once per test process and installs
// it as digitalocean ProviderVersion into a fresh PULUMI_HOME.
// TestMain removes the shared PULUMI_HOME (and its plugin binary) after
// the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if homeDir != "" {
		os.RemoveAll(homeDir)
	}
	os.Exit(code)
}

func pulumiHome(t *testing.T, cli string) string {
	t.Helper()
	homeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chalupa-pulumi-home-")
		if err != nil {
			homeErr = err
			return
		}
		bin := filepath.Join(dir, "pulumi-resource-digitalocean")
		build := exec.Command("go", "build", "-o", bin, "./pulumiexec/internal/testprovider")
		build.Dir = proctest.RepoRoot(t)
		if out, err := build.CombinedOutput(); err != nil {
			homeErr = errors.New("build test provider: " + string(out))
			return
		}
		inst := exec.Command(cli, "plugin", "install", "resource", "digitalocean", pulumiexec.ProviderVersion, "--file", bin)
		inst.Env = append(os.Environ(), "PULUMI_HOME="+dir, "PULUMI_SKIP_UPDATE_CHECK=true")
		if out, err := inst.CombinedOutput(); err != nil {
			homeErr = errors.New("install test provider: " + string(out))
			return
		}
		homeDir = dir
	})
	if homeErr != nil {
		t.Fatal(homeErr)
	}
	return homeDir
}

const provisionToken = "dop_v1_provision_sentinel_0123456789abcdef0123456789abcdef0123456789abcdef"

type rig struct {
	eng  *pulumiexec.Engine
	api  *dofake.Server
	spec pulumiexec.BoxSpec
}

func newRig(t *testing.T) rig {
	t.Helper()
	cli := proctest.ToolPath(t, "pulumi")
	home := pulumiHome(t, cli)
	api := dofake.New(t)
	api.AddTokenValue("provision", provisionToken, dofake.FullAccess...)
	eng := &pulumiexec.Engine{WorkDir: t.TempDir(), PulumiHome: home, CLIPath: cli, ProvisionToken: provisionToken, APIURL: api.URL}
	spec := pulumiexec.BoxSpec{
		Name: "box-1", EnvironmentSlug: "demo-harbor", Region: "nyc3", Size: "s-1vcpu-1gb", Image: "ubuntu-24-04-x64",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "198.51.100.7", ControlPlaneSource: "203.0.113.9/32", VolumeGiB: 50, JobID: "j1",
	}
	return rig{eng: eng, api: api, spec: spec}
}

func (r rig) run(t *testing.T, spec pulumiexec.BoxSpec, a pulumiexec.Action, opts pulumiexec.RunOptions) pulumiexec.Result {
	t.Helper()
	res, err := r.eng.Run(context.Background(), spec, a, opts, nil)
	if err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	t.Logf("%s: %s in %v", a, res.Steps, res.Elapsed)
	return res
}

func wantSteps(t *testing.T, what string, got, want pulumiexec.Steps) {
	t.Helper()
	if got != want {
		t.Errorf("%s steps = %s, want %s", what, got, want)
	}
}

// TestLifecycle: preview, up, preview again, refresh and destroy of one box
// with exact step counts; compute destroy keeps the data volume; data
// destroy needs the phrase.
func TestLifecycle(t *testing.T) {
	t.Parallel() // each rig has its own backend, work dir and API server
	r := newRig(t)
	wantSteps(t, "first preview", r.run(t, r.spec, pulumiexec.ActionPreview, pulumiexec.RunOptions{}).Steps, pulumiexec.Steps{Create: 3})
	if n := len(r.api.Droplets()); n != 0 {
		t.Fatalf("preview created %d droplets", n)
	}
	up := r.run(t, r.spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	wantSteps(t, "up", up.Steps, pulumiexec.Steps{Create: 3})
	ds, vs, fs := r.api.Droplets(), r.api.Volumes(), r.api.Firewalls()
	if len(ds) != 1 || len(vs) != 1 || len(fs) != 1 {
		t.Fatalf("after up: %d droplets, %d volumes, %d firewalls", len(ds), len(vs), len(fs))
	}
	d := ds[0]
	for _, tag := range []string{"chalupa", "chalupa:env:demo-harbor", "chalupa:box:box-1", "chalupa:job:j1"} {
		if !d.HasTag(tag) {
			t.Errorf("droplet tags %v lack %s", d.Tags, tag)
		}
	}
	if up.DropletID == "" || up.VolumeID != vs[0].ID || up.FirewallID != fs[0].ID || up.IPv4 == "" {
		t.Errorf("result = %+v", up)
	}
	if len(d.VolumeIDs) != 1 || d.VolumeIDs[0] != vs[0].ID {
		t.Errorf("volume not attached: %v", d.VolumeIDs)
	}
	if got := fs[0].InboundRules; len(got) != 1 || got[0].Ports != "22" ||
		strings.Join(got[0].Addresses, ",") != "198.51.100.7/32,203.0.113.9/32" || len(fs[0].DropletIDs) != 1 || fs[0].DropletIDs[0] != d.ID {
		t.Errorf("firewall = %+v", fs[0])
	}
	wantSteps(t, "second preview", r.run(t, r.spec, pulumiexec.ActionPreview, pulumiexec.RunOptions{}).Steps, pulumiexec.Steps{Same: 3})
	wantSteps(t, "up again", r.run(t, r.spec, pulumiexec.ActionUp, pulumiexec.RunOptions{}).Steps, pulumiexec.Steps{Same: 3})

	t.Run("token absent from stack exports and workspace files", func(t *testing.T) {
		for _, b := range exports(t, r) {
			if strings.Contains(b, provisionToken) || strings.Contains(b, "provision_sentinel") {
				t.Error("the provision token is in a stack export")
			}
		}
		_ = filepath.WalkDir(r.eng.WorkDir, func(p string, de os.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), "provision_sentinel") {
					t.Errorf("the provision token is in %s", p)
				}
			}
			return nil
		})
	})

	down := r.run(t, r.spec, pulumiexec.ActionDestroy, pulumiexec.RunOptions{})
	wantSteps(t, "compute destroy", down.Steps, pulumiexec.Steps{Delete: 2})
	if len(r.api.Droplets()) != 0 || len(r.api.Firewalls()) != 0 || len(r.api.Volumes()) != 1 {
		t.Fatalf("after compute destroy: %v %v %v", r.api.Droplets(), r.api.Firewalls(), r.api.Volumes())
	}
	if _, err := r.eng.Run(context.Background(), r.spec, pulumiexec.ActionDestroy, pulumiexec.RunOptions{IncludeData: true, Confirm: "yes"}, nil); !errors.Is(err, pulumiexec.ErrConfirmData) {
		t.Fatalf("destroy data without the phrase: %v", err)
	}
	if len(r.api.Volumes()) != 1 {
		t.Fatal("a refused data destroy deleted the volume")
	}
	r.run(t, r.spec, pulumiexec.ActionDestroy, pulumiexec.RunOptions{IncludeData: true, Confirm: pulumiexec.DataConfirmPhrase("box-1")})
	if len(r.api.Volumes()) != 0 {
		t.Errorf("volume left after data destroy: %v", r.api.Volumes())
	}
}

// TestDrift: a droplet deleted behind chalupa's back shows in refresh, and
// the next up recreates it exactly once.
func TestDrift(t *testing.T) {
	t.Parallel() // each rig has its own backend, work dir and API server
	r := newRig(t)
	up := r.run(t, r.spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	r.api.RemoveDroplet(r.api.Droplets()[0].ID)
	ref := r.run(t, r.spec, pulumiexec.ActionRefresh, pulumiexec.RunOptions{})
	if ref.DropletID != "" {
		t.Errorf("refresh still reports droplet %s", ref.DropletID)
	}
	// The droplet is gone; the firewall lost it from its droplet ids; the
	// volume is unchanged.
	wantSteps(t, "refresh after drift", ref.Steps, pulumiexec.Steps{Delete: 1, Update: 1, Same: 1})
	again := r.run(t, r.spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	if again.Steps.Create != 1 {
		t.Errorf("up after drift: %s, want exactly one create", again.Steps)
	}
	ds := r.api.Droplets()
	if len(ds) != 1 || again.DropletID == up.DropletID {
		t.Errorf("droplets after drift up: %v (old %s new %s)", ds, up.DropletID, again.DropletID)
	}
	if len(ds[0].VolumeIDs) != 1 {
		t.Errorf("recreated droplet has volumes %v", ds[0].VolumeIDs)
	}
}

// TestDestroyAfterReap: a droplet destroyed behind the stack's back (by
// the reaper) counts as deleted: the destroy succeeds, reports it gone,
// deletes the firewall and never asks the provider to delete the missing
// droplet (the provider fails that, as the real one does); the volume is
// kept. A destroy with the data afterwards removes the volume.
func TestDestroyAfterReap(t *testing.T) {
	t.Parallel() // each rig has its own backend, work dir and API server
	r := newRig(t)
	up := r.run(t, r.spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	r.api.RemoveDroplet(r.api.Droplets()[0].ID)
	r.api.ResetRequests()
	down := r.run(t, r.spec, pulumiexec.ActionDestroy, pulumiexec.RunOptions{})
	wantSteps(t, "destroy after reap", down.Steps, pulumiexec.Steps{Delete: 1})
	if down.Gone != (pulumiexec.StateIDs{DropletID: up.DropletID}) {
		t.Errorf("gone = %+v, want droplet %s", down.Gone, up.DropletID)
	}
	if down.DropletID != "" || down.FirewallID != "" || down.VolumeID != up.VolumeID {
		t.Errorf("after the destroy: %+v", down)
	}
	if n := len(r.api.Requests(dofake.OnRoute(dofake.RouteDeleteDroplet))); n != 0 {
		t.Errorf("the destroy asked the provider to delete the missing droplet %d times", n)
	}
	if len(r.api.Firewalls()) != 0 || len(r.api.Volumes()) != 1 {
		t.Fatalf("after the destroy: firewalls %v, volumes %v", r.api.Firewalls(), r.api.Volumes())
	}
	again := r.run(t, r.spec, pulumiexec.ActionDestroy, pulumiexec.RunOptions{IncludeData: true, Confirm: pulumiexec.DataConfirmPhrase("box-1")})
	if len(r.api.Volumes()) != 0 || again.Gone != (pulumiexec.StateIDs{}) {
		t.Errorf("destroy with data: volumes %v, gone %+v", r.api.Volumes(), again.Gone)
	}
}

// TestAdoptAfterWipe: the state backend wiped, an up with the known
// provider ids imports every resource and creates nothing.
func TestAdoptAfterWipe(t *testing.T) {
	t.Parallel() // each rig has its own backend, work dir and API server
	r := newRig(t)
	up := r.run(t, r.spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	if err := os.RemoveAll(r.eng.WorkDir); err != nil {
		t.Fatal(err)
	}
	spec := r.spec
	spec.Known = pulumiexec.KnownIDs{DropletID: up.DropletID, FirewallID: up.FirewallID, VolumeID: up.VolumeID}
	adopted := r.run(t, spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	wantSteps(t, "adopting up", adopted.Steps, pulumiexec.Steps{Import: 3})
	if len(r.api.Droplets()) != 1 || len(r.api.Volumes()) != 1 || len(r.api.Firewalls()) != 1 {
		t.Errorf("after adoption: %v %v %v", r.api.Droplets(), r.api.Volumes(), r.api.Firewalls())
	}
	wantSteps(t, "preview after adoption", r.run(t, spec, pulumiexec.ActionPreview, pulumiexec.RunOptions{}).Steps, pulumiexec.Steps{Same: 3})
}

// TestNoDataVolume: a box with volume size 0 converges without a volume:
// preview and up create the droplet and firewall only, the droplet has no
// volume attached, a second up changes nothing, a wipe then up adopts the
// two, and destroy (with its data, which is nothing) deletes exactly two.
func TestNoDataVolume(t *testing.T) {
	t.Parallel() // each rig has its own backend, work dir and API server
	r := newRig(t)
	spec := r.spec
	spec.VolumeGiB = 0
	wantSteps(t, "preview", r.run(t, spec, pulumiexec.ActionPreview, pulumiexec.RunOptions{}).Steps, pulumiexec.Steps{Create: 2})
	up := r.run(t, spec, pulumiexec.ActionUp, pulumiexec.RunOptions{})
	wantSteps(t, "up", up.Steps, pulumiexec.Steps{Create: 2})
	ds := r.api.Droplets()
	if len(ds) != 1 || len(ds[0].VolumeIDs) != 0 || len(r.api.Volumes()) != 0 || len(r.api.Firewalls()) != 1 || up.VolumeID != "" {
		t.Fatalf("after up: droplets %+v, %d volumes, %d firewalls, volume id %q", ds, len(r.api.Volumes()), len(r.api.Firewalls()), up.VolumeID)
	}
	wantSteps(t, "second up", r.run(t, spec, pulumiexec.ActionUp, pulumiexec.RunOptions{}).Steps, pulumiexec.Steps{Same: 2})
	if err := r.eng.Wipe(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	spec.Known = pulumiexec.KnownIDs{DropletID: up.DropletID, FirewallID: up.FirewallID}
	wantSteps(t, "up after wipe", r.run(t, spec, pulumiexec.ActionUp, pulumiexec.RunOptions{}).Steps, pulumiexec.Steps{Import: 2})
	down := r.run(t, spec, pulumiexec.ActionDestroy, pulumiexec.RunOptions{IncludeData: true, Confirm: pulumiexec.DataConfirmPhrase(spec.Name)})
	wantSteps(t, "destroy", down.Steps, pulumiexec.Steps{Delete: 2})
	if len(r.api.Droplets()) != 0 || len(r.api.Firewalls()) != 0 {
		t.Errorf("after destroy: %v %v", r.api.Droplets(), r.api.Firewalls())
	}
}

// TestRefusals: what Run refuses before starting Pulumi.
func TestRefusals(t *testing.T) {
	eng := &pulumiexec.Engine{WorkDir: t.TempDir()}
	ok := pulumiexec.BoxSpec{Name: "b", EnvironmentSlug: "e", Region: "nyc3", Size: "s", Image: "i", SSHKeyFingerprints: []string{"k"},
		CustomerSource: "198.51.100.7", ControlPlaneSource: "203.0.113.9", VolumeGiB: 1}
	for _, tc := range []struct {
		name   string
		edit   func(*pulumiexec.BoxSpec)
		action pulumiexec.Action
		want   error
	}{
		{"no token", func(*pulumiexec.BoxSpec) {}, pulumiexec.ActionUp, pulumiexec.ErrNoProvisionToken},
		{"unknown action", func(*pulumiexec.BoxSpec) {}, "apply", pulumiexec.ErrUnknownAction},
		{"missing customer source", func(s *pulumiexec.BoxSpec) { s.CustomerSource = "" }, pulumiexec.ActionUp, pulumiexec.ErrInvalidSpec},
		{"missing control-plane source", func(s *pulumiexec.BoxSpec) { s.ControlPlaneSource = "" }, pulumiexec.ActionUp, pulumiexec.ErrInvalidSpec},
		{"wide source", func(s *pulumiexec.BoxSpec) { s.CustomerSource = "198.51.100.0/24" }, pulumiexec.ActionUp, pulumiexec.ErrInvalidSpec},
		{"bad name", func(s *pulumiexec.BoxSpec) { s.Name = "Box_1" }, pulumiexec.ActionUp, pulumiexec.ErrInvalidSpec},
		{"negative volume", func(s *pulumiexec.BoxSpec) { s.VolumeGiB = -1 }, pulumiexec.ActionUp, pulumiexec.ErrInvalidSpec},
		{"volume too large", func(s *pulumiexec.BoxSpec) { s.VolumeGiB = 16385 }, pulumiexec.ActionUp, pulumiexec.ErrInvalidSpec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			if _, err := eng.Run(context.Background(), s, tc.action, pulumiexec.RunOptions{}, nil); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// exports returns both stacks' exported deployments.
func exports(t *testing.T, r rig) []string {
	t.Helper()
	var out []string
	for _, st := range []string{r.spec.ComputeStack(), r.spec.DataStack()} {
		cmd := exec.Command(r.eng.CLIPath, "stack", "export", "--stack", st, "--show-secrets")
		cmd.Dir = filepath.Join(r.eng.WorkDir, "workspaces", st)
		cmd.Env = append(os.Environ(), "PULUMI_HOME="+r.eng.PulumiHome, "PULUMI_BACKEND_URL=file://"+filepath.Join(r.eng.WorkDir, "state"),
			"PULUMI_CONFIG_PASSPHRASE=", "PULUMI_SKIP_UPDATE_CHECK=true")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("export %s: %v\n%s", st, err, b)
		}
		if !strings.Contains(string(b), "digitalocean:index/") {
			t.Fatalf("export %s holds no resource: %s", st, b)
		}
		out = append(out, string(b))
	}
	return out
}
