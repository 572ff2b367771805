package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/reaper/dofake"
	"github.com/chalupa-run/chalupa/storage"
)

// convergeToken is the provision token of the converge tests: a sentinel
// searched for in every place it must never reach.
const convergeToken = "dop_v1_provision_sentinel_c0ffee0123456789abcdef0123456789abcdef0123456789"

// jobDeadline bounds a wait for one real Pulumi run (a bound, not a
// timing assertion: runs take seconds).
const jobDeadline = 5 * time.Minute

// convergeEnv is a daemon configuration with converge on: the provision
// token, the test server's URL, the pulumi CLI and a PULUMI_HOME holding
// the test provider.
func convergeEnv(t *testing.T, api *dofake.Server) map[string]string {
	t.Helper()
	cli := daemontest.ToolPath(t, "pulumi")
	api.AddTokenValue("provision", convergeToken, dofake.FullAccess...)
	return map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": convergeToken, "CHALUPA_DO_API_URL": api.URL,
		"CHALUPA_PULUMI_CLI": cli, "PULUMI_HOME": daemontest.PulumiHome(t, cli)}
}

// waitJob polls the job until it is no longer queued or running.
func waitJob(t *testing.T, cl *adminapi.Client, id string) adminapi.Job {
	t.Helper()
	deadline := time.Now().Add(jobDeadline)
	for {
		j, err := cl.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != storage.JobQueued && j.Status != storage.JobRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %s", id, j.Status, jobDeadline)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// converge enqueues action on box, waits for the job and requires success;
// it returns the job and its summary.
func converge(t *testing.T, cl *adminapi.Client, box, action string) (adminapi.Job, map[string]any) {
	t.Helper()
	j, err := cl.RunPulumiConverge(context.Background(), adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: box}, Action: action})
	if err != nil {
		t.Fatalf("%s: %v", action, err)
	}
	j = waitJob(t, cl, j.ID)
	if j.Status != storage.JobSucceeded {
		t.Fatalf("%s job %s: %s: %s", action, j.ID, j.Status, j.Error)
	}
	var sum map[string]any
	if err := json.Unmarshal(j.Result, &sum); err != nil {
		t.Fatalf("%s result: %v", action, err)
	}
	t.Logf("%s: %v in %v ms", action, sum["steps"], sum["elapsedMs"])
	return j, sum
}

func events(t *testing.T, db *storage.DB, kind string) []storage.LifecycleEventRow {
	t.Helper()
	evs, err := storage.ListLifecycleEvents(context.Background(), db.Read, storage.EventFilter{Kind: kind, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestConvergeThroughTheQueue: the Pulumi executor wired into the job
// queue, end to end with the real pulumi CLI, the test provider and the
// DigitalOcean API test server: up records the provider ids, the launch,
// a launched event and the deployment; destroy ends the deployment
// through the sunk path; a wiped state cache makes the next up adopt
// everything; the provision token reaches no job row, event, log or
// stack export.
func TestConvergeThroughTheQueue(t *testing.T) {
	api := dofake.New(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: convergeEnv(t, api), StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	newEnv(t, cl, "demo")
	req := validBox("gpu-1", "demo")
	req.Managed = true
	if _, err := cl.CreateBox(ctx, req); err != nil {
		t.Fatal(err)
	}

	_, sum := converge(t, cl, "gpu-1", "preview")
	if sum["create"] != 3.0 || len(api.Droplets()) != 0 {
		t.Fatalf("preview: %v, %d droplets", sum, len(api.Droplets()))
	}
	up, sum := converge(t, cl, "gpu-1", "up")
	if sum["create"] != 3.0 {
		t.Fatalf("up steps: %v", sum["steps"])
	}
	ds := api.Droplets()
	if len(ds) != 1 || !ds[0].HasTag("chalupa:job:"+up.ID) {
		t.Fatalf("droplets after up: %+v", ds)
	}
	box, err := cl.GetBox(ctx, "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	if box.Resources.DropletID != int64(ds[0].ID) || box.Resources.FirewallID == "" || box.Resources.VolumeID == "" {
		t.Errorf("box resources = %+v", box.Resources)
	}
	if box.LastLaunch == nil || box.LastLaunch.DropletID != int64(ds[0].ID) || box.LastLaunch.IPv4 == "" || box.LastLaunch.JobID != up.ID {
		t.Errorf("box launch = %+v", box.LastLaunch)
	}
	dep := "droplet-" + strconv.Itoa(ds[0].ID)
	launched := events(t, p.App.DB, "launched")
	if len(launched) != 1 || launched[0].ID != "converge-launched:"+up.ID || launched[0].DeploymentID != dep || !strings.Contains(launched[0].Message, "managed") {
		t.Fatalf("launched events = %+v", launched)
	}
	var managed bool
	var status string
	if err := p.App.DB.Read.QueryRowContext(ctx, `SELECT status, managed FROM deployments WHERE id = ?`, dep).Scan(&status, &managed); err != nil {
		t.Fatalf("deployment %s: %v", dep, err)
	}
	if status != storage.DeploymentActive || !managed {
		t.Errorf("deployment %s: status %s managed %v", dep, status, managed)
	}

	t.Run("a second up changes nothing and records no second launch", func(t *testing.T) {
		_, sum := converge(t, cl, "gpu-1", "up")
		if sum["same"] != 3.0 {
			t.Errorf("second up: %v", sum["steps"])
		}
		if n := len(events(t, p.App.DB, "launched")); n != 1 {
			t.Errorf("%d launched events", n)
		}
	})

	t.Run("wipe then up adopts: zero creates", func(t *testing.T) {
		w, err := cl.ClearPulumiStateCache(ctx, adminapi.ClearStateRequest{Box: "gpu-1", Confirmation: adminapi.WipePhrase("gpu-1")})
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Boxes) != 1 || w.Boxes[0] != "gpu-1" {
			t.Errorf("wiped = %+v", w)
		}
		if _, err := os.Stat(filepath.Join(p.Env["CHALUPA_DATA_DIR"], "pulumi", ".pulumi", "stacks", "chalupa", "gpu-1-compute.json")); !os.IsNotExist(err) {
			t.Errorf("the compute stack's state is still there: %v", err)
		}
		_, sum := converge(t, cl, "gpu-1", "up")
		if sum["import"] != 3.0 || sum["create"] != 0.0 {
			t.Errorf("up after wipe: %v", sum["steps"])
		}
		if n := len(api.Droplets()); n != 1 {
			t.Errorf("%d droplets after the adopting up", n)
		}
	})

	t.Run("destroy ends the deployment through the sunk path", func(t *testing.T) {
		converge(t, cl, "gpu-1", "destroy")
		if len(api.Droplets()) != 0 || len(api.Volumes()) != 1 {
			t.Fatalf("after destroy: %v droplets, %v volumes", api.Droplets(), api.Volumes())
		}
		if err := p.App.DB.Read.QueryRowContext(ctx, `SELECT status FROM deployments WHERE id = ?`, dep).Scan(&status); err != nil || status != storage.DeploymentEnded {
			t.Errorf("deployment after destroy: %s %v", status, err)
		}
		if n := len(events(t, p.App.DB, "sunk")); n != 1 {
			t.Errorf("%d sunk events", n)
		}
		envs, err := cl.ListEnvironments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range envs.Environments {
			if e.Slug == "demo" && e.Status != "sunk" {
				t.Errorf("environment demo is %s after its last deployment ended", e.Status)
			}
		}
		box, err := cl.GetBox(ctx, "gpu-1")
		if err != nil {
			t.Fatal(err)
		}
		if box.Resources.DropletID != 0 || box.LastLaunch == nil || box.LastLaunch.DropletID != int64(ds[0].ID) {
			t.Errorf("box after destroy: resources %+v launch %+v", box.Resources, box.LastLaunch)
		}
	})

	t.Run("the provision token is nowhere", func(t *testing.T) {
		noToken(t, p)
	})
}

// noToken searches the job rows, events, the daemon log, the database
// file and every file of the Pulumi state and workspaces for the token.
func noToken(t *testing.T, p *daemontest.InProcess) {
	t.Helper()
	if strings.Contains(p.Logs.String(), "provision_sentinel") {
		t.Error("the provision token is in the daemon log")
	}
	var n int
	if err := p.App.DB.Read.QueryRow(`SELECT
		(SELECT count(*) FROM jobs WHERE instr(coalesce(result,'') || coalesce(progress,'') || error, 'provision_sentinel') > 0) +
		(SELECT count(*) FROM lifecycle_events WHERE instr(message, 'provision_sentinel') > 0)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the provision token is in %d job or event rows", n)
	}
	_ = filepath.WalkDir(p.Env["CHALUPA_DATA_DIR"], func(path string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), "provision_sentinel") {
				t.Errorf("the provision token is in %s", path)
			}
		}
		return nil
	})
}
