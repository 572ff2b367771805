package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/jobs/jobstest"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/storage"
)

// failingInspector is a converge executor whose stack and provider reads
// fail with an error naming a path and a token, as an engine error may.
type failingInspector struct{ jobstest.Executor }

const inspectorSecret = "/var/lib/chalupa/pulumi/.pulumi/locks dop_v1_secrettoken"

func (*failingInspector) Inspect(context.Context, storage.Box) (pulumiexec.BoxInspection, error) {
	return pulumiexec.BoxInspection{}, errors.New("reading " + inspectorSecret)
}

// enqueueDirect stores a queued up job for box without the converge
// service (which refuses without an executor) and returns its id.
func enqueueDirect(t *testing.T, p *daemontest.InProcess, box string) string {
	t.Helper()
	var id string
	err := p.App.DB.Writer.Do(t.Context(), func(tx storage.Tx) error {
		b, err := storage.BoxByRef(t.Context(), tx, box)
		if err != nil {
			return err
		}
		j, err := storage.EnqueueJob(t.Context(), tx, "01JDOCTORTEST0000000000000", "box", b.ID, jobs.ActionUp, false, p.App.Clock.Now())
		id = j.ID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDiagnoseJobRefusals: the doctor's 404, 503 and 502 answers
// (docs/operations.md, "Job doctor"), and the 502's reason is logged, never
// returned.
func TestDiagnoseJobRefusals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		executor jobs.Executor
		job      string // "" diagnoses the stored job
		status   int
		code     string
	}{
		{"unknown job", nil, "01JNOSUCHJOB00000000000000", http.StatusNotFound, "not_found"},
		{"converge not configured", nil, "", http.StatusServiceUnavailable, "converge_not_configured"},
		{"stack read fails", &failingInspector{Executor: jobstest.Executor{Gate: make(chan struct{})}}, "", http.StatusBadGateway, "doctor_failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: tc.executor, PauseLoops: []string{"jobs"}})
			cl := p.Admin
			newEnv(t, cl, "demo")
			if _, err := cl.CreateBox(context.Background(), validBox("box-1", "demo")); err != nil {
				t.Fatal(err)
			}
			id := tc.job
			if id == "" {
				id = enqueueDirect(t, p, "box-1")
			}
			_, err := cl.DiagnoseJob(context.Background(), id)
			var ae *adminapi.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
				t.Fatalf("diagnose %s: %v, want %d %s", id, err, tc.status, tc.code)
			}
			if strings.Contains(ae.Error(), "secrettoken") || strings.Contains(ae.Error(), "/var/lib") {
				t.Fatalf("the error body carries the engine's error: %v", ae)
			}
			if tc.code == "doctor_failed" && !strings.Contains(p.Logs.String(), "job doctor") {
				t.Fatalf("the reason was not logged:\n%s", p.Logs.String())
			}
		})
	}
}

// agreeingInspector is a converge executor whose stacks and provider hold
// nothing, as for a box never converged.
type agreeingInspector struct{ jobstest.Executor }

func (*agreeingInspector) Inspect(context.Context, storage.Box) (pulumiexec.BoxInspection, error) {
	return pulumiexec.BoxInspection{}, nil
}

// TestDiagnoseJobSteps: the doctor shows the job's step journal — the
// claim, every progress report in order and the failed finish with its
// error — not only the latest report (docs/operations.md, "Job doctor").
func TestDiagnoseJobSteps(t *testing.T) {
	exec := &agreeingInspector{Executor: jobstest.Executor{
		Progress: []jobs.Progress{{Message: "creating volume", Op: "create"}, {Message: "creating droplet", Op: "create"}},
		Fail:     map[string]error{"box-1": errors.New("droplet limit reached")},
	}}
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: exec, StartLoops: true})
	cl := p.Admin
	newEnv(t, cl, "demo")
	if _, err := cl.CreateBox(context.Background(), validBox("box-1", "demo")); err != nil {
		t.Fatal(err)
	}
	j, err := cl.RunPulumiConverge(context.Background(), adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "box-1"}, Action: jobs.ActionUp})
	if err != nil {
		t.Fatal(err)
	}
	if j = waitJobDone(t, cl, j.ID); j.Status != storage.JobFailed {
		t.Fatalf("job %s, want failed", j.Status)
	}
	d, err := cl.DiagnoseJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range d.Steps {
		got = append(got, strings.TrimSpace(s.Kind+" "+s.Status+" "+string(s.Progress)+" "+s.Reason))
	}
	want := []string{
		"claimed running",
		`progress running {"message":"creating volume","op":"create"}`,
		`progress running {"message":"creating droplet","op":"create"}`,
		"finished failed  droplet limit reached",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i, s := range d.Steps {
		if s.Seq != int64(i+1) || s.Attempt != 1 || s.Worker == "" {
			t.Errorf("step %d: %+v", i, s)
		}
	}
}

// TestDiagnoseJobProviderUnavailable: with the DigitalOcean API refusing
// or failing the provision token's listings, the doctor still answers the
// job, its lease, steps, both stacks (locks, pending operations,
// checkpoints) and the recorded ids, marks the provider unavailable with
// its error kind (never the token or a URL) and recommends checking the
// provider (docs/operations.md, "Job doctor").
func TestDiagnoseJobProviderUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		kind   string
	}{
		{"token refused", http.StatusUnauthorized, "token_refused"},
		{"token lacks the scope", http.StatusForbidden, "token_lacks_scope"},
		{"provider failing", http.StatusServiceUnavailable, "provider_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, droplet := newConvergeAPI(t), newFakeDroplet(t)
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: convergeEnv(t, api, droplet), PauseLoops: []string{"jobs"}})
			cl := p.Admin
			newEnv(t, cl, "demo")
			if _, err := cl.CreateBox(context.Background(), validBox("box-1", "demo")); err != nil {
				t.Fatal(err)
			}
			id := enqueueDirect(t, p, "box-1")
			api.Inject(dofake.Fault{Route: dofake.RouteListDroplets, Token: "provision", Status: tc.status})
			d, err := cl.DiagnoseJob(context.Background(), id)
			if err != nil {
				t.Fatalf("diagnose with the provider unavailable: %v", err)
			}
			if !d.Provider.Unavailable || d.Provider.ErrorKind != tc.kind || d.Provider.Tag != "chalupa:box:box-1" {
				t.Fatalf("provider %+v, want unavailable %s", d.Provider, tc.kind)
			}
			if d.Job.ID != id || d.Job.Status != storage.JobQueued || d.Lease.MaxAttempts != jobs.MaxAttempts || !d.Lease.LanePaused {
				t.Fatalf("job or lease missing: %+v %+v", d.Job, d.Lease)
			}
			if len(d.Stacks) != 2 || d.Stacks[0].Role != "data" || d.Stacks[1].Role != "compute" || d.Stacks[0].Locks == nil || d.Stacks[1].Pending == nil {
				t.Fatalf("stacks missing: %+v", d.Stacks)
			}
			// A queued job in a paused lane: the lane decides, provider or not.
			if d.Recommendation.Action != adminapi.DoctorResumeLane {
				t.Fatalf("recommendation %+v, want resume-lane", d.Recommendation)
			}
			body, _ := json.Marshal(d)
			if strings.Contains(string(body), convergeToken) || strings.Contains(string(body), api.URL) {
				t.Fatalf("the diagnosis carries the token or the API's URL: %s", body)
			}
		})
	}
}

// TestDiagnoseJobStackUnreadable: with the Pulumi state backend's
// directory unusable or a stack's state file corrupt, the real pulumi CLI
// fails to read the stack, and the doctor still answers the job, its
// lease, steps, the other stack, every stack's checkpoint and the
// provider, marks each unread stack unavailable with its error kind (never
// a path or the CLI's text) and logs the reason (docs/operations.md, "Job
// doctor").
func TestDiagnoseJobStackUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name string
		// backend prepares the file:// backend's path and returns it.
		backend func(t *testing.T) string
		kind    []string // each stack's error kind, data then compute ("": read)
		action  string   // the recommendation for the failed job
	}{
		{"backend not a directory", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(p, []byte("not a directory\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, []string{pulumiexec.StackBackendUnreadable, pulumiexec.StackBackendUnreadable}, adminapi.DoctorCheckState},
		{"state file corrupt", func(t *testing.T) string {
			p := t.TempDir()
			stacks := filepath.Join(p, ".pulumi", "stacks", "chalupa")
			if err := os.MkdirAll(stacks, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, body := range map[string]string{
				filepath.Join(p, ".pulumi", "meta.yaml"): "version: 1\n",
				filepath.Join(stacks, "box-1-data.json"): "{\"version\":3,\"checkpoint\": not json",
			} {
				if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return p
		}, []string{pulumiexec.StackStateCorrupt, ""}, adminapi.DoctorCheckState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, droplet := newConvergeAPI(t), newFakeDroplet(t)
			env := convergeEnv(t, api, droplet)
			backend := tc.backend(t)
			env["PULUMI_BACKEND_URL"] = "file://" + backend
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: env, PauseLoops: []string{"jobs"}})
			cl := p.Admin
			newEnv(t, cl, "demo")
			if _, err := cl.CreateBox(context.Background(), validBox("box-1", "demo")); err != nil {
				t.Fatal(err)
			}
			id := enqueueDirect(t, p, "box-1")
			// A checkpoint of the data stack, and the job failed: the
			// database's part of the answer.
			err := p.App.DB.Writer.Do(t.Context(), func(tx storage.Tx) error {
				b, err := storage.BoxByRef(t.Context(), tx, "box-1")
				if err != nil {
					return err
				}
				var org int64
				if err := tx.QueryRowContext(t.Context(), `SELECT org_id FROM environments WHERE id = ?`, b.EnvironmentID).Scan(&org); err != nil {
					return err
				}
				exp := []byte(`{"version":3,"deployment":{}}`)
				if _, err := storage.InsertStackState(t.Context(), tx, storage.StackState{OrganizationID: org, EnvironmentID: b.EnvironmentID,
					Stack: "box-1-data", Export: exp, SHA256: make([]byte, 32), SizeBytes: int64(len(exp))}, p.App.Clock.Now()); err != nil {
					return err
				}
				_, err = tx.ExecContext(t.Context(), `UPDATE jobs SET status = 'failed', error = 'droplet limit reached' WHERE id = ?`, id)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			d, err := cl.DiagnoseJob(context.Background(), id)
			if err != nil {
				t.Fatalf("diagnose with a stack unreadable: %v", err)
			}
			if d.Job.ID != id || d.Job.Status != storage.JobFailed || d.Lease.MaxAttempts != jobs.MaxAttempts || !d.Lease.LanePaused {
				t.Fatalf("job or lease missing: %+v %+v", d.Job, d.Lease)
			}
			if d.Provider.Unavailable || d.Provider.Tag != "chalupa:box:box-1" || d.Provider.Droplets == nil {
				t.Fatalf("provider %+v, want read", d.Provider)
			}
			if len(d.Stacks) != 2 || d.Stacks[0].Role != "data" || d.Stacks[1].Role != "compute" {
				t.Fatalf("stacks missing: %+v", d.Stacks)
			}
			for i, s := range d.Stacks {
				if s.Unavailable != (tc.kind[i] != "") || s.ErrorKind != tc.kind[i] || s.Locks == nil || s.Pending == nil {
					t.Errorf("stack %s: unavailable %v kind %q (locks %v, pending %v), want kind %q", s.Stack, s.Unavailable, s.ErrorKind, s.Locks, s.Pending, tc.kind[i])
				}
			}
			if d.Stacks[0].CheckpointVersion != 1 {
				t.Errorf("data stack checkpoint v%d, want v1 (the database's, read whatever the backend says)", d.Stacks[0].CheckpointVersion)
			}
			if d.Recommendation.Action != tc.action || !slices.Contains(d.Recommendation.Commands, "chalupa admin job doctor "+id) {
				t.Errorf("recommendation %+v, want %s", d.Recommendation, tc.action)
			}
			body, _ := json.Marshal(d)
			for _, secret := range []string{backend, "file://", "checkpoint:", "not a directory", "failed to load", convergeToken, api.URL} {
				if strings.Contains(string(body), secret) {
					t.Errorf("the diagnosis carries %q: %s", secret, body)
				}
			}
			if !strings.Contains(p.Logs.String(), "job doctor: the stack could not be read") {
				t.Errorf("the reason was not logged:\n%s", p.Logs.String())
			}
		})
	}
}
