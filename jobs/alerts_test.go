package jobs_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alertstest"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// holds are the holds values of cs, in order.
func holds(cs []alertstest.Call) []bool {
	out := []bool{}
	for _, c := range cs {
		out = append(out, c.Holds)
	}
	return out
}

// alertRig is a rig whose runner and watch report to a fake setter.
func alertRig(t *testing.T) (*rig, *alertstest.Recorder, *[]string) {
	t.Helper()
	r := newRig(t)
	set := &alertstest.Recorder{}
	var after []string
	var mu sync.Mutex
	r.runner = jobs.NewRunner(jobs.RunnerConfig{DB: r.db, Clock: r.clock, Log: zerolog.Nop(), Executor: r.exec, InstanceID: "instance-now", Version: "test",
		Alerts: set, AfterJob: func(_ context.Context, b storage.Box) { mu.Lock(); after = append(after, b.Name); mu.Unlock() }})
	r.watch.SetAlerts(set)
	r.svc = jobs.NewService(r.db, r.clock, r.runner, r.watch)
	return r, set, &after
}

// TestJobFailedAlert: a failed converge job raises job-failed on its box
// with the job's id and error, once however many jobs of the box fail in
// a row; a later job of the box that succeeds ends it; the AfterJob hook
// hears of every job's end (docs/operations.md, "Alerts", under
// Detectors).
func TestJobFailedAlert(t *testing.T) {
	r, set, after := alertRig(t)
	run := func(fail bool) storage.Job {
		t.Helper()
		r.exec.err = nil
		if fail {
			r.exec.err = errors.New("provider refused the droplet")
		}
		j := r.enqueue(t, "up")
		<-runTick(r)
		<-r.exec.started
		return j
	}
	first := run(true)
	run(true)
	cs := set.Of(alerts.KindJobFailed)
	if !slices.Equal(holds(cs), []bool{true}) {
		t.Fatalf("two failed jobs reported %v, want [true]", holds(cs))
	}
	if cs[0].Subject != (alerts.Subject{Kind: alerts.SubjectBox, ID: r.box.Name}) || !strings.Contains(cs[0].Detail, first.ID) ||
		!strings.Contains(cs[0].Detail, "provider refused the droplet") {
		t.Fatalf("raised %+v, want box %s with the job's id and error", cs[0], r.box.Name)
	}
	run(false)
	if got := set.Holds(alerts.KindJobFailed); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("a later success reported %v, want [true false]", got)
	}
	if len(*after) != 3 || (*after)[0] != r.box.Name {
		t.Fatalf("AfterJob heard %v, want the box three times", *after)
	}
}

// TestWorkerOfflineAlert: the watch raises worker-offline on the platform
// when its warning's condition starts (jobs queued OfflineAfter with no
// worker seen for as long), once, looks again every WatchRecheck while it
// holds, and ends it when a worker is seen (docs/operations.md, "Alerts",
// under Detectors).
func TestWorkerOfflineAlert(t *testing.T) {
	r, set, _ := alertRig(t)
	ctx := context.Background()
	tick := func() jobs.WatchResult {
		t.Helper()
		res, err := r.watch.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	touch := func(at time.Time) {
		t.Helper()
		if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
			return storage.TouchWorker(ctx, tx, storage.Worker{WorkerID: "w", Version: "v", LastSeenAt: at})
		}); err != nil {
			t.Fatal(err)
		}
	}
	touch(r.clock.Now().Add(-time.Hour))
	if _, err := r.svc.Enqueue(ctx, jobs.ScopeBox, r.box.ID, "up"); err != nil {
		t.Fatal(err)
	}
	tick() // the first look reports the state it finds: not offline yet
	r.clock.Advance(jobs.OfflineAfter)
	if res := tick(); !res.Warned || !res.NextCheck.Equal(r.clock.Now().Add(jobs.WatchRecheck)) {
		t.Fatalf("offline: %+v, want warned and a look again in %s", res, jobs.WatchRecheck)
	}
	r.clock.Advance(jobs.WatchRecheck)
	tick()
	cs := set.Of(alerts.KindWorkerOffline)
	if !slices.Equal(holds(cs), []bool{false, true}) || cs[1].Subject != (alerts.Subject{Kind: alerts.SubjectPlatform}) || !strings.Contains(cs[1].Detail, "1 converge jobs are queued") {
		t.Fatalf("reported %+v, want [false true] on the platform with the queue in its detail", cs)
	}
	touch(r.clock.Now())
	res := tick()
	if got := set.Holds(alerts.KindWorkerOffline); !slices.Equal(got, []bool{false, true, false}) {
		t.Fatalf("a worker seen again reported %v, want [false true false]", got)
	}
	if !res.NextCheck.Equal(r.clock.Now().Add(jobs.OfflineAfter)) {
		t.Fatalf("after the end the next look is at %s, want the warning's own time", res.NextCheck)
	}
}

// TestJobAlertChecks: the re-checks at start: job-failed holds while the
// box's last finished job failed, not after a success nor for a box that
// is gone; worker-offline holds while the watch's condition does.
func TestJobAlertChecks(t *testing.T) {
	r, _, _ := alertRig(t)
	ctx := context.Background()
	checks := jobs.AlertChecks(r.db, r.clock.Now)
	box := alerts.Subject{Kind: alerts.SubjectBox, ID: r.box.Name}
	check := func(kind string, s alerts.Subject) bool {
		t.Helper()
		holds, detail, err := checks[kind](ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if holds && detail == "" {
			t.Errorf("%s holds without a detail", kind)
		}
		return holds
	}
	if check(alerts.KindJobFailed, box) {
		t.Error("job-failed holds for a box without jobs")
	}
	r.exec.err = errors.New("provider refused the droplet")
	r.enqueue(t, "up")
	<-runTick(r)
	<-r.exec.started
	if !check(alerts.KindJobFailed, box) {
		t.Error("job-failed does not hold after a failed job")
	}
	if check(alerts.KindJobFailed, alerts.Subject{Kind: alerts.SubjectBox, ID: "gone"}) {
		t.Error("job-failed holds for a box that does not exist")
	}
	r.exec.err = nil
	r.enqueue(t, "preview")
	<-runTick(r)
	<-r.exec.started
	if check(alerts.KindJobFailed, box) {
		t.Error("job-failed holds after a later success")
	}

	platform := alerts.Subject{Kind: alerts.SubjectPlatform}
	if check(alerts.KindWorkerOffline, platform) {
		t.Error("worker-offline holds with an empty queue")
	}
	if _, err := r.svc.Enqueue(ctx, jobs.ScopeBox, r.box.ID, "up"); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(jobs.OfflineAfter + time.Minute)
	if !check(alerts.KindWorkerOffline, platform) {
		t.Error("worker-offline does not hold with a job queued past OfflineAfter and no worker seen")
	}
}
