package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/jobs/jobstest"
)

func declareBoxes(t *testing.T, cl *adminapi.Client, env string, names ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: env}); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := cl.CreateBox(ctx, adminapi.CreateBoxRequest{Name: n, Environment: env, BoxConfig: adminapi.BoxConfig{
			Region: "nyc3", Size: "s-2vcpu-4gb", Image: "ubuntu-24-04-x64",
			SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
			CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32"}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConvergeWaitFollowsProgress: --wait's loop prints the job's progress
// reports and status changes until the job ends, and returns the ended job.
func TestConvergeWaitFollowsProgress(t *testing.T) {
	exec := &jobstest.Executor{Gate: make(chan struct{}),
		Progress: []jobs.Progress{{Message: "creating", Op: "create", Resource: "droplet", Counts: map[string]int{"create": 1}}}}
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: exec, StartLoops: true})
	cl := p.Admin
	declareBoxes(t, cl, "demo", "gpu-1")
	job, err := cl.RunPulumiConverge(context.Background(), adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "gpu-1"}, Action: "up"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan adminapi.Job, 1)
	errc := make(chan error, 1)
	go func() {
		j, err := waitJob(context.Background(), cl, job.ID, 10*time.Second, time.Millisecond, &out)
		errc <- err
		done <- j
	}()
	// Let the wait see the job running before it may end.
	testwait.Eventually(t, testwait.Short, "the job running with its first progress report", func() (bool, string) {
		j, err := cl.GetJob(context.Background(), job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j.Status == "running" && j.ProgressSeq == 1, fmt.Sprintf("%+v", j)
	})
	exec.Gate <- struct{}{}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ended := <-done
	if ended.Status != "succeeded" {
		t.Fatalf("ended %+v", ended)
	}
	text := out.String()
	for _, want := range []string{"creating · create droplet · (create 1)", "succeeded (attempt 1)"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

// TestReroll: one job per box in order, each waited for; the first failure
// stops the reroll (the rest are listed skipped) unless keepGoing.
func TestReroll(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepGoing bool
		want      []string // status per box bx-a, bx-b, bx-c
		runs      []string
	}{
		{"stops at the first failure", false, []string{"succeeded", "failed", "skipped"}, []string{"execute:bx-a", "execute:bx-b"}},
		{"keep going", true, []string{"succeeded", "failed", "succeeded"}, []string{"execute:bx-a", "execute:bx-b", "execute:bx-c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exec := &jobstest.Executor{Fail: map[string]error{"bx-b": errors.New("provider refused the size")}}
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: exec, StartLoops: true})
			declareBoxes(t, p.Admin, "demo", "bx-c", "bx-a", "bx-b")
			declareBoxes(t, p.Admin, "other", "bx-z")
			var progress bytes.Buffer
			rows, err := reroll(context.Background(), p.Admin, "demo", "up", tc.keepGoing, 10*time.Second, time.Millisecond, &progress)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 {
				t.Fatalf("rows %+v", rows)
			}
			for i, r := range rows {
				if r.Box != "bx-"+string(rune('a'+i)) || r.Status != tc.want[i] {
					t.Fatalf("row %d %+v, want %s %s", i, r, string(rune('a'+i)), tc.want[i])
				}
			}
			if rows[1].Error != "provider refused the size" {
				t.Fatalf("failure reason %q", rows[1].Error)
			}
			if got := exec.Calls(); strings.Join(got, ",") != strings.Join(tc.runs, ",") {
				t.Fatalf("runs %v, want %v", got, tc.runs)
			}
			var sum bytes.Buffer
			if err := printReroll(&sum, rows); err != nil || !strings.Contains(sum.String(), "BOX") || !strings.Contains(sum.String(), rows[0].JobID) {
				t.Fatalf("summary:\n%s", sum.String())
			}
		})
	}
	t.Run("a busy box is refused with its live job", func(t *testing.T) {
		exec := &jobstest.Executor{Gate: make(chan struct{})}
		p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: exec, StartLoops: true})
		declareBoxes(t, p.Admin, "demo", "bx-a")
		live, err := p.Admin.RunPulumiConverge(context.Background(), adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "bx-a"}, Action: "up"})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := reroll(context.Background(), p.Admin, "", "up", false, 10*time.Second, time.Millisecond, &bytes.Buffer{})
		close(exec.Gate)
		if err != nil || len(rows) != 1 || rows[0].Status != "refused" || rows[0].JobID != live.ID {
			t.Fatalf("rows %+v, err %v", rows, err)
		}
	})
}

// TestConvergeIncludeDataFlag: `admin converge BOX destroy --include-data`
// sends includeData with the typed phrase (from --confirm); without a
// terminal and without --confirm, on another action, or --confirm without
// --include-data, it exits 2 and calls nothing; a plain destroy never
// sends includeData; the queued line says whether the data goes too
// (docs/operations.md, "Jobs").
func TestConvergeIncludeDataFlag(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		code        int
		includeData any
		phrase      any
		printed     string // what the queued line says the job does
	}{
		{"destroy with the data and its phrase", []string{"destroy", "--include-data", "--confirm", "destroy data gpu-1"}, 0, true, "destroy data gpu-1", ": destroy with data gpu-1 "},
		{"a plain destroy", []string{"destroy"}, 0, nil, nil, ": destroy gpu-1 "},
		{"no phrase without a terminal", []string{"destroy", "--include-data"}, ExitUsage, nil, nil, ""},
		{"include data on an up", []string{"up", "--include-data", "--confirm", "destroy data gpu-1"}, ExitUsage, nil, nil, ""},
		{"the data phrase without --include-data", []string{"destroy", "--confirm", "destroy data gpu-1"}, ExitUsage, nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t)
			out, code := cliRun(t, f.URL, nil, append([]string{"admin", "converge", "gpu-1"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			reqs := f.requests()
			if tc.code != 0 {
				if len(reqs) != 0 {
					t.Fatalf("a refused command called the daemon: %+v", reqs)
				}
				return
			}
			if len(reqs) != 1 || reqs[0].Path != "/admin-api/pulumi-state/converge" {
				t.Fatalf("requests %+v", reqs)
			}
			if got := reqs[0].Body["includeData"]; got != tc.includeData {
				t.Errorf("includeData = %v, want %v", got, tc.includeData)
			}
			if got := reqs[0].Body["confirmation"]; got != tc.phrase {
				t.Errorf("confirmation = %v, want %v", got, tc.phrase)
			}
			if !strings.Contains(out, tc.printed) {
				t.Errorf("the output does not say %q:\n%s", tc.printed, out)
			}
		})
	}
}

// TestPrintDiagnosisSteps: the doctor's table shows the step journal, one
// line per step: a progress step's report and a release's reason
// (docs/operations.md, "Job doctor").
func TestPrintDiagnosisSteps(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := adminapi.JobDiagnosis{Job: adminapi.Job{ID: "J1", Box: "box-1", Action: "up", Status: "queued", Attempts: 1},
		Steps: []adminapi.JobStep{
			{Seq: 1, At: at, Kind: "claimed", Status: "running", Attempt: 1, Worker: "W1"},
			{Seq: 2, At: at.Add(time.Second), Kind: "progress", Status: "running", Attempt: 1, Worker: "W1", Progress: []byte(`{"message":"creating droplet"}`)},
			{Seq: 3, At: at.Add(time.Minute), Kind: "released", Status: "queued", Attempt: 1, Worker: "W1", Reason: "worker lost"},
		}}
	var b bytes.Buffer
	if err := printDiagnosis(&b, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"STEP", "creating droplet", "released", "worker lost", "2026-12-01T12:01:00Z"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// TestPrintDiagnosisFailedRun: a failed run's error is printed once, its
// raw output (the finish step's detail) is summarised, not repeated, and
// an unreadable provider is marked with its kind instead of showing
// nothing (docs/operations.md, "Job doctor").
func TestPrintDiagnosisFailedRun(t *testing.T) {
	diag := "the DigitalOcean provider plugin 4.62.0 is not installed"
	raw := "failed to run update: exit status 1\ncode: 1\nstdout: Updating (box-1-data):\n" + diag
	d := adminapi.JobDiagnosis{Job: adminapi.Job{ID: "J1", Box: "box-1", Action: "up", Status: "failed", Attempts: 1, Error: diag},
		Steps:    []adminapi.JobStep{{Seq: 1, Kind: "finished", Status: "failed", Attempt: 1, Worker: "W1", Reason: raw}},
		Provider: adminapi.ProviderInventory{Tag: "chalupa:box:box-1", Unavailable: true, ErrorKind: "token_refused"}}
	var b bytes.Buffer
	if err := printDiagnosis(&b, d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Count(out, diag) != 1 || strings.Contains(out, "exit status 1") {
		t.Errorf("the error is not printed exactly once, or the raw output is repeated:\n%s", out)
	}
	for _, want := range []string{"the run's output, 4 lines", "chalupa:box:box-1: unavailable, token_refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestPrintDiagnosisStackUnavailable: a stack the doctor could not read is
// marked unavailable with its kind, its lock and pending operations and
// the state column are "?" (unknown), not "none" or "-", and its
// checkpoint still shows (docs/operations.md, "Job doctor").
func TestPrintDiagnosisStackUnavailable(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := adminapi.JobDiagnosis{Job: adminapi.Job{ID: "J1", Box: "box-1", Action: "up", Status: "failed", Attempts: 1},
		Stacks: []adminapi.StackDiagnosis{
			{Stack: "box-1-data", Role: "data", Unavailable: true, ErrorKind: "state_corrupt", Locks: []adminapi.StackLockInfo{},
				LocksUnknown: true, Pending: []adminapi.PendingOperation{}, CheckpointVersion: 3, CheckpointAt: at},
			{Stack: "box-1-compute", Role: "compute", Exists: true, Locks: []adminapi.StackLockInfo{}, Pending: []adminapi.PendingOperation{}},
		},
		Provider: adminapi.ProviderInventory{Tag: "chalupa:box:box-1", Droplets: []adminapi.ProviderResource{}}}
	var b bytes.Buffer
	if err := printDiagnosis(&b, d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"STACK STATE (box-1-data: unavailable, state_corrupt)", "droplet   -            ?",
		"box-1-data     unavailable, state_corrupt  ?     ?        v3 at 2026-12-01T12:00:00Z", "box-1-compute  true                        none  none     none"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestRerollUpgradeAgent: reroll's upgrade-agent starts a rollout in the
// daemon and follows it to its end: boxes without the agent or without a
// droplet are listed skipped with their reasons and the command exits 0;
// --keep-going is refused (exit 2, nothing started) since a rollout
// always stops at the first failure; a rollout that stopped exits 1 with
// its failed and not-tried boxes listed (docs/operations.md, "Agent
// install", under Upgrade).
func TestRerollUpgradeAgent(t *testing.T) {
	t.Run("boxes without the agent or a droplet are skipped", func(t *testing.T) {
		p := daemontest.NewInProcess(t, daemontest.AppOptions{})
		declareBoxes(t, p.Admin, "demo", "bx-a")
		off := false
		if _, err := p.Admin.CreateBox(context.Background(), adminapi.CreateBoxRequest{Name: "bx-b", Environment: "demo", Agent: &off,
			BoxConfig: adminapi.BoxConfig{Region: "nyc3", Size: "s-2vcpu-4gb", Image: "ubuntu-24-04-x64",
				SSHKeyFingerprints: []string{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"},
				CustomerSource:     "203.0.113.7/32", ControlPlaneSource: "198.51.100.9/32"}}); err != nil {
			t.Fatal(err)
		}
		r, err := followRollout(context.Background(), p.Admin, adminapi.StartAgentRolloutRequest{Environment: "demo", Batch: 5}, 10*time.Second, time.Millisecond, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Summary
		if r.Status != "succeeded" || len(s.Skipped) != 2 || !strings.Contains(s.Skipped[0].Reason, "no running droplet") ||
			!strings.Contains(s.Skipped[1].Reason, "does not carry the agent") || len(s.Failed)+len(s.NotTried)+len(s.Upgraded) != 0 {
			t.Fatalf("rollout %+v, want both skipped with their reasons", r)
		}
		// Nothing failed: the command exits 0 and lists them.
		out, code := runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}, "",
			"admin", "reroll", "--env", "demo", "--action", "upgrade-agent")
		if code != 0 || !strings.Contains(out, "skipped") || !strings.Contains(out, "succeeded") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		// admin jobs lists the rollouts.
		out, code = runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}, "", "admin", "jobs")
		if code != 0 || !strings.Contains(out, "ROLLOUT") || strings.Count(out, r.ID) != 1 {
			t.Fatalf("admin jobs: exit %d:\n%s", code, out)
		}
		out, code = runIn(map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}, "", "admin", "rollout", "show", r.ID)
		if code != 0 || !strings.Contains(out, "bx-b") || !strings.Contains(out, "does not carry the agent") {
			t.Fatalf("admin rollout show: exit %d:\n%s", code, out)
		}
	})
	t.Run("keep-going is refused", func(t *testing.T) {
		var calls atomic.Int64
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); http.NotFound(w, r) }))
		t.Cleanup(ts.Close)
		_, code := cliRun(t, ts.URL, nil, "admin", "reroll", "--all", "--action", "upgrade-agent", "--keep-going")
		if code != 2 || calls.Load() != 0 {
			t.Fatalf("exit %d after %d calls, want 2 and none", code, calls.Load())
		}
	})
	t.Run("a server without rollouts", func(t *testing.T) {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no such route"}}`))
		}))
		t.Cleanup(ts.Close)
		out, code := cliRun(t, ts.URL, nil, "admin", "reroll", "--all", "--action", "upgrade-agent")
		if code != 1 || !strings.Contains(out, "box upgrade-agent") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("a stopped rollout exits 1", func(t *testing.T) {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(adminapi.AgentRollout{ID: "R1", Version: "v1.1.0", Batch: 5, Status: "failed", Error: "stopped at the first box whose upgrade failed",
				Summary: adminapi.AgentRolloutSummary{Failed: []adminapi.AgentUpgradeOutcome{{Box: "bx-a", Status: "failed", Reason: "crashed", Restore: "reported",
					Detail: "crashed: its unit was failed"}}, NotTried: []string{"bx-b", "bx-c"}}})
		}))
		t.Cleanup(ts.Close)
		out, code := cliRun(t, ts.URL, nil, "admin", "reroll", "--all", "--action", "upgrade-agent")
		for _, want := range []string{"bx-a: failed (crashed; previous agent: reported)", "bx-b", "not tried", "bx-c"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if code != 1 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

// TestUpgradeAgentCallBound: `box upgrade-agent` gives its call at least
// adminapi.UpgradeBoxAgentCallBound whatever --timeout says, since the
// daemon's own SSH wait (1 min plus an attempt) and the report bound
// outlast the default 60 s: with a shorter bound the operator saw
// "context deadline exceeded" for an unreachable droplet, and the upgrade
// was cancelled (docs/operations.md, "Agent install", under Upgrade).
func TestUpgradeAgentCallBound(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/agent-upgrade"):
			_ = json.NewEncoder(w).Encode(adminapi.BoxAgentUpgrade{Box: "bx-a", DropletID: 7, Before: "v1", After: "v2"})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	out, code := cliRun(t, ts.URL, nil, "admin", "box", "upgrade-agent", "bx-a", "--timeout", "1ns")
	if code != 0 || !strings.Contains(out, "v1 -> v2") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
