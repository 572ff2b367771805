package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/jobs/jobstest"
)

// answer is a call's status, error code and error body's jobId.
type answer struct {
	status      int
	code, jobID string
	body        []byte
}

func callOp(t *testing.T, cl *adminapi.Client, id string, params adminapi.Params, body any) answer {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cl.Call(context.Background(), id, params, raw)
	var ae *adminapi.APIError
	if errors.As(err, &ae) {
		return answer{status: ae.Status, code: ae.Code, jobID: ae.JobID}
	}
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	op, _ := adminapi.Lookup(id)
	return answer{status: op.Status, body: out}
}

func validBox(name, env string) adminapi.CreateBoxRequest {
	return adminapi.CreateBoxRequest{Name: name, Environment: env, BoxConfig: adminapi.BoxConfig{
		Region: "nyc3", Size: "s-2vcpu-4gb", Image: "ubuntu-24-04-x64",
		SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
		CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32", VolumeSizeGiB: 20, Tags: []string{"team:ml"}}}
}

func newEnv(t testing.TB, cl *adminapi.Client, slug string) {
	t.Helper()
	if _, err := cl.CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: slug}); err != nil {
		t.Fatal(err)
	}
}

func TestBoxesCreateUpdateShow(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	cl, ctx := p.Admin, context.Background()
	newEnv(t, cl, "demo")
	refused := []struct {
		name   string
		mutate func(*adminapi.CreateBoxRequest)
	}{
		{"bad name", func(r *adminapi.CreateBoxRequest) { r.Name = "Box_1" }},
		{"bad region", func(r *adminapi.CreateBoxRequest) { r.Region = "new-york" }},
		{"bad size", func(r *adminapi.CreateBoxRequest) { r.Size = "S 2" }},
		{"bad image", func(r *adminapi.CreateBoxRequest) { r.Image = "" }},
		{"no ssh key", func(r *adminapi.CreateBoxRequest) { r.SSHKeyFingerprints = nil }},
		{"bad ssh key", func(r *adminapi.CreateBoxRequest) { r.SSHKeyFingerprints = []string{"SHA256:abc"} }},
		{"duplicate ssh key", func(r *adminapi.CreateBoxRequest) {
			r.SSHKeyFingerprints = append(r.SSHKeyFingerprints, r.SSHKeyFingerprints[0])
		}},
		{"missing customer source", func(r *adminapi.CreateBoxRequest) { r.CustomerSource = "" }},
		{"missing control plane source", func(r *adminapi.CreateBoxRequest) { r.ControlPlaneSource = "" }},
		{"customer source not a /32", func(r *adminapi.CreateBoxRequest) { r.CustomerSource = "203.0.113.0/24" }},
		{"customer source without prefix", func(r *adminapi.CreateBoxRequest) { r.CustomerSource = "203.0.113.7" }},
		{"control plane source IPv6", func(r *adminapi.CreateBoxRequest) { r.ControlPlaneSource = "2001:db8::1/128" }},
		{"source open to the world", func(r *adminapi.CreateBoxRequest) { r.CustomerSource = "0.0.0.0/32" }},
		{"loopback source", func(r *adminapi.CreateBoxRequest) { r.ControlPlaneSource = "127.0.0.1/32" }},
		{"negative volume", func(r *adminapi.CreateBoxRequest) { r.VolumeSizeGiB = -1 }},
		{"huge volume", func(r *adminapi.CreateBoxRequest) { r.VolumeSizeGiB = 16385 }},
		{"reserved tag", func(r *adminapi.CreateBoxRequest) { r.Tags = []string{"chalupa:env:other"} }},
		{"bad tag", func(r *adminapi.CreateBoxRequest) { r.Tags = []string{"a b"} }},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			req := validBox("gpu-1", "demo")
			tc.mutate(&req)
			if a := callOp(t, cl, adminapi.OpCreateBox, nil, req); a.status != http.StatusUnprocessableEntity || a.code != "invalid_box" {
				t.Fatalf("got %d %s, want 422 invalid_box", a.status, a.code)
			}
			if l, err := cl.ListBoxes(ctx, adminapi.ListBoxesRequest{}); err != nil || len(l.Boxes) != 0 {
				t.Fatalf("a refused create wrote: %v %v", l, err)
			}
		})
	}
	box, err := cl.CreateBox(ctx, validBox("gpu-1", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	if box.ConfigVersion != 1 || box.LastLaunch != nil || box.Environment != "demo" || box.CustomerSource != "203.0.113.7/32" {
		t.Fatalf("created %+v", box)
	}
	t.Run("duplicate name", func(t *testing.T) {
		if a := callOp(t, cl, adminapi.OpCreateBox, nil, validBox("gpu-1", "demo")); a.status != http.StatusConflict || a.code != "box_exists" {
			t.Fatalf("got %d %s", a.status, a.code)
		}
	})
	t.Run("unknown environment", func(t *testing.T) {
		if a := callOp(t, cl, adminapi.OpCreateBox, nil, validBox("gpu-2", "nope")); a.status != http.StatusNotFound || a.code != "environment_not_found" {
			t.Fatalf("got %d %s", a.status, a.code)
		}
	})
	t.Run("update replaces the fields given", func(t *testing.T) {
		size, managed := "gpu-h100x1-80gb", true
		up, err := cl.UpdateBox(ctx, adminapi.UpdateBoxRequest{Box: "gpu-1", Size: &size, Managed: &managed})
		if err != nil {
			t.Fatal(err)
		}
		if up.ConfigVersion != 2 || up.Size != size || !up.Managed || up.Region != "nyc3" || len(up.Tags) != 1 {
			t.Fatalf("updated %+v", up)
		}
		bad := "10.0.0.0/8"
		if a := callOp(t, cl, adminapi.OpUpdateBox, adminapi.Params{"box": box.ID}, adminapi.UpdateBoxRequest{CustomerSource: &bad}); a.status != http.StatusUnprocessableEntity {
			t.Fatalf("invalid update: %d %s", a.status, a.code)
		}
		if got, _ := cl.GetBox(ctx, box.ID); got.ConfigVersion != 2 || got.CustomerSource != "203.0.113.7/32" {
			t.Fatalf("a refused update wrote: %+v", got)
		}
		if a := callOp(t, cl, adminapi.OpUpdateBox, adminapi.Params{"box": "nope"}, adminapi.UpdateBoxRequest{Size: &size}); a.status != http.StatusNotFound {
			t.Fatalf("unknown box: %d", a.status)
		}
	})
	t.Run("an update that changes nothing writes nothing", func(t *testing.T) {
		// Update is idempotent (docs/operations.md, "Boxes"): the same
		// body again, or an empty one, leaves the version where it is.
		size, managed, tags := "gpu-h100x1-80gb", true, []string{}
		cur, _ := cl.GetBox(ctx, "gpu-1")
		tags = append(tags, cur.Tags...)
		for _, req := range []adminapi.UpdateBoxRequest{
			{Box: "gpu-1"},
			{Box: "gpu-1", Size: &size, Managed: &managed},
			{Box: "gpu-1", Tags: &tags},
		} {
			up, err := cl.UpdateBox(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if up.ConfigVersion != cur.ConfigVersion || !up.ConfigUpdatedAt.Equal(cur.ConfigUpdatedAt) {
				t.Fatalf("version %d updated %v after a no-op update; was %d %v", up.ConfigVersion, up.ConfigUpdatedAt, cur.ConfigVersion, cur.ConfigUpdatedAt)
			}
		}
	})
	t.Run("show by name or id, list by environment", func(t *testing.T) {
		byName, err := cl.GetBox(ctx, "gpu-1")
		if err != nil || byName.ID != box.ID {
			t.Fatalf("%+v %v", byName, err)
		}
		if a := callOp(t, cl, adminapi.OpGetBox, adminapi.Params{"box": "nope"}, nil); a.status != http.StatusNotFound || a.code != "not_found" {
			t.Fatalf("unknown: %d %s", a.status, a.code)
		}
		newEnv(t, cl, "other")
		if _, err := cl.CreateBox(ctx, validBox("cpu-1", "other")); err != nil {
			t.Fatal(err)
		}
		if l, _ := cl.ListBoxes(ctx, adminapi.ListBoxesRequest{Environment: "other"}); len(l.Boxes) != 1 || l.Boxes[0].Name != "cpu-1" {
			t.Fatalf("list other: %+v", l)
		}
	})
}

func TestConvergeWithoutExecutorIsRefused(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	cl := p.Admin
	newEnv(t, cl, "demo")
	if _, err := cl.CreateBox(context.Background(), validBox("gpu-1", "demo")); err != nil {
		t.Fatal(err)
	}
	for id, body := range map[string]string{
		adminapi.OpRunPulumiConverge: `{"scope":{"kind":"box","id":"gpu-1"},"action":"up"}`,
		adminapi.OpCancelPulumiState: `{"scope":{"kind":"box","id":"gpu-1"}}`,
	} {
		if a := callOp(t, cl, id, nil, body); a.status != http.StatusServiceUnavailable || a.code != adminapi.CodeConvergeNotConfigured {
			t.Fatalf("%s: %d %s", id, a.status, a.code)
		}
	}
	_, err := cl.RunPulumiConverge(context.Background(), adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "gpu-1"}, Action: "up"})
	if err == nil || !strings.Contains(err.Error(), "DIGITALOCEAN_PROVISION_TOKEN") {
		t.Fatalf("the error must name the variable: %v", err)
	}
	if l, _ := cl.ListJobs(context.Background(), adminapi.ListJobsRequest{}); len(l.Jobs) != 0 || l.Configured {
		t.Fatalf("enqueued anyway: %+v", l)
	}
}

func TestConvergeAnswers(t *testing.T) {
	exec := &jobstest.Executor{Gate: make(chan struct{})}
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: exec, StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	newEnv(t, cl, "demo")
	box, err := cl.CreateBox(ctx, validBox("gpu-1", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"missing action", `{"scope":{"kind":"box","id":"gpu-1"}}`, http.StatusBadRequest, "missing_action"},
		{"unknown action", `{"scope":{"kind":"box","id":"gpu-1"},"action":"apply"}`, http.StatusUnprocessableEntity, "unknown_action"},
		{"unknown scope kind", `{"scope":{"kind":"stack","id":"gpu-1"},"action":"up"}`, http.StatusUnprocessableEntity, "unknown_scope"},
		{"unknown box", `{"scope":{"kind":"box","id":"nope"},"action":"up"}`, http.StatusNotFound, "not_found"},
		{"unknown field", `{"scope":{"kind":"box","id":"gpu-1"},"action":"up","force":true}`, http.StatusBadRequest, "bad_body"},
		{"includeData without the phrase", `{"scope":{"kind":"box","id":"gpu-1"},"action":"destroy","includeData":true}`, http.StatusUnprocessableEntity, "confirmation_mismatch"},
		{"includeData with the compute phrase", `{"scope":{"kind":"box","id":"gpu-1"},"action":"destroy","includeData":true,"confirmation":"destroy gpu-1"}`, http.StatusUnprocessableEntity, "confirmation_mismatch"},
		{"includeData on an up", `{"scope":{"kind":"box","id":"gpu-1"},"action":"up","includeData":true,"confirmation":"destroy data gpu-1"}`, http.StatusUnprocessableEntity, "include_data_not_destroy"},
		{"includeData on an unknown box", `{"scope":{"kind":"box","id":"nope"},"action":"destroy","includeData":true,"confirmation":"destroy data nope"}`, http.StatusNotFound, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a := callOp(t, cl, adminapi.OpRunPulumiConverge, nil, tc.body); a.status != tc.status || a.code != tc.code {
				t.Fatalf("got %d %s, want %d %s", a.status, a.code, tc.status, tc.code)
			}
			if l, _ := cl.ListJobs(ctx, adminapi.ListJobsRequest{}); len(l.Jobs) != 0 {
				t.Fatalf("a refused request enqueued %d job(s)", len(l.Jobs))
			}
		})
	}
	first := callOp(t, cl, adminapi.OpRunPulumiConverge, nil, `{"scope":{"kind":"box","id":"`+box.ID+`"},"action":"up"}`)
	if first.status != http.StatusAccepted {
		t.Fatalf("converge: %d %s", first.status, first.code)
	}
	var job adminapi.Job
	if err := json.Unmarshal(first.body, &job); err != nil || job.ID == "" || job.Box != "gpu-1" {
		t.Fatalf("job %s: %v", first.body, err)
	}
	t.Run("busy scope: 409 with the live job's id", func(t *testing.T) {
		a := callOp(t, cl, adminapi.OpRunPulumiConverge, nil, `{"scope":{"kind":"box","id":"gpu-1"},"action":"preview"}`)
		if a.status != http.StatusConflict || a.code != adminapi.CodeJobInProgress || a.jobID != job.ID {
			t.Fatalf("got %d %s %q, want 409 with %s", a.status, a.code, a.jobID, job.ID)
		}
	})
	t.Run("cancel refused while the job is alive", func(t *testing.T) {
		a := callOp(t, cl, adminapi.OpCancelPulumiState, nil, `{"scope":{"kind":"box","id":"gpu-1"}}`)
		if a.status != http.StatusConflict || a.jobID != job.ID {
			t.Fatalf("got %d %s %q", a.status, a.code, a.jobID)
		}
		for _, c := range exec.Calls() {
			if strings.HasPrefix(c, "cancel:") {
				t.Fatalf("the lock was cancelled under a live job: %v", exec.Calls())
			}
		}
	})
	exec.Gate <- struct{}{}
	done := waitJobDone(t, cl, job.ID)
	if done.Status != "succeeded" {
		t.Fatalf("job %+v", done)
	}
	t.Run("cancel once the scope is idle", func(t *testing.T) {
		st, err := cl.CancelPulumiState(ctx, adminapi.CancelStateRequest{Scope: adminapi.Scope{Kind: "box", ID: "gpu-1"}})
		if err != nil || st.Box != "gpu-1" {
			t.Fatalf("%+v %v", st, err)
		}
		calls := exec.Calls()
		if calls[len(calls)-1] != "cancel:gpu-1" {
			t.Fatalf("calls %v", calls)
		}
	})
	t.Run("show carries the launch result", func(t *testing.T) {
		b, err := cl.GetBox(ctx, "gpu-1")
		if err != nil || b.LastLaunch == nil || b.LastLaunch.JobID != job.ID || b.LastLaunch.DropletID == 0 || b.Resources.DropletID != b.LastLaunch.DropletID {
			t.Fatalf("%+v %v", b, err)
		}
	})
	t.Run("list and get", func(t *testing.T) {
		l, err := cl.ListJobs(ctx, adminapi.ListJobsRequest{Box: "gpu-1"})
		if err != nil || len(l.Jobs) != 1 || !l.Configured || len(l.Workers) != 1 || l.Workers[0].CurrentJobID != "" {
			t.Fatalf("%+v %v", l, err)
		}
		if a := callOp(t, cl, adminapi.OpGetJob, adminapi.Params{"id": "nope"}, nil); a.status != http.StatusNotFound {
			t.Fatalf("unknown job: %d", a.status)
		}
		if a := callOp(t, cl, adminapi.OpListJobs, adminapi.Params{"status": "done"}, nil); a.status != http.StatusUnprocessableEntity {
			t.Fatalf("bad status: %d", a.status)
		}
	})
}

func waitJobDone(t *testing.T, cl *adminapi.Client, id string) adminapi.Job {
	t.Helper()
	var j adminapi.Job
	testwait.Eventually(t, testwait.Short, "job "+id+" to end", func() (bool, string) {
		var err error
		if j, err = cl.GetJob(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return j.Done(), j.Status
	})
	return j
}
