package e2e

// End-to-end test of the job doctor (docs/operations.md, "Job doctor")
// with the built binary, the real pulumi CLI, the test provider and the
// DigitalOcean API test server.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
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
	"github.com/chalupa-run/chalupa/storage"
)

// TestJobDoctorEndToEnd: the daemon is SIGKILLed while an up's droplet
// create has reached the test server but its answer is held back (the
// compute stack then holds a pending create and the dead CLI's lock). The
// daemon restarted with the jobs loop paused (recovery has not run) is
// asked `chalupa admin job doctor`: it shows the dead holder's lock, the
// pending create, the droplet at the provider, and recommends resuming the
// lane; the job, the Pulumi backend's files, the checkpoints and the
// provider are unchanged by it (list calls only). Running the recommended
// command lets recovery finish the job; the doctor then says nothing to do.
func TestJobDoctorEndToEnd(t *testing.T) {
	t.Parallel()
	bin, api, d, job := e2eKilledMidUp(t, dofake.RouteCreateDroplet)
	ctx := context.Background()
	checkpoints := stackCheckpointVersions(t, d.DatabasePath())
	dropletID := strconv.Itoa(api.Droplets()[0].ID)

	d2 := proctest.StartDaemon(t, bin, d.EnvCopy(), "--pause-loops", "jobs")
	cl := d2.Admin()
	cliEnv := map[string]string{"CHALUPA_URL": d2.URL, "CHALUPA_ADMIN_TOKEN": d2.AdminToken()}
	backend := filepath.Join(d2.DataDir, "pulumi")
	jobBefore, err := cl.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	filesBefore := treeDigest(t, backend)
	requestsBefore := len(api.Requests())

	out, code := proctest.RunCommand(t, bin, "", cliEnv, "admin", "job", "doctor", job.ID, "--json")
	if code != 0 {
		t.Fatalf("job doctor --json: exit %d\n%s\n%s", code, out, d2.Logs())
	}
	var diag adminapi.JobDiagnosis
	if err := json.Unmarshal([]byte(out), &diag); err != nil {
		t.Fatalf("job doctor --json: %v\n%s", err, out)
	}
	text, code := proctest.RunCommand(t, bin, "", cliEnv, "admin", "job", "doctor", job.ID)
	if code != 0 {
		t.Fatalf("job doctor: exit %d\n%s", code, text)
	}
	t.Logf("chalupa admin job doctor %s (SIGKILLed up, lane paused):\n%s", job.ID, text)

	t.Run("the killed up is diagnosed", func(t *testing.T) {
		if diag.Job.Status != storage.JobRunning || diag.Lease.Holder == "" || diag.Lease.HolderIsThisDaemon || !diag.Lease.LanePaused {
			t.Errorf("job %s, lease %+v: want running, held by a process that is gone, lane paused", diag.Job.Status, diag.Lease)
		}
		if len(diag.Stacks) != 2 || diag.Stacks[1].Stack != "box-1-compute" {
			t.Fatalf("stacks %+v, want data then compute", diag.Stacks)
		}
		compute := diag.Stacks[1]
		if len(compute.Locks) != 1 || compute.Locks[0].HolderAlive || compute.Locks[0].PID == 0 {
			t.Errorf("compute stack locks %+v, want one held by a dead pulumi process", compute.Locks)
		}
		if !slices.ContainsFunc(compute.Pending, func(p adminapi.PendingOperation) bool {
			return p.Kind == "creating" && strings.HasSuffix(p.Type, "droplet:Droplet")
		}) {
			t.Errorf("compute stack pending %+v, want the droplet's create", compute.Pending)
		}
		if compute.State.DropletID != "" {
			t.Errorf("the compute state records droplet %s; its create never answered", compute.State.DropletID)
		}
		if len(diag.Provider.Droplets) != 1 || diag.Provider.Droplets[0].ID != dropletID || len(diag.Provider.Volumes) != 1 {
			t.Errorf("provider %+v, want droplet %s and one volume", diag.Provider, dropletID)
		}
		for _, s := range diag.Stacks {
			if s.CheckpointVersion != checkpoints[s.Stack] {
				t.Errorf("%s checkpoint v%d, the database holds v%d", s.Stack, s.CheckpointVersion, checkpoints[s.Stack])
			}
		}
		r := diag.Recommendation
		if r.Action != adminapi.DoctorResumeLane || !slices.Equal(r.Commands, []string{"chalupa admin loops resume jobs"}) {
			t.Errorf("recommendation %+v, want resume-lane with its command", r)
		}
		// The step journal: attempt 1's claim and its progress, nothing
		// after (the process died mid-run).
		if len(diag.Steps) < 2 || diag.Steps[0].Kind != storage.JobStepClaimed || diag.Steps[0].Attempt != 1 ||
			slices.ContainsFunc(diag.Steps[1:], func(s adminapi.JobStep) bool { return s.Kind != storage.JobStepProgress }) {
			t.Errorf("steps %+v, want attempt 1's claim and progress only", diag.Steps)
		}
		for _, want := range []string{"holder gone", "creating droplet", dropletID, "STEP", "claimed", "recommended: resume-lane", "  chalupa admin loops resume jobs"} {
			if !strings.Contains(text, want) {
				t.Errorf("the text output lacks %q", want)
			}
		}
	})

	t.Run("the doctor changed nothing", func(t *testing.T) {
		jobAfter, err := cl.GetJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if jobAfter.Status != jobBefore.Status || jobAfter.Attempts != jobBefore.Attempts || jobAfter.LockedBy != jobBefore.LockedBy ||
			jobAfter.ProgressSeq != jobBefore.ProgressSeq || !jobAfter.QueuedAt.Equal(jobBefore.QueuedAt) {
			t.Errorf("job before %+v\nafter %+v", jobBefore, jobAfter)
		}
		if after := treeDigest(t, backend); !maps.Equal(after, filesBefore) {
			t.Errorf("the Pulumi backend's files changed:\nbefore %v\nafter  %v", filesBefore, after)
		}
		for _, r := range api.Requests()[requestsBefore:] {
			if r.Method != "GET" || r.Token != "provision" {
				t.Errorf("the doctor sent %s", r)
			}
		}
		if n := len(api.Requests()) - requestsBefore; n == 0 {
			t.Error("the doctor read nothing at the provider")
		}
	})

	if len(diag.Recommendation.Commands) == 0 {
		t.Fatal("no command to run")
	}
	out, code = proctest.RunCommand(t, bin, "", cliEnv, strings.Fields(strings.TrimPrefix(diag.Recommendation.Commands[0], "chalupa "))...)
	if code != 0 {
		t.Fatalf("the recommended command failed: exit %d\n%s", code, out)
	}
	var j adminapi.Job
	testwait.Eventually(t, testwait.Converge, "the job to end after resuming the lane", func() (bool, string) {
		if j, err = cl.GetJob(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		return j.Done(), j.Status + "; log:\n" + d2.Logs()
	})
	if j.Status != storage.JobSucceeded {
		t.Fatalf("recovered job %s: %s\n%s", j.Status, j.Error, d2.Logs())
	}
	text, code = proctest.RunCommand(t, bin, "", cliEnv, "admin", "job", "doctor", job.ID)
	if code != 0 || !strings.Contains(text, "recommended: nothing") {
		t.Fatalf("job doctor of the succeeded job: exit %d, want nothing to do:\n%s", code, text)
	}
	t.Logf("chalupa admin job doctor %s (succeeded):\n%s", job.ID, text)
	out, code = proctest.RunCommand(t, bin, "", cliEnv, "admin", "job", "doctor", job.ID, "--json")
	if err := json.Unmarshal([]byte(out), &diag); code != 0 || err != nil {
		t.Fatalf("job doctor --json: exit %d, %v\n%s", code, err, out)
	}
	// Recovery released attempt 1 (requeued), attempt 2 ran to success.
	var kinds []string
	for _, s := range diag.Steps {
		if s.Kind != storage.JobStepProgress {
			kinds = append(kinds, fmt.Sprintf("%s %s %d", s.Kind, s.Status, s.Attempt))
		}
	}
	if want := []string{"claimed running 1", "released queued 1", "claimed running 2", "finished succeeded 2"}; !slices.Equal(kinds, want) {
		t.Errorf("steps of the recovered job %v, want %v", kinds, want)
	}
	if n := len(api.Droplets()); n != 1 {
		t.Fatalf("%d droplets, want 1", n)
	}
}

// stackCheckpointVersions reads each stack's newest checkpoint version
// from the stopped daemon's database.
func stackCheckpointVersions(t *testing.T, dbPath string) map[string]int64 {
	t.Helper()
	db, err := storage.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	states, err := storage.LatestStackStates(context.Background(), db.Read)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, s := range states {
		out[s.Stack] = s.Version
	}
	return out
}

// treeDigest maps each file under dir to its size and content's SHA-256,
// and each directory to "dir".
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if de.IsDir() {
			out[rel+"/"] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = fmt.Sprintf("%d bytes %x", len(b), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
