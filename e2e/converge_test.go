package e2e

// End-to-end test of converge crash recovery (docs/operations.md, "Jobs")
// with the built binary, the real pulumi CLI, the test provider and the
// DigitalOcean API test server.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
	"github.com/chalupa-run/chalupa/storage"
)

// convergeE2EToken is the provision token: a sentinel searched for in the
// logs, the database and the Pulumi state afterwards.
const convergeE2EToken = "dop_v1_provision_sentinel_e2e0123456789abcdef0123456789abcdef0123456789ab"

// TestConvergeSIGKILLRecovery: the daemon is SIGKILLed while an up is
// running, right after the droplet was created: the provider's first look
// at the new droplet (the wait for it to become active) is held, so the
// create is answered but not finished in Pulumi's state; the restarted
// daemon recovers the job before anything runs (lock cancelled,
// the droplet found by its tag and recorded, pending operations cleared),
// the requeued up completes by adopting it, and the test server holds
// exactly one droplet. The provision token is in no log, database or
// state file.
func TestConvergeSIGKILLRecovery(t *testing.T) {
	t.Parallel()
	bin, api, d, job := e2eKilledMidUp(t, dofake.RouteGetDroplet)
	if n := len(api.Droplets()); n != 1 {
		t.Fatalf("%d droplets at the kill, want 1", n)
	}
	ctx := context.Background()
	logs := d.Logs()

	d2 := proctest.StartDaemon(t, bin, d.EnvCopy())
	cl := d2.Admin()
	j := e2eRecovered(t, d2, job.ID)
	if !strings.Contains(d2.Logs(), "recovered a job left running by a stopped process") {
		t.Error("the restarted daemon did not log the recovery")
	}
	ds := api.Droplets()
	if len(ds) != 1 {
		t.Fatalf("%d droplets after recovery, want exactly 1: %+v", len(ds), ds)
	}
	if n := len(api.Volumes()); n != 1 {
		t.Errorf("%d volumes after recovery", n)
	}
	box, err := cl.GetBox(ctx, "box-1")
	if err != nil {
		t.Fatal(err)
	}
	if box.Resources.DropletID != int64(ds[0].ID) || box.LastLaunch == nil || box.LastLaunch.DropletID != int64(ds[0].ID) {
		t.Errorf("box after recovery: %+v %+v", box.Resources, box.LastLaunch)
	}
	t.Logf("recovered up result: %s", j.Result)

	t.Run("the provision token is nowhere", func(t *testing.T) {
		if strings.Contains(logs+d2.Logs(), "provision_sentinel") {
			t.Error("the provision token is in a daemon log")
		}
		_ = filepath.WalkDir(d2.DataDir, func(p string, de os.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), "provision_sentinel") {
					t.Errorf("the provision token is in %s", p)
				}
			}
			return nil
		})
	})
}

// e2eConvergeAPI starts the DigitalOcean API test server, every droplet
// of which reports 127.0.0.1 as its public IPv4, and the local SSH server
// standing in for the droplets' sshd (key delivery after each up).
func e2eConvergeAPI(t *testing.T) (*dofake.Server, *sshdtest.Server) {
	api := dofake.New(t, dofake.WithPublicIPv4("127.0.0.1"))
	api.AddTokenValue("provision", convergeE2EToken, dofake.FullAccess...)
	droplet := sshdtest.New(t, sshdtest.NewSigner(t), nil)
	droplet.Root = t.TempDir()
	return api, droplet
}

// e2eConvergeEnv is the built binary's configuration with converge on,
// key delivery dialling the fake droplet's port.
func e2eConvergeEnv(t *testing.T, api *dofake.Server, droplet *sshdtest.Server) map[string]string {
	cli := proctest.ToolPath(t, "pulumi")
	env := proctest.AgentRelease() // boxes carry the agent (docs/operations.md, "Converge")
	for k, v := range map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": convergeE2EToken, "CHALUPA_DO_API_URL": api.URL,
		"CHALUPA_PULUMI_CLI": cli, "PULUMI_HOME": proctest.PulumiHome(t, cli, pulumiexec.ProviderVersion), "CHALUPA_SSH_PORT": strconv.Itoa(droplet.Port())} {
		env[k] = v
	}
	return env
}

// e2eAuthorize installs chalupa's SSH identity on the fake droplet.
func e2eAuthorize(t *testing.T, cl *adminapi.Client, droplet *sshdtest.Server) {
	t.Helper()
	k, err := cl.GetSSHKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	droplet.Authorize(sshdtest.Authorized(t, k.PublicKey))
}

// jobStatus reads a job's status from the stopped daemon's database.
func jobStatus(t *testing.T, dbPath, id string) string {
	t.Helper()
	db, err := storage.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j, err := storage.JobByID(context.Background(), db.Read, id)
	if err != nil {
		t.Fatal(err)
	}
	return j.Status
}

// e2eConverge enqueues action on box through the admin API, waits for the
// job and requires success; it returns the job's summary.
func e2eConverge(t *testing.T, cl *adminapi.Client, box, action string) (adminapi.Job, map[string]any) {
	t.Helper()
	ctx := context.Background()
	j, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: box}, Action: action})
	if err != nil {
		t.Fatalf("%s: %v", action, err)
	}
	testwait.Eventually(t, testwait.Converge, action+" job "+j.ID+" to end", func() (bool, string) {
		if j, err = cl.GetJob(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		return j.Done(), e2eJobState(t, cl, j.ID, nil)
	})
	if j.Status != storage.JobSucceeded {
		t.Fatalf("%s job %s: %s: %s", action, j.ID, j.Status, j.Error)
	}
	var sum map[string]any
	if err := json.Unmarshal(j.Result, &sum); err != nil {
		t.Fatalf("%s result: %v", action, err)
	}
	return j, sum
}

// e2eKilledMidUp starts the built daemon with converge on, creates box-1
// (10 GiB volume), enqueues its up and SIGKILLs the daemon while the
// DigitalOcean API test server holds the answer to the up's first request
// on route (the request has acted: a create took effect). The kill point
// is exact: the held request cannot be answered before the kill, so the
// job is still running.
func e2eKilledMidUp(t *testing.T, route dofake.Route) (bin string, api *dofake.Server, d *proctest.Daemon, job adminapi.Job) {
	t.Helper()
	bin = proctest.BuildBinary(t)
	api, droplet := e2eConvergeAPI(t)
	hold := dofake.NewHold()
	api.Inject(dofake.Fault{Route: route, Hold: hold})
	d = proctest.StartDaemon(t, bin, e2eConvergeEnv(t, api, droplet))
	cl := d.Admin()
	e2eAuthorize(t, cl, droplet)
	e2eBox(t, cl, "box-1", 10)
	job, err := cl.RunPulumiConverge(context.Background(), adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "box-1"}, Action: "up"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, testwait.Converge, "the up's "+string(route)+" held at the provider", func() (bool, string) {
		select {
		case <-hold.Arrived():
			return true, ""
		default:
			return false, e2eJobState(t, cl, job.ID, api) + "\ndaemon log:\n" + d.Logs()
		}
	})
	d.Kill()
	if j := jobStatus(t, d.DatabasePath(), job.ID); j != storage.JobRunning {
		t.Fatalf("job after SIGKILL is %s, want running; provider requests:\n%s", j, e2eRequests(api))
	}
	return bin, api, d, job
}

// e2eRecovered waits (testwait.Converge) for the restarted
// daemon d to finish job id, and requires it to have succeeded on its
// second attempt: the first was killed, recovery requeued it.
func e2eRecovered(t *testing.T, d *proctest.Daemon, id string) adminapi.Job {
	t.Helper()
	cl := d.Admin()
	var j adminapi.Job
	testwait.Eventually(t, testwait.Converge, "the recovered job "+id+" to end", func() (bool, string) {
		var err error
		if j, err = cl.GetJob(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return j.Done(), e2eJobState(t, cl, id, nil) + "\nlog:\n" + d.Logs()
	})
	if j.Status != storage.JobSucceeded || j.Attempts != 2 {
		t.Fatalf("recovered job: %s after %d attempts: %s\n%s", j.Status, j.Attempts, j.Error, d.Logs())
	}
	return j
}

// e2eJobState describes where a job that has not got far enough stands,
// for a failure message: its status, attempts, error and last progress
// report, and (api non-nil) every request the DigitalOcean API test server
// received, so a stalled run shows how far Pulumi reached.
func e2eJobState(t *testing.T, cl *adminapi.Client, id string, api *dofake.Server) string {
	t.Helper()
	var b strings.Builder
	if j, err := cl.GetJob(context.Background(), id); err != nil {
		fmt.Fprintf(&b, "job %s: %v", id, err)
	} else {
		fmt.Fprintf(&b, "job %s: %s, attempt %d, error %q, progress #%d %s", id, j.Status, j.Attempts, j.Error, j.ProgressSeq, j.Progress)
	}
	if api != nil {
		fmt.Fprintf(&b, "\nprovider requests:\n%s", e2eRequests(api))
	}
	return b.String()
}

// e2eRequests lists the requests the DigitalOcean API test server
// received, oldest first, one a line.
func e2eRequests(api *dofake.Server) string {
	var b strings.Builder
	for _, r := range api.Requests() {
		fmt.Fprintf(&b, "  %s\n", r)
	}
	return b.String()
}

// e2eBox creates environment demo and its box name (10 GiB volume).
func e2eBox(t *testing.T, cl *adminapi.Client, name string, volumeGiB int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateBox(ctx, adminapi.CreateBoxRequest{Name: name, Environment: "demo", BoxConfig: adminapi.BoxConfig{
		Region: "nyc3", Size: "s-1vcpu-1gb", Image: "ubuntu-24-04-x64",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: volumeGiB}}); err != nil {
		t.Fatal(err)
	}
}

// TestConvergeCheckpointRestore: an up through the queue checkpoints both
// stacks into the database; the embedded Litestream replicates it to
// versitygw; the real `litestream restore` brings it into a fresh data dir
// with an empty Pulumi backend; the built binary started there restores
// both stacks from their checkpoints before its lane runs anything, so a
// preview finds the three resources unchanged (no create) and an up
// imports nothing and creates nothing: the test server still holds exactly
// one droplet.
func TestConvergeCheckpointRestore(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	s3 := proctest.StartVersityGW(t)
	api, droplet := e2eConvergeAPI(t)
	env := e2eConvergeEnv(t, api, droplet)
	for k, v := range s3.DaemonEnv("converge") {
		env[k] = v
	}
	d := proctest.StartDaemon(t, bin, env)
	cl := d.Admin()
	e2eAuthorize(t, cl, droplet)
	e2eBox(t, cl, "box-1", 10)
	if _, sum := e2eConverge(t, cl, "box-1", "up"); sum["create"] != 3.0 {
		t.Fatalf("up: %v", sum["steps"])
	}
	e2eStop(t, d)

	restored := proctest.Restore(t, litestream, s3.ReplicaURL("converge"), s3.Credentials())
	db, err := storage.Open(context.Background(), restored)
	if err != nil {
		t.Fatal(err)
	}
	states, err := storage.LatestStackStates(context.Background(), db.Read)
	db.Close()
	if err != nil || len(states) != 2 {
		t.Fatalf("the restored database holds %d stack checkpoints (%v), want both stacks'", len(states), err)
	}

	dataDir := t.TempDir()
	e2eCopyFile(t, restored, filepath.Join(dataDir, "chalupa.db"))
	env2 := e2eSecrets(d.Env)
	for k, v := range e2eConvergeEnv(t, api, droplet) {
		env2[k] = v
	}
	env2["CHALUPA_DATA_DIR"] = dataDir // its Pulumi backend, file://DATA_DIR/pulumi, is empty
	if _, err := os.Stat(filepath.Join(dataDir, "pulumi")); !os.IsNotExist(err) {
		t.Fatalf("the fresh data dir already has a Pulumi backend: %v", err)
	}
	d2 := proctest.StartDaemon(t, bin, env2)
	cl = d2.Admin()
	pre, sum := e2eConverge(t, cl, "box-1", "preview")
	if sum["same"] != 3.0 || sum["create"] != 0.0 || sum["import"] != 0.0 {
		t.Fatalf("preview after restore (job %s): %v; log:\n%s", pre.ID, sum["steps"], d2.Logs())
	}
	if !strings.Contains(d2.Logs(), "restored stacks missing from the Pulumi backend") {
		t.Error("the restored daemon did not log the stack restore")
	}
	if _, sum := e2eConverge(t, cl, "box-1", "up"); sum["same"] != 3.0 || sum["create"] != 0.0 || sum["import"] != 0.0 {
		t.Fatalf("up after restore: %v", sum["steps"])
	}
	if n := len(api.Droplets()); n != 1 {
		t.Fatalf("%d droplets after the restored daemon's up, want exactly 1", n)
	}
}

// TestConvergeSIGKILLFirewallRecovery: the daemon is SIGKILLed while the
// firewall create of an up has reached the test server (the firewall
// exists) but its answer is held back, so Pulumi's state holds only a
// pending create. The restarted daemon's recovery finds the firewall by
// the box's tag, records it and wipes the compute stack; the retried up
// adopts it: exactly one firewall (and one droplet) exists, recorded on the
// box.
func TestConvergeSIGKILLFirewallRecovery(t *testing.T) {
	t.Parallel()
	bin, api, d, job := e2eKilledMidUp(t, dofake.RouteCreateFirewall)
	ctx := context.Background()
	fw := api.Firewalls()[0]
	if !slices.Contains(fw.Tags, "chalupa:box:box-1") {
		t.Fatalf("the firewall does not carry the box's tag: %v", fw.Tags)
	}

	d2 := proctest.StartDaemon(t, bin, d.EnvCopy())
	cl := d2.Admin()
	j := e2eRecovered(t, d2, job.ID)
	if fs := api.Firewalls(); len(fs) != 1 || fs[0].ID != fw.ID {
		t.Fatalf("firewalls after recovery: %+v, want exactly the one created before the kill (%s)", fs, fw.ID)
	}
	if n := len(api.Droplets()); n != 1 {
		t.Fatalf("%d droplets after recovery, want 1", n)
	}
	box, err := cl.GetBox(ctx, "box-1")
	if err != nil {
		t.Fatal(err)
	}
	if box.Resources.FirewallID != fw.ID {
		t.Errorf("box firewall %q, want %q", box.Resources.FirewallID, fw.ID)
	}
	t.Logf("recovered up result: %s", j.Result)
}
