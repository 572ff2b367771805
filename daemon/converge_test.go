package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
	"github.com/chalupa-run/chalupa/storage"
)

// convergeToken is the provision token of the converge tests: a sentinel
// searched for in every place it must never reach.
const convergeToken = "dop_v1_provision_sentinel_c0ffee0123456789abcdef0123456789abcdef0123456789"

// convergeEnv is a daemon configuration with converge on: the provision
// token, the test server's URL, the pulumi CLI, a PULUMI_HOME holding the
// test provider, and key delivery pointed at droplet's port (the test
// server must report 127.0.0.1 as every droplet's address:
// newConvergeAPI).
func convergeEnv(t testing.TB, api *dofake.Server, droplet *sshdtest.Server) map[string]string {
	t.Helper()
	cli := proctest.ToolPath(t, "pulumi")
	api.AddTokenValue("provision", convergeToken, dofake.FullAccess...)
	return map[string]string{"DIGITALOCEAN_PROVISION_TOKEN": convergeToken, "CHALUPA_DO_API_URL": api.URL,
		"CHALUPA_PULUMI_CLI": cli, "PULUMI_HOME": proctest.PulumiHome(t, cli, pulumiexec.ProviderVersion),
		"CHALUPA_SSH_PORT": strconv.Itoa(droplet.Port())}
}

// newConvergeAPI is the DigitalOcean API test server whose droplets all
// answer SSH on loopback: the fake droplet newFakeDroplet starts.
func newConvergeAPI(t testing.TB) *dofake.Server {
	return dofake.New(t, dofake.WithPublicIPv4("127.0.0.1"))
}

// newFakeDroplet starts the local SSH server that stands in for the
// droplets' sshd, its agent directory under a temporary root.
func newFakeDroplet(t testing.TB) *sshdtest.Server {
	s := sshdtest.New(t, sshdtest.NewSigner(t), nil)
	s.Root = t.TempDir()
	return s
}

// authorize installs chalupa's SSH identity (adminGetSSHKey) in the fake
// droplet's authorized keys, as the box's SSH keys do on a real one.
func authorize(t testing.TB, cl *adminapi.Client, droplet *sshdtest.Server) {
	t.Helper()
	k, err := cl.GetSSHKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	droplet.Authorize(sshdtest.Authorized(t, k.PublicKey))
}

// delivered reads the key files the fake droplet received.
func delivered(t *testing.T, droplet *sshdtest.Server) (keyID, key string) {
	t.Helper()
	for _, f := range []struct {
		name string
		to   *string
	}{{"key-id", &keyID}, {"ingest.key", &key}} {
		fi, err := os.Stat(filepath.Join(droplet.AgentDir(), f.name))
		if err != nil {
			t.Fatalf("the droplet has no %s: %v", f.name, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f.name, fi.Mode().Perm())
		}
		b, _ := os.ReadFile(filepath.Join(droplet.AgentDir(), f.name))
		*f.to = strings.TrimSuffix(string(b), "\n")
	}
	return keyID, key
}

// sendHeartbeat signs a heartbeat of deployment dep with the delivered
// key, as the droplet's agent does, and returns the HTTP status.
func sendHeartbeat(t *testing.T, p *daemontest.InProcess, env, dep string, dropletID int64, keyID, material string) int {
	t.Helper()
	raw, err := protocol.DecodeKeyMaterial(material)
	if err != nil {
		t.Fatalf("the delivered key is not key material: %v", err)
	}
	now := time.Now().UTC()
	body, _ := json.Marshal(protocol.HeartbeatV1{EnvironmentSlug: env,
		Deployment: protocol.HeartbeatDeploy{ID: dep, DropletID: dropletID}, AgentVersion: "test/1", SentAt: now,
		Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now.Add(-time.Minute)}})
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/api/ingest/heartbeat", bytes.NewReader(body))
	protocol.Attach(req.Header, keyID, raw, strconv.FormatInt(now.Unix(), 10), protocol.NewNonce(), http.MethodPost, "/api/ingest/heartbeat", body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitJob polls the job until it is no longer queued or running.
func waitJob(t testing.TB, cl *adminapi.Client, id string) adminapi.Job {
	t.Helper()
	var j adminapi.Job
	testwait.Eventually(t, testwait.Converge, "job "+id+" to end", func() (bool, string) {
		var err error
		if j, err = cl.GetJob(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return j.Status != storage.JobQueued && j.Status != storage.JobRunning, j.Status
	})
	return j
}

// converge enqueues action on box, waits for the job and requires success;
// it returns the job and its summary.
func converge(t *testing.T, cl *adminapi.Client, box, action string) (adminapi.Job, map[string]any) {
	t.Helper()
	start := time.Now()
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
	// A report for the figures, not an assertion: enqueue → succeeded
	// includes the queue and the 100 ms poll.
	t.Logf("%s: %v; engine %v ms; enqueue to succeeded %v", action, sum["steps"], sum["elapsedMs"], time.Since(start).Round(time.Millisecond))
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
// a launched event and the deployment, and delivers a fresh ingest key of
// the environment over SSH to the droplet (a local SSH server), whose
// signed heartbeat the daemon then accepts; destroy ends the deployment
// through the sunk path; a wiped state cache makes the next up adopt
// everything; the provision token reaches no job row, event, log or
// stack export.
func TestConvergeThroughTheQueue(t *testing.T) {
	t.Parallel()
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: convergeEnv(t, api, droplet), StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	authorize(t, cl, droplet)
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

	keyID, material := delivered(t, droplet)
	t.Run("the delivered key verifies the droplet's signed heartbeat", func(t *testing.T) {
		if !strings.HasPrefix(keyID, "env_demo_") {
			t.Errorf("delivered key id %q is not an environment key of demo", keyID)
		}
		if code := sendHeartbeat(t, p, "demo", dep, int64(ds[0].ID), keyID, material); code != http.StatusAccepted {
			t.Fatalf("heartbeat signed with the delivered key: %d", code)
		}
		if code := sendHeartbeat(t, p, "demo", dep, int64(ds[0].ID), keyID, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"); code == http.StatusAccepted {
			t.Fatal("a heartbeat signed with another key was accepted: the test proves nothing")
		}
		if box.LastLaunch == nil || !strings.HasPrefix(box.LastLaunch.HostKey, "ssh-ed25519 ") {
			t.Errorf("the launch records no pinned host key: %+v", box.LastLaunch)
		}
	})

	t.Run("a second up changes nothing and records no second launch", func(t *testing.T) {
		_, sum := converge(t, cl, "gpu-1", "up")
		if sum["same"] != 3.0 {
			t.Errorf("second up: %v", sum["steps"])
		}
		if n := len(events(t, p.App.DB, "launched")); n != 1 {
			t.Errorf("%d launched events", n)
		}
		if n := len(droplet.Ran()); n != 2 {
			t.Errorf("the fake droplet ran %d commands, want the first delivery's 2: a same-droplet up delivered again", n)
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

	t.Run("the provision token and the ingest key are nowhere", func(t *testing.T) {
		noToken(t, p)
		noSecret(t, p, material)
	})
}

// noSecret searches the job rows, events, the daemon log and every file of
// the data dir (the database, the Pulumi state) for secret.
func noSecret(t *testing.T, p *daemontest.InProcess, secret string) {
	t.Helper()
	if strings.Contains(p.Logs.String(), secret) {
		t.Error("the secret is in the daemon log")
	}
	var n int
	if err := p.App.DB.Read.QueryRow(`SELECT
		(SELECT count(*) FROM jobs WHERE instr(coalesce(result,'') || coalesce(progress,'') || error, ?) > 0) +
		(SELECT count(*) FROM lifecycle_events WHERE instr(message, ?) > 0) +
		(SELECT count(*) FROM stack_states WHERE instr(CAST(export AS TEXT), ?) > 0)`, secret, secret, secret).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the secret is in %d job, event or checkpoint rows", n)
	}
	// The checkpoint search above proves nothing without checkpoints.
	if err := p.App.DB.Read.QueryRow(`SELECT count(*) FROM stack_states`).Scan(&n); err != nil || n == 0 {
		t.Errorf("no stack checkpoint was saved (%d, %v): the search for the secret in them checks nothing", n, err)
	}
	_ = filepath.WalkDir(p.Env["CHALUPA_DATA_DIR"], func(path string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), secret) {
				t.Errorf("the secret is in %s", path)
			}
		}
		return nil
	})
}

// TestConvergeKeyDeliveryFailure: a droplet that refuses chalupa's SSH
// identity fails the up with the documented message (the droplet exists and
// is billable), records the droplet on the box and its deployment (it is
// billable), revokes the key it issued, and carries no key in the job; the
// next up, once the identity is authorized, delivers a key and succeeds.
func TestConvergeKeyDeliveryFailure(t *testing.T) {
	t.Parallel()
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: convergeEnv(t, api, droplet), StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	newEnv(t, cl, "demo")
	if _, err := cl.CreateBox(ctx, validBox("web-1", "demo")); err != nil {
		t.Fatal(err)
	}
	j, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "web-1"}, Action: "up"})
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, cl, j.ID)
	ds := api.Droplets()
	if j.Status != storage.JobFailed || len(ds) != 1 {
		t.Fatalf("up against a droplet refusing the identity: %s (%d droplets) %s", j.Status, len(ds), j.Error)
	}
	for _, want := range []string{"exists and is billable", "refused chalupa's SSH identity", "chalupa admin ssh-key"} {
		if !strings.Contains(j.Error, want) {
			t.Errorf("job error %q does not say %q", j.Error, want)
		}
	}
	if strings.Contains(j.Error, "127.0.0.1") {
		t.Errorf("job error carries the droplet's address: %q", j.Error)
	}
	box, err := cl.GetBox(ctx, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if box.Resources.DropletID != int64(ds[0].ID) || box.LastLaunch == nil || box.LastLaunch.HostKey != "" {
		t.Errorf("box after the failed delivery: resources %+v launch %+v", box.Resources, box.LastLaunch)
	}
	var revoked, active int
	if err := p.App.DB.Read.QueryRow(`SELECT count(*) FILTER (WHERE status = 'revoked'), count(*) FILTER (WHERE status = 'active') FROM ingest_keys`).Scan(&revoked, &active); err != nil {
		t.Fatal(err)
	}
	if revoked != 1 || active != 0 {
		t.Errorf("ingest keys after the failed delivery: %d revoked, %d active; want the issued one revoked", revoked, active)
	}
	var st string
	if err := p.App.DB.Read.QueryRow(`SELECT status FROM deployments WHERE id = ?`, "droplet-"+strconv.Itoa(ds[0].ID)).Scan(&st); err != nil || st != storage.DeploymentActive {
		t.Errorf("the billable droplet's deployment: %q %v", st, err)
	}

	authorize(t, cl, droplet)
	up, sum := converge(t, cl, "web-1", "up")
	if sum["same"] != 3.0 || len(api.Droplets()) != 1 {
		t.Fatalf("the retried up: %v, %d droplets", sum["steps"], len(api.Droplets()))
	}
	keyID, material := delivered(t, droplet)
	if code := sendHeartbeat(t, p, "demo", "droplet-"+strconv.Itoa(ds[0].ID), int64(ds[0].ID), keyID, material); code != http.StatusAccepted {
		t.Fatalf("heartbeat with the key the retried up (job %s) delivered: %d", up.ID, code)
	}
	noSecret(t, p, material)
}

// TestConvergeDestroyIncludeData: a destroy keeps the box's data volume;
// includeData without its phrase is refused 422 and enqueues nothing; with
// "destroy data <box>" the job carries includeData and removes the volume
// at the provider (docs/operations.md, "Jobs" and "Converge").
func TestConvergeDestroyIncludeData(t *testing.T) {
	t.Parallel()
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: convergeEnv(t, api, droplet), StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	authorize(t, cl, droplet)
	newEnv(t, cl, "demo")
	if _, err := cl.CreateBox(ctx, validBox("data-1", "demo")); err != nil {
		t.Fatal(err)
	}
	converge(t, cl, "data-1", "up")
	if len(api.Droplets()) != 1 || len(api.Volumes()) != 1 {
		t.Fatalf("after up: %d droplets, %d volumes", len(api.Droplets()), len(api.Volumes()))
	}
	scope := adminapi.Scope{Kind: "box", ID: "data-1"}

	t.Run("without includeData the volume stays", func(t *testing.T) {
		j, _ := converge(t, cl, "data-1", "destroy")
		if len(api.Droplets()) != 0 || len(api.Volumes()) != 1 || j.IncludeData {
			t.Fatalf("after a plain destroy: %d droplets, %d volumes, includeData %v", len(api.Droplets()), len(api.Volumes()), j.IncludeData)
		}
	})

	t.Run("without the phrase: 422, nothing enqueued", func(t *testing.T) {
		before, err := cl.ListJobs(ctx, adminapi.ListJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, phrase := range []string{"", "destroy data-1", "destroy data other"} {
			_, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: scope, Action: "destroy", IncludeData: true, Confirmation: phrase})
			var ae *adminapi.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || ae.Code != "confirmation_mismatch" {
				t.Fatalf("phrase %q: %v, want 422 confirmation_mismatch", phrase, err)
			}
		}
		after, err := cl.ListJobs(ctx, adminapi.ListJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Jobs) != len(before.Jobs) || len(api.Volumes()) != 1 {
			t.Fatalf("a refused request enqueued: %d jobs before, %d after; %d volumes", len(before.Jobs), len(after.Jobs), len(api.Volumes()))
		}
	})

	t.Run("with includeData and the phrase the volume is destroyed", func(t *testing.T) {
		j, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: scope, Action: "destroy", IncludeData: true,
			Confirmation: adminapi.DestroyDataPhrase("data-1")})
		if err != nil {
			t.Fatal(err)
		}
		if !j.IncludeData {
			t.Errorf("the queued job does not carry includeData: %+v", j)
		}
		j = waitJob(t, cl, j.ID)
		if j.Status != storage.JobSucceeded {
			t.Fatalf("destroy with data: %s: %s", j.Status, j.Error)
		}
		if n := len(api.Volumes()); n != 0 {
			t.Fatalf("%d volumes after destroying the data", n)
		}
		box, err := cl.GetBox(ctx, "data-1")
		if err != nil {
			t.Fatal(err)
		}
		if box.Resources.VolumeID != "" {
			t.Errorf("the box still records volume %q", box.Resources.VolumeID)
		}
	})
}

// TestConvergeWipeSurvivesRestart: a state wipe records itself in the
// stacks' checkpoints, so the restore of missing stacks at the next start
// leaves them gone: the preview after the restart adopts every resource
// (imports, no creates, nothing "same"), and the up after it creates
// nothing (docs/operations.md, "Checkpoints").
func TestConvergeWipeSurvivesRestart(t *testing.T) {
	t.Parallel()
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	opt := daemontest.AppOptions{Env: convergeEnv(t, api, droplet), StartLoops: true}
	p := daemontest.NewInProcess(t, opt)
	ctx := context.Background()
	authorize(t, p.Admin, droplet)
	newEnv(t, p.Admin, "demo")
	if _, err := p.Admin.CreateBox(ctx, validBox("wipe-1", "demo")); err != nil {
		t.Fatal(err)
	}
	converge(t, p.Admin, "wipe-1", "up")
	if _, err := p.Admin.ClearPulumiStateCache(ctx, adminapi.ClearStateRequest{Box: "wipe-1", Confirmation: adminapi.WipePhrase("wipe-1")}); err != nil {
		t.Fatal(err)
	}
	p.Restart(opt)
	// The preview runs only after the lane restored missing stacks.
	_, sum := converge(t, p.Admin, "wipe-1", "preview")
	if sum["import"] != 3.0 || sum["same"] != 0.0 || sum["create"] != 0.0 {
		t.Fatalf("preview after wipe and restart: %v; the restart restored the wiped stacks", sum["steps"])
	}
	if !strings.Contains(p.Logs.String(), "left wiped stacks missing") {
		t.Error("the start does not log the wiped stacks it left missing")
	}
	_, sum = converge(t, p.Admin, "wipe-1", "up")
	if sum["import"] != 3.0 || sum["create"] != 0.0 || len(api.Droplets()) != 1 {
		t.Fatalf("up after wipe and restart: %v, %d droplets", sum["steps"], len(api.Droplets()))
	}
}

// TestConvergeCheckpointAfterCancelledRun: a run cancelled mid-up (here
// by stopping the daemon, as the lease deadline also does) still saves its
// stacks' checkpoints, on a context the cancellation did not end; the job
// is left running for crash recovery (docs/operations.md, "Checkpoints").
func TestConvergeCheckpointAfterCancelledRun(t *testing.T) {
	t.Parallel()
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	opt := daemontest.AppOptions{Env: convergeEnv(t, api, droplet), StartLoops: true}
	p := daemontest.NewInProcess(t, opt)
	ctx := context.Background()
	authorize(t, p.Admin, droplet)
	newEnv(t, p.Admin, "demo")
	if _, err := p.Admin.CreateBox(ctx, validBox("cp-1", "demo")); err != nil {
		t.Fatal(err)
	}
	j, err := p.Admin.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "cp-1"}, Action: "up"})
	if err != nil {
		t.Fatal(err)
	}
	// Stop the daemon once the run has changed the state (the volume
	// exists) and before it ended (the droplet comes after the volume).
	testwait.Eventually(t, testwait.Converge, "the up to create the volume", func() (bool, string) {
		return len(api.Volumes()) > 0, fmt.Sprintf("%d provider requests", len(api.Requests()))
	})
	p.Close()
	p.Restart(daemontest.AppOptions{Env: opt.Env})
	got, err := storage.JobByID(ctx, p.App.DB.Read, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != storage.JobRunning {
		t.Fatalf("the job is %s: the run ended before the daemon stopped, so nothing was cancelled and the test proves nothing", got.Status)
	}
	var n int
	if err := p.App.DB.Read.QueryRowContext(ctx, `SELECT count(*) FROM stack_states WHERE stack = 'cp-1-data'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("the cancelled run saved no checkpoint of the data stack it changed")
	}
	if strings.Contains(p.Logs.String(), "checkpoint after a failed run") {
		t.Errorf("the checkpoint after the cancelled run failed:\n%s", p.Logs.String())
	}
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

// TestConvergeDestroyAfterReap: the reaper destroys a converged box's
// droplet at its deadline (with the write token), then `converge destroy`
// of the box succeeds: the missing droplet counts as deleted (the test
// provider, like the real one, fails a delete of a droplet that is gone),
// the firewall is deleted, the data volume is kept, and the box and its
// events say so (docs/operations.md, "Converge").
func TestConvergeDestroyAfterReap(t *testing.T) {
	t.Parallel()
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	env := convergeEnv(t, api, droplet)
	env["DIGITALOCEAN_WRITE_TOKEN"] = api.AddToken("write", dofake.FullAccess...)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: env, StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	authorize(t, cl, droplet)
	newEnv(t, cl, "demo")
	if _, err := cl.CreateBox(ctx, validBox("reaped-1", "demo")); err != nil {
		t.Fatal(err)
	}
	converge(t, cl, "reaped-1", "up")
	ds, vs := api.Droplets(), api.Volumes()
	if len(ds) != 1 || len(vs) != 1 {
		t.Fatalf("after up: %d droplets, %d volumes", len(ds), len(vs))
	}
	dropletID := int64(ds[0].ID)
	dep := "droplet-" + strconv.Itoa(ds[0].ID)

	// The agent heartbeats, then its activity stops: the deadline passes
	// and the reaper destroys the droplet.
	keyID, material := delivered(t, droplet)
	if code := sendHeartbeat(t, p, "demo", dep, dropletID, keyID, material); code != http.StatusAccepted {
		t.Fatalf("heartbeat: %d", code)
	}
	past := time.Now().Add(-time.Minute).UnixMilli()
	if err := p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE deployments SET idle_deadline_at = ? WHERE id = ?`, past, dep)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RunReaperTick(ctx); err != nil {
		t.Fatal(err)
	}
	if d := api.Deletes(); len(d) != 1 || d[0].Token != "write" || len(api.Droplets()) != 0 {
		t.Fatalf("the reaper did not destroy the droplet: deletes %v, droplets %v", d, api.Droplets())
	}
	if n := len(events(t, p.App.DB, "reaper-destroyed")); n != 1 {
		t.Fatalf("%d reaper-destroyed events", n)
	}

	j, sum := converge(t, cl, "reaped-1", "destroy")
	if gone, _ := sum["alreadyGone"].([]any); len(gone) != 1 || gone[0] != "droplet "+strconv.Itoa(ds[0].ID) {
		t.Errorf("the destroy's result does not say the droplet was already gone: %v", sum)
	}
	if sum["delete"] != 1.0 || sum["volumeId"] != vs[0].ID {
		t.Errorf("destroy after the reap: %v, want the firewall deleted and volume %s kept", sum, vs[0].ID)
	}
	if len(api.Firewalls()) != 0 || len(api.Volumes()) != 1 {
		t.Fatalf("after the destroy: firewalls %v, volumes %v", api.Firewalls(), api.Volumes())
	}
	box, err := cl.GetBox(ctx, "reaped-1")
	if err != nil {
		t.Fatal(err)
	}
	if box.Resources.DropletID != 0 || box.Resources.FirewallID != "" || box.Resources.VolumeID != vs[0].ID ||
		box.LastLaunch == nil || box.LastLaunch.DropletID != dropletID {
		t.Errorf("box after the destroy: resources %+v launch %+v", box.Resources, box.LastLaunch)
	}
	sunk := events(t, p.App.DB, "sunk")
	if len(sunk) != 1 || sunk[0].ID != "converge-sunk:"+j.ID || sunk[0].DeploymentID != dep ||
		!strings.Contains(sunk[0].Message, "already gone") || !strings.Contains(sunk[0].Message, "volume "+vs[0].ID+" kept") {
		t.Errorf("sunk events = %+v", sunk)
	}
	for _, ev := range events(t, p.App.DB, "deployment-ended") {
		if ev.ID == "converge-ended:"+j.ID {
			t.Errorf("the destroy ended the reaped deployment again: %+v", ev)
		}
	}
}

// TestServeWarnsWithoutTheProviderPlugin: with converge configured and no
// DigitalOcean provider plugin under PULUMI_HOME, the daemon says so at
// start with the install command; with the plugin installed it says
// nothing (docs/operations.md, "Converge").
func TestServeWarnsWithoutTheProviderPlugin(t *testing.T) {
	const warning = "converge is configured but the DigitalOcean provider plugin is not installed"
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	env := convergeEnv(t, api, droplet)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: env})
	if strings.Contains(p.Logs.String(), warning) {
		t.Fatalf("warned with the plugin installed:\n%s", p.Logs.String())
	}
	empty := t.TempDir()
	env["PULUMI_HOME"] = empty
	p = daemontest.NewInProcess(t, daemontest.AppOptions{Env: env})
	want := "PULUMI_HOME=" + empty + " pulumi plugin install resource digitalocean " + pulumiexec.ProviderVersion
	if logs := p.Logs.String(); strings.Count(logs, warning) != 1 || !strings.Contains(logs, want) {
		t.Fatalf("no single warning naming %q:\n%s", want, logs)
	}
}
