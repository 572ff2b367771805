package daemon_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/jobs/jobstest"
	"github.com/chalupa-run/chalupa/storage"
)

// failingInspector is a converge executor whose stack and provider reads
// fail with an error naming a path and a token, as an engine error may.
type failingInspector struct{ jobstest.Executor }

const inspectorSecret = "/var/lib/chalupa/pulumi/.pulumi/locks dop_v1_secrettoken"

func (*failingInspector) Inspect(context.Context, storage.Box) (daemon.BoxInspection, error) {
	return daemon.BoxInspection{}, errors.New("reading " + inspectorSecret)
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
		{"stack or provider read fails", &failingInspector{Executor: jobstest.Executor{Gate: make(chan struct{})}}, "", http.StatusBadGateway, "doctor_failed"},
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

func (*agreeingInspector) Inspect(context.Context, storage.Box) (daemon.BoxInspection, error) {
	return daemon.BoxInspection{}, nil
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
