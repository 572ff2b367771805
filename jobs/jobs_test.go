package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// fakeExec is a test Executor: it records every call in order and how many
// runs overlapped, and can block a run until it is cancelled and then until
// the test releases it (a run that takes time to stop).
type fakeExec struct {
	mu         sync.Mutex
	calls      []string
	jobs       []jobs.Job // every job Execute was handed, in order
	running    int
	maxRunning int

	// block makes Execute wait for its context to end; it then reports on
	// cancelled and waits for release before returning.
	block     bool
	started   chan string
	cancelled chan string
	release   chan struct{}

	out        jobs.Outcome
	err        error
	recovered  *storage.BoxResources
	recoverErr error
	progress   []jobs.Progress
}

func newFake() *fakeExec {
	return &fakeExec{started: make(chan string, 10), cancelled: make(chan string, 10), release: make(chan struct{}, 10)}
}

func (f *fakeExec) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeExec) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeExec) Execute(ctx context.Context, job jobs.Job, box storage.Box, progress func(jobs.Progress)) (jobs.Outcome, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "execute:"+job.ID)
	f.jobs = append(f.jobs, job)
	f.running++
	if f.running > f.maxRunning {
		f.maxRunning = f.running
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()
	for _, p := range f.progress {
		progress(p)
	}
	f.started <- job.ID
	if f.block {
		<-ctx.Done()
		f.cancelled <- job.ID
		<-f.release
		return jobs.Outcome{}, ctx.Err()
	}
	return f.out, f.err
}

func (f *fakeExec) Recover(ctx context.Context, job jobs.Job, box storage.Box) (*storage.BoxResources, error) {
	f.record("recover:" + job.ID)
	return f.recovered, f.recoverErr
}

func (f *fakeExec) CancelLock(ctx context.Context, box storage.Box) error {
	f.record("cancel:" + box.ID)
	return nil
}

type rig struct {
	db     *storage.DB
	clock  *clockwork.FakeClock
	exec   *fakeExec
	runner *jobs.Runner
	watch  *jobs.Watch
	svc    *jobs.Service
	box    storage.Box
}

func newRig(t *testing.T) *rig {
	t.Helper()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	exec := newFake()
	runner := jobs.NewRunner(jobs.RunnerConfig{DB: db, Clock: clock, Log: zerolog.Nop(), Executor: exec, InstanceID: "instance-now", Version: "test"})
	watch := jobs.NewWatch(db, clock, zerolog.Nop())
	return &rig{db: db, clock: clock, exec: exec, runner: runner, watch: watch,
		svc: jobs.NewService(db, clock, runner, watch), box: storagetest.Box(t, db, storage.Box{})}
}

func (r *rig) job(t *testing.T, id string) storage.Job {
	t.Helper()
	j, err := storage.JobByID(context.Background(), r.db.Read, id)
	if err != nil {
		t.Fatalf("JobByID: %v", err)
	}
	return j
}

func (r *rig) enqueue(t *testing.T, action string) storage.Job {
	t.Helper()
	j, err := r.svc.Enqueue(context.Background(), jobs.ScopeBox, r.box.ID, action)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return j
}

func TestEnqueueRules(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, kind, ref, action string
		want                    error
	}{
		{"missing action", jobs.ScopeBox, r.box.ID, "", jobs.ErrUnknownAction},
		{"unknown action", jobs.ScopeBox, r.box.ID, "apply", jobs.ErrUnknownAction},
		{"unknown scope kind", "droplet", r.box.ID, "up", jobs.ErrUnknownScope},
		{"unknown box", jobs.ScopeBox, "no-such-box", "up", storage.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.svc.Enqueue(ctx, tc.kind, tc.ref, tc.action); !errors.Is(err, tc.want) {
				t.Fatalf("Enqueue = %v, want %v", err, tc.want)
			}
			if js, _ := storage.ListJobs(ctx, r.db.Read, storage.JobFilter{Limit: 10}); len(js) != 0 {
				t.Fatalf("a refused request wrote %d job(s)", len(js))
			}
		})
	}
	for _, tc := range []struct {
		name string
		req  jobs.Request
		want error
	}{
		{"includeData on an up", jobs.Request{ScopeKind: jobs.ScopeBox, Ref: r.box.ID, Action: "up", IncludeData: true,
			Confirmation: "destroy data " + r.box.Name}, jobs.ErrIncludeDataAction},
		{"includeData without the phrase", jobs.Request{ScopeKind: jobs.ScopeBox, Ref: r.box.Name, Action: "destroy", IncludeData: true}, jobs.ErrConfirmData},
		{"includeData with another box's phrase", jobs.Request{ScopeKind: jobs.ScopeBox, Ref: r.box.Name, Action: "destroy", IncludeData: true,
			Confirmation: "destroy data other"}, jobs.ErrConfirmData},
		{"includeData with the compute phrase", jobs.Request{ScopeKind: jobs.ScopeBox, Ref: r.box.Name, Action: "destroy", IncludeData: true,
			Confirmation: "destroy " + r.box.Name}, jobs.ErrConfirmData},
		{"includeData on an unknown box", jobs.Request{ScopeKind: jobs.ScopeBox, Ref: "no-such-box", Action: "destroy", IncludeData: true,
			Confirmation: "destroy data no-such-box"}, storage.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.svc.EnqueueRequest(ctx, tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("EnqueueRequest = %v, want %v", err, tc.want)
			}
			if js, _ := storage.ListJobs(ctx, r.db.Read, storage.JobFilter{Limit: 10}); len(js) != 0 {
				t.Fatalf("a refused request wrote %d job(s)", len(js))
			}
		})
	}
	t.Run("no executor: not configured, nothing enqueued", func(t *testing.T) {
		svc := jobs.NewService(r.db, r.clock, nil, nil)
		if _, err := svc.Enqueue(ctx, jobs.ScopeBox, r.box.Name, "up"); !errors.Is(err, jobs.ErrNotConfigured) {
			t.Fatalf("Enqueue = %v, want ErrNotConfigured", err)
		}
		if js, _ := storage.ListJobs(ctx, r.db.Read, storage.JobFilter{Limit: 10}); len(js) != 0 {
			t.Fatalf("wrote %d job(s)", len(js))
		}
	})
	t.Run("busy scope names the live job", func(t *testing.T) {
		first := r.enqueue(t, "preview")
		_, err := r.svc.Enqueue(ctx, jobs.ScopeBox, r.box.Name, "up")
		var busy *storage.ScopeBusyError
		if !errors.As(err, &busy) || busy.JobID != first.ID || !errors.Is(err, storage.ErrScopeBusy) {
			t.Fatalf("second Enqueue = %v, want ScopeBusyError{%s}", err, first.ID)
		}
		other := storagetest.Box(t, r.db, storage.Box{})
		if _, err := r.svc.Enqueue(ctx, jobs.ScopeBox, other.ID, "up"); err != nil {
			t.Fatalf("another scope is not busy: %v", err)
		}
	})
}

// runTick runs one runner tick in the background.
func runTick(r *rig) chan jobs.TickResult {
	out := make(chan jobs.TickResult, 1)
	go func() {
		res, err := r.runner.Tick(context.Background())
		if err != nil {
			res.Ran = &jobs.Ran{Status: "tick error: " + err.Error()}
		}
		out <- res
	}()
	return out
}

func TestLeaseExpiryRequeuesThenWorkerLost(t *testing.T) {
	r := newRig(t)
	r.exec.block = true
	job := r.enqueue(t, "up")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 1; attempt <= jobs.MaxAttempts; attempt++ {
		done := runTick(r)
		if id := <-r.exec.started; id != job.ID {
			t.Fatalf("attempt %d ran %s", attempt, id)
		}
		// The deadline timer and the worker heartbeat ticker.
		if err := r.clock.BlockUntilContext(ctx, 2); err != nil {
			t.Fatal(err)
		}
		r.clock.Advance(jobs.LeaseDuration - time.Millisecond)
		if j := r.job(t, job.ID); j.Status != storage.JobRunning || j.Attempts != attempt {
			t.Fatalf("before the deadline: %s attempts %d", j.Status, j.Attempts)
		}
		r.clock.Advance(time.Millisecond)
		<-r.exec.cancelled
		// The run was cancelled but has not stopped: the job must stay
		// running (no second run of the scope may start).
		if j := r.job(t, job.ID); j.Status != storage.JobRunning {
			t.Fatalf("attempt %d: requeued before the run stopped (%s)", attempt, j.Status)
		}
		r.exec.release <- struct{}{}
		res := <-done
		j := r.job(t, job.ID)
		want := storage.JobQueued
		if attempt == jobs.MaxAttempts {
			want = storage.JobFailed
		}
		if res.Ran == nil || !res.Ran.TimedOut || res.Ran.Status != want || j.Status != want || j.Attempts != attempt {
			t.Fatalf("attempt %d: tick %+v, job %s attempts %d; want %s", attempt, res.Ran, j.Status, j.Attempts, want)
		}
		if want == storage.JobFailed && j.Error != storage.WorkerLost {
			t.Fatalf("error %q, want %q", j.Error, storage.WorkerLost)
		}
		if j.LockedBy != "" {
			t.Fatalf("still locked by %q", j.LockedBy)
		}
	}
	if r.exec.maxRunning != 1 {
		t.Fatalf("%d runs overlapped", r.exec.maxRunning)
	}
	if res := <-runTick(r); res.Ran != nil {
		t.Fatalf("a failed job ran again: %+v", res.Ran)
	}
	// Each cancelled run was settled by Recover (it may have been killed
	// mid-operation, leaving a lock and pending creates) before the next
	// run of the scope.
	want := []string{}
	for attempt := 1; attempt <= jobs.MaxAttempts; attempt++ {
		want = append(want, "execute:"+job.ID, "recover:"+job.ID)
	}
	if got := r.exec.Calls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

// TestIncludeDataSurvivesARequeue: a destroy enqueued with includeData
// and its phrase keeps the flag on the
// job, so the run after a lease expiry is handed it again; a plain destroy
// never carries it (docs/operations.md, "Jobs").
func TestIncludeDataSurvivesARequeue(t *testing.T) {
	r := newRig(t)
	plain := storagetest.Box(t, r.db, storage.Box{})
	ctx := context.Background()
	if _, err := r.svc.EnqueueRequest(ctx, jobs.Request{ScopeKind: jobs.ScopeBox, Ref: plain.ID, Action: "destroy",
		Confirmation: "destroy data " + plain.Name}); err != nil {
		t.Fatal(err)
	}
	// The phrase names the box as the request does: here by its id.
	if _, err := r.svc.EnqueueRequest(ctx, jobs.Request{ScopeKind: jobs.ScopeBox, Ref: r.box.ID, Action: "destroy",
		IncludeData: true, Confirmation: "destroy data " + r.box.ID}); err != nil {
		t.Fatalf("the phrase naming the box by its id: %v", err)
	}
	// The plain destroy runs first (oldest queued) and ends.
	if res := <-runTick(r); res.Ran == nil || res.Ran.Status != storage.JobSucceeded {
		t.Fatalf("plain destroy: %+v", res.Ran)
	}
	r.exec.block = true
	done := runTick(r)
	<-r.exec.started
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.clock.BlockUntilContext(tctx, 2); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(jobs.LeaseDuration)
	<-r.exec.cancelled
	r.exec.release <- struct{}{}
	if res := <-done; res.Ran == nil || res.Ran.Status != storage.JobQueued {
		t.Fatalf("the expired run was not requeued: %+v", res.Ran)
	}
	r.exec.block = false
	if res := <-runTick(r); res.Ran == nil || res.Ran.Status != storage.JobSucceeded {
		t.Fatalf("the retry: %+v", res.Ran)
	}
	r.exec.mu.Lock()
	seen := append([]jobs.Job(nil), r.exec.jobs...)
	r.exec.mu.Unlock()
	if len(seen) != 3 {
		t.Fatalf("%d runs, want 3", len(seen))
	}
	for i, want := range []bool{false, true, true} {
		if seen[i].IncludeData != want {
			t.Errorf("run %d (%s of box %s): IncludeData %v, want %v", i+1, seen[i].Action, seen[i].ScopeID, seen[i].IncludeData, want)
		}
	}
	if seen[1].ID != seen[2].ID || seen[2].Attempts != 2 {
		t.Errorf("the retry is not the requeued job: %+v", seen[2])
	}
}

// TestLeaseExpirySettlesTheRunBeforeARetry: a run the lease deadline
// cancelled is settled by the executor's Recover before the job is
// requeued, with what it found recorded on the box; a failing Recover
// leaves the job running, so the next tick recovers it before any run.
func TestLeaseExpirySettlesTheRunBeforeARetry(t *testing.T) {
	for _, tc := range []struct {
		name       string
		recoverErr error
	}{{"recovered, then requeued", nil}, {"a failed recovery keeps the job running", errors.New("provider unreachable")}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.exec.block = true
			r.exec.recovered = &storage.BoxResources{DropletID: 91}
			r.exec.recoverErr = tc.recoverErr
			job := r.enqueue(t, "up")
			done := runTick(r)
			<-r.exec.started
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.clock.BlockUntilContext(ctx, 2); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(jobs.LeaseDuration)
			<-r.exec.cancelled
			r.exec.release <- struct{}{}
			res := <-done
			if res.Ran == nil || !res.Ran.TimedOut {
				t.Fatalf("tick %+v", res.Ran)
			}
			if got := r.exec.Calls(); len(got) != 2 || got[1] != "recover:"+job.ID {
				t.Fatalf("calls %v: the cancelled run was not settled by Recover", got)
			}
			j := r.job(t, job.ID)
			b, err := storage.BoxByRef(context.Background(), r.db.Read, r.box.ID)
			if err != nil {
				t.Fatal(err)
			}
			if tc.recoverErr == nil {
				if j.Status != storage.JobQueued || b.Resources.DropletID != 91 {
					t.Fatalf("job %s, box resources %+v; want queued with the recovered droplet", j.Status, b.Resources)
				}
				return
			}
			if j.Status != storage.JobRunning || j.LockedBy != "instance-now" {
				t.Fatalf("job %s by %q after a failed recovery; want it left running", j.Status, j.LockedBy)
			}
			r.exec.recoverErr, r.exec.block = nil, false
			next := <-runTick(r)
			<-r.exec.started
			if len(next.Recovered) != 1 || next.Recovered[0].JobID != job.ID || next.Ran == nil || next.Ran.JobID != job.ID {
				t.Fatalf("next tick: recovered %+v, ran %+v", next.Recovered, next.Ran)
			}
			if got := r.exec.Calls(); len(got) != 4 || got[2] != "recover:"+job.ID || got[3] != "execute:"+job.ID {
				t.Fatalf("calls %v: recovery must come before the retry", got)
			}
		})
	}
}

func TestProgressDoesNotRenewTheLease(t *testing.T) {
	r := newRig(t)
	r.exec.block = true
	r.exec.progress = []jobs.Progress{{Message: "creating", Resource: "droplet", Op: "create", Counts: map[string]int{"create": 1}}}
	job := r.enqueue(t, "up")
	done := runTick(r)
	<-r.exec.started
	j := r.job(t, job.ID)
	if j.ProgressSeq != 1 || !j.LockedAt.Equal(j.StartedAt) {
		t.Fatalf("progress seq %d, locked_at %s, started %s", j.ProgressSeq, j.LockedAt, j.StartedAt)
	}
	var p jobs.Progress
	if err := json.Unmarshal(j.Progress, &p); err != nil || p.Counts["create"] != 1 {
		t.Fatalf("progress %s: %v", j.Progress, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.clock.BlockUntilContext(ctx, 2); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(jobs.LeaseDuration)
	<-r.exec.cancelled
	r.exec.release <- struct{}{}
	if res := <-done; res.Ran == nil || !res.Ran.TimedOut {
		t.Fatalf("the lease ran out from the claim, not the progress: %+v", res.Ran)
	}
}

func TestRunRecordsOutcome(t *testing.T) {
	r := newRig(t)
	at := r.clock.Now().Add(-time.Minute).Truncate(time.Millisecond)
	r.exec.out = jobs.Outcome{
		Summary:   json.RawMessage(`{"create":3}`),
		Resources: &storage.BoxResources{DropletID: 4242, FirewallID: "fw-1", VolumeID: "vol-1"},
		Launch:    &storage.BoxLaunch{DropletID: 4242, IPv4: "192.0.2.10", HostKey: "ssh-ed25519 AAAA", LaunchedAt: at},
	}
	job := r.enqueue(t, "up")
	res := <-runTick(r)
	<-r.exec.started
	if res.Ran == nil || res.Ran.Status != storage.JobSucceeded {
		t.Fatalf("ran %+v", res.Ran)
	}
	j := r.job(t, job.ID)
	if j.Status != storage.JobSucceeded || string(j.Result) != `{"create":3}` || j.FinishedAt.IsZero() {
		t.Fatalf("job %+v", j)
	}
	box, err := storage.BoxByRef(context.Background(), r.db.Read, r.box.ID)
	if err != nil {
		t.Fatal(err)
	}
	if box.Resources.DropletID != 4242 || box.Resources.VolumeID != "vol-1" || box.Launch.DropletID != 4242 ||
		box.Launch.IPv4 != "192.0.2.10" || box.Launch.JobID != job.ID || !box.Launch.LaunchedAt.Equal(at) {
		t.Fatalf("box %+v / %+v", box.Resources, box.Launch)
	}

	t.Run("a failed run keeps the last launch", func(t *testing.T) {
		r.exec.err, r.exec.out = errors.New("provider refused the droplet"), jobs.Outcome{}
		job := r.enqueue(t, "up")
		res := <-runTick(r)
		<-r.exec.started
		if j := r.job(t, job.ID); res.Ran.Status != storage.JobFailed || j.Status != storage.JobFailed || j.Error != "provider refused the droplet" {
			t.Fatalf("job %+v", j)
		}
		if b, _ := storage.BoxByRef(context.Background(), r.db.Read, r.box.ID); b.Launch.DropletID != 4242 {
			t.Fatalf("launch lost: %+v", b.Launch)
		}
	})

	t.Run("a detailed error: the diagnostic is the job's error, the output its finish step", func(t *testing.T) {
		r.exec.err, r.exec.out = detailedErr{diag: "the DigitalOcean provider plugin 4.62.0 is not installed", raw: "failed to run update\nstdout: …"}, jobs.Outcome{}
		job := r.enqueue(t, "up")
		<-runTick(r)
		<-r.exec.started
		if j := r.job(t, job.ID); j.Status != storage.JobFailed || j.Error != "the DigitalOcean provider plugin 4.62.0 is not installed" {
			t.Fatalf("job %+v", j)
		}
		steps, err := storage.JobSteps(context.Background(), r.db.Read, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if last := steps[len(steps)-1]; last.Kind != storage.JobStepFinished || last.Detail != "failed to run update\nstdout: …" {
			t.Fatalf("finish step %+v", last)
		}
	})

	t.Run("a failed run records what it reports it left behind", func(t *testing.T) {
		recorded := false
		r.exec.err = errors.New("the up succeeded (droplet 4343 exists and is billable) but delivering its ingest key failed")
		r.exec.out = jobs.Outcome{
			Resources: &storage.BoxResources{DropletID: 4343, FirewallID: "fw-1", VolumeID: "vol-1"},
			Launch:    &storage.BoxLaunch{DropletID: 4343, IPv4: "192.0.2.11"},
			Record:    func(context.Context, storage.Tx, time.Time) error { recorded = true; return nil },
		}
		job := r.enqueue(t, "up")
		res := <-runTick(r)
		<-r.exec.started
		if j := r.job(t, job.ID); res.Ran.Status != storage.JobFailed || j.Status != storage.JobFailed {
			t.Fatalf("job %+v", j)
		}
		b, _ := storage.BoxByRef(context.Background(), r.db.Read, r.box.ID)
		if b.Resources.DropletID != 4343 || b.Launch.DropletID != 4343 || b.Launch.HostKey != "" || !recorded {
			t.Fatalf("the failed run's droplet is not recorded: %+v %+v (record ran: %v)", b.Resources, b.Launch, recorded)
		}
	})
}

// detailedErr is a jobs.DetailedError.
type detailedErr struct{ diag, raw string }

func (e detailedErr) Error() string  { return e.diag }
func (e detailedErr) Detail() string { return e.raw }

// preparingExec is a fakeExec that must prepare before the lane works.
type preparingExec struct {
	*fakeExec
	prepareErr error
	prepares   int
}

func (p *preparingExec) Prepare(context.Context) error {
	p.prepares++
	p.record("prepare")
	return p.prepareErr
}

// TestPrepareBeforeAnything: an executor's Prepare (the converge
// executor's restore of missing stacks) runs before the first recovery or
// claim; while it fails nothing is claimed; once it succeeded it is not
// run again.
func TestPrepareBeforeAnything(t *testing.T) {
	r := newRig(t)
	exec := &preparingExec{fakeExec: r.exec, prepareErr: errors.New("restore failed")}
	runner := jobs.NewRunner(jobs.RunnerConfig{DB: r.db, Clock: r.clock, Log: zerolog.Nop(), Executor: exec, InstanceID: "instance-now", Version: "test"})
	dead := deadJob(t, r, 1)
	ctx := context.Background()
	if _, err := runner.Tick(ctx); err == nil {
		t.Fatal("a tick whose Prepare failed reported no error")
	}
	if c := exec.Calls(); len(c) != 1 || c[0] != "prepare" {
		t.Fatalf("calls after a failed prepare: %v", c)
	}
	if j := r.job(t, dead.ID); j.Status != storage.JobRunning {
		t.Fatalf("the dead job was touched while Prepare failed: %s", j.Status)
	}
	exec.prepareErr = nil
	res, err := runner.Tick(ctx)
	if err != nil || len(res.Recovered) != 1 {
		t.Fatalf("tick after Prepare succeeded: %+v, %v", res, err)
	}
	<-r.exec.started
	if c := exec.Calls(); len(c) < 3 || c[1] != "prepare" || c[2] != "recover:"+dead.ID {
		t.Fatalf("calls: %v; want prepare before recover", c)
	}
	if _, err := runner.Tick(ctx); err != nil || exec.prepares != 2 {
		t.Fatalf("a later tick: %v, %d prepares (want no third)", err, exec.prepares)
	}
}

// deadJob leaves a job running under a previous instance's lock, as a
// crash would, after attempts claims.
func deadJob(t *testing.T, r *rig, attempts int) storage.Job {
	t.Helper()
	job := r.enqueue(t, "up")
	ctx := context.Background()
	for i := 1; i <= attempts; i++ {
		if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			if _, err := storage.ClaimNextJob(ctx, tx, "instance-before", r.clock.Now()); err != nil {
				return err
			}
			if i < attempts {
				_, err := storage.ReleaseJob(ctx, tx, job.ID, "instance-before", jobs.MaxAttempts, "test", r.clock.Now())
				return err
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return job
}

func TestRecoveryRunsBeforeAnything(t *testing.T) {
	t.Run("dead job recovered, then requeued and run", func(t *testing.T) {
		r := newRig(t)
		dead := deadJob(t, r, 1)
		other := storagetest.Box(t, r.db, storage.Box{})
		queued, err := r.svc.Enqueue(context.Background(), jobs.ScopeBox, other.ID, "preview")
		if err != nil {
			t.Fatal(err)
		}
		r.exec.recovered = &storage.BoxResources{DropletID: 77}
		res := <-runTick(r)
		<-r.exec.started
		calls := r.exec.Calls()
		if len(calls) != 2 || calls[0] != "recover:"+dead.ID {
			t.Fatalf("calls %v: Recover must come first", calls)
		}
		if len(res.Recovered) != 1 || res.Recovered[0].Status != storage.JobQueued {
			t.Fatalf("recovered %+v", res.Recovered)
		}
		// Both jobs are queued at the same instant; the older id runs first.
		if calls[1] != "execute:"+dead.ID {
			t.Fatalf("calls %v; the other queued job is %s", calls, queued.ID)
		}
		if b, _ := storage.BoxByRef(context.Background(), r.db.Read, r.box.ID); b.Resources.DropletID != 77 {
			t.Fatalf("recovered resources not recorded: %+v", b.Resources)
		}
	})
	t.Run("third attempt: worker lost, not run", func(t *testing.T) {
		r := newRig(t)
		dead := deadJob(t, r, jobs.MaxAttempts)
		res := <-runTick(r)
		if j := r.job(t, dead.ID); j.Status != storage.JobFailed || j.Error != storage.WorkerLost {
			t.Fatalf("job %s %q", j.Status, j.Error)
		}
		if res.Ran != nil || len(r.exec.Calls()) != 1 {
			t.Fatalf("ran %+v, calls %v", res.Ran, r.exec.Calls())
		}
	})
	t.Run("more dead jobs than the cap: the next tick recovers the rest first", func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		n := jobs.MaxRecoverPerTick + 2
		for i := 0; i < n; i++ {
			b := storagetest.Box(t, r.db, storage.Box{})
			if _, err := r.svc.Enqueue(ctx, jobs.ScopeBox, b.ID, "up"); err != nil {
				t.Fatal(err)
			}
			if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
				_, err := storage.ClaimNextJob(ctx, tx, "instance-before", r.clock.Now())
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		res := <-runTick(r)
		if len(res.Recovered) != jobs.MaxRecoverPerTick || !res.More || res.Ran != nil {
			t.Fatalf("first tick: %d recovered, more %v, ran %+v", len(res.Recovered), res.More, res.Ran)
		}
		res = <-runTick(r)
		<-r.exec.started
		if len(res.Recovered) != 2 || res.More || res.Ran == nil {
			t.Fatalf("second tick: %d recovered, more %v, ran %+v", len(res.Recovered), res.More, res.Ran)
		}
		calls := r.exec.Calls()
		for i, c := range calls[:n] {
			if c[:8] != "recover:" {
				t.Fatalf("call %d is %s before every dead job was recovered: %v", i, c, calls)
			}
		}
	})
	t.Run("a failed recovery keeps the lane closed", func(t *testing.T) {
		r := newRig(t)
		dead := deadJob(t, r, 1)
		other := storagetest.Box(t, r.db, storage.Box{})
		if _, err := r.svc.Enqueue(context.Background(), jobs.ScopeBox, other.ID, "up"); err != nil {
			t.Fatal(err)
		}
		r.exec.recoverErr = errors.New("provider unreachable")
		if _, err := r.runner.Tick(context.Background()); err == nil {
			t.Fatal("Tick succeeded with a failed recovery")
		}
		if calls := r.exec.Calls(); len(calls) != 1 || calls[0] != "recover:"+dead.ID {
			t.Fatalf("calls %v: nothing may run before recovery succeeds", calls)
		}
		if j := r.job(t, dead.ID); j.Status != storage.JobRunning || j.LockedBy != "instance-before" {
			t.Fatalf("dead job changed: %s by %q", j.Status, j.LockedBy)
		}
	})
}

func TestCancelLockRefusedWhileAJobIsAlive(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	job := r.enqueue(t, "up")
	for _, status := range []string{"queued", "running"} {
		t.Run(status, func(t *testing.T) {
			if status == "running" {
				if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
					_, err := storage.ClaimNextJob(ctx, tx, "instance-now", r.clock.Now())
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := r.svc.CancelLock(ctx, jobs.ScopeBox, r.box.Name)
			var busy *storage.ScopeBusyError
			if !errors.As(err, &busy) || busy.JobID != job.ID {
				t.Fatalf("CancelLock = %v, want busy with %s", err, job.ID)
			}
			if calls := r.exec.Calls(); len(calls) != 0 {
				t.Fatalf("executor called: %v", calls)
			}
		})
	}
	t.Run("idle scope: the executor cancels the lock", func(t *testing.T) {
		if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			return storage.FinishJob(ctx, tx, job.ID, "instance-now", storage.JobFailed, nil, "x", r.clock.Now())
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.svc.CancelLock(ctx, jobs.ScopeBox, r.box.Name); err != nil {
			t.Fatal(err)
		}
		if calls := r.exec.Calls(); len(calls) != 1 || calls[0] != "cancel:"+r.box.ID {
			t.Fatalf("calls %v", calls)
		}
	})
}

func offlineEvents(t *testing.T, r *rig) int {
	t.Helper()
	evs, err := storage.ListLifecycleEvents(context.Background(), r.db.Read, storage.EventFilter{Kind: jobs.OfflineKind, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		// A platform event: the lane is the platform's, not the box's
		// environment's.
		if e.Message != jobs.OfflineMessage || e.Reason != jobs.OfflineReason || e.EnvironmentSlug != "" || e.DeploymentID != "" {
			t.Fatalf("event %+v", e)
		}
		n++
	}
	return n
}

func TestOfflineWarningOncePerThirtyMinutes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	tick := func() jobs.WatchResult {
		t.Helper()
		res, err := r.watch.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := tick(); res.Queued != 0 || !res.NextCheck.IsZero() {
		t.Fatalf("empty queue: %+v", res)
	}
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.TouchWorker(ctx, tx, storage.Worker{WorkerID: "w", Version: "v", LastSeenAt: r.clock.Now().Add(-time.Hour)})
	}); err != nil {
		t.Fatal(err)
	}
	r.enqueue(t, "up")
	steps := []struct {
		advance time.Duration
		warned  bool
		total   int
	}{
		{0, false, 0}, // just queued
		{jobs.OfflineAfter - time.Second, false, 0},
		{time.Second, true, 1},  // queued 5 min, no worker for 5 min
		{time.Minute, false, 1}, // suppressed
		{jobs.OfflineRepeat - 2*time.Minute, false, 1},
		{time.Minute, true, 2}, // 30 minutes after the first
	}
	for i, s := range steps {
		t.Run(fmt.Sprint("step ", i), func(t *testing.T) {
			r.clock.Advance(s.advance)
			res := tick()
			if res.Warned != s.warned || offlineEvents(t, r) != s.total {
				t.Fatalf("after %s: %+v, %d events; want warned %v, %d", s.advance, res, offlineEvents(t, r), s.warned, s.total)
			}
		})
	}
	t.Run("a worker seen recently holds the warning", func(t *testing.T) {
		r.clock.Advance(jobs.OfflineRepeat)
		if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			return storage.TouchWorker(ctx, tx, storage.Worker{WorkerID: "w", Version: "v", LastSeenAt: r.clock.Now().Add(-time.Minute)})
		}); err != nil {
			t.Fatal(err)
		}
		if res := tick(); res.Warned || !res.NextCheck.Equal(r.clock.Now().Add(jobs.OfflineAfter-time.Minute)) {
			t.Fatalf("%+v", res)
		}
	})
}

func TestRunnerIsEventDriven(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.runner.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, func() bool { return r.runner.IdleWaits() >= 1 })
	// Idle with an empty queue: one timer, the idle worker heartbeat, and
	// the worker row recorded at start and at each of its beats.
	if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer wcancel()
	if err := r.clock.BlockUntilContext(wctx, 2); err == nil {
		t.Fatal("the idle runner holds more than the heartbeat timer")
	}
	seen := func() time.Time {
		t.Helper()
		ws, err := storage.ListWorkers(ctx, r.db.Read)
		if err != nil || len(ws) != 1 || ws[0].WorkerID != r.runner.InstanceID() || ws[0].CurrentJobID != "" {
			t.Fatalf("workers %+v (%v), want this idle runner", ws, err)
		}
		return ws[0].LastSeenAt
	}
	if at := seen(); !at.Equal(r.clock.Now().Truncate(time.Millisecond)) {
		t.Fatalf("worker seen at %s, want the start %s", at, r.clock.Now())
	}
	for i := 1; i <= 2; i++ {
		r.clock.Advance(jobs.IdleWorkerHeartbeat)
		want := r.clock.Now().Truncate(time.Millisecond)
		waitFor(t, func() bool { return seen().Equal(want) })
		if err := r.clock.BlockUntilContext(ctx, 1); err != nil { // the next beat is scheduled
			t.Fatal(err)
		}
	}
	if n := r.runner.IdleWaits(); n != 1 {
		t.Fatalf("idle waits %d after two beats, want 1: a beat is not a pass", n)
	}
	if jobs.IdleWorkerHeartbeat >= jobs.OfflineAfter || jobs.IdleWorkerHeartbeat < time.Minute {
		t.Fatalf("IdleWorkerHeartbeat %s must be under OfflineAfter and at least a minute", jobs.IdleWorkerHeartbeat)
	}
	job := r.enqueue(t, "preview")
	if id := <-r.exec.started; id != job.ID {
		t.Fatalf("ran %s", id)
	}
	waitFor(t, func() bool { return r.job(t, job.ID).Status == storage.JobSucceeded })
	waitFor(t, func() bool { return r.runner.IdleWaits() >= 2 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, testwait.Short, "the condition", func() (bool, string) { return cond(), "not yet" })
}
