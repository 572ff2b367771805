package main

// End-to-end test of converge crash recovery (docs/operations.md, "Jobs")
// with the built binary, the real pulumi CLI, the test provider and the
// DigitalOcean API test server.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/reaper/dofake"
	"github.com/chalupa-run/chalupa/storage"
)

// convergeE2EToken is the provision token: a sentinel searched for in the
// logs, the database and the Pulumi state afterwards.
const convergeE2EToken = "dop_v1_provision_sentinel_e2e0123456789abcdef0123456789abcdef0123456789ab"

// e2eJobDeadline bounds waits on real Pulumi runs (a bound, not a timing
// assertion).
const e2eJobDeadline = 5 * time.Minute

// TestConvergeSIGKILLRecovery: the daemon is SIGKILLed while an up is
// running, right after the test server saw the droplet created; the
// restarted daemon recovers the job before anything runs (lock cancelled,
// the droplet found by its tag and recorded, pending operations cleared),
// the requeued up completes by adopting it, and the test server holds
// exactly one droplet. The provision token is in no log, database or
// state file.
func TestConvergeSIGKILLRecovery(t *testing.T) {
	bin := daemontest.BuildBinary(t)
	cli := daemontest.ToolPath(t, "pulumi")
	api := dofake.New(t)
	api.AddTokenValue("provision", convergeE2EToken, dofake.FullAccess...)
	env := map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": convergeE2EToken, "CHALUPA_DO_API_URL": api.URL,
		"CHALUPA_PULUMI_CLI": cli, "PULUMI_HOME": daemontest.PulumiHome(t, cli)}
	d := daemontest.StartDaemon(t, bin, env)
	ctx := context.Background()
	cl := d.Admin()
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateBox(ctx, adminapi.CreateBoxRequest{Name: "box-1", Environment: "demo", BoxConfig: adminapi.BoxConfig{
		Region: "nyc3", Size: "s-1vcpu-1gb", Image: "ubuntu-24-04-x64",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: 10}}); err != nil {
		t.Fatal(err)
	}
	job, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "box-1"}, Action: "up"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(e2eJobDeadline)
	for len(api.Droplets()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no droplet created within %s; daemon log:\n%s", e2eJobDeadline, d.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Kill()
	if j := jobStatus(t, d.DatabasePath(), job.ID); j != storage.JobRunning {
		t.Fatalf("job after SIGKILL is %s, want running (the kill came too late to test recovery)", j)
	}
	logs := d.Logs()

	d2 := daemontest.StartDaemon(t, bin, d.EnvCopy())
	cl = d2.Admin()
	var j adminapi.Job
	for {
		if j, err = cl.GetJob(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		if j.Done() {
			break
		}
		if time.Now().After(deadline.Add(e2eJobDeadline)) {
			t.Fatalf("job still %s; log:\n%s", j.Status, d2.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if j.Status != storage.JobSucceeded || j.Attempts != 2 {
		t.Fatalf("recovered job: %s after %d attempts: %s\n%s", j.Status, j.Attempts, j.Error, d2.Logs())
	}
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
