package jobs_test

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/jobs/jobstest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// startSignal is a jobstest.Executor that reports each run's start.
type startSignal struct {
	jobstest.Executor
	started chan struct{}
}

func (s *startSignal) Execute(ctx context.Context, job jobs.Job, box storage.Box, progress func(jobs.Progress)) (jobs.Outcome, error) {
	s.started <- struct{}{}
	return s.Executor.Execute(ctx, job, box, progress)
}

// BenchmarkEnqueueToStart measures the job queue's overhead: from
// Service.Enqueue (a writer unit) to the executor's Execute being called
// by a running lane (the wake-up, the claim's writer unit, the box read).
// Real SQLite file, real clock.
func BenchmarkEnqueueToStart(b *testing.B) {
	db := storagetest.NewDB(b)
	exec := &startSignal{started: make(chan struct{}, 1)}
	runner := jobs.NewRunner(jobs.RunnerConfig{DB: db, Clock: clockwork.NewRealClock(), Log: zerolog.Nop(), Executor: exec, InstanceID: "bench", Version: "bench"})
	svc := jobs.NewService(db, nil, runner, nil)
	box := storagetest.Box(b, db, storage.Box{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = runner.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := svc.Enqueue(ctx, jobs.ScopeBox, box.ID, jobs.ActionPreview); err != nil {
			b.Fatal(err)
		}
		<-exec.started
		// The next enqueue must find the scope idle: wait for the job's
		// end, off the clock.
		b.StopTimer()
		for {
			if _, err := storage.LiveJob(ctx, db.Read, jobs.ScopeBox, box.ID); err != nil {
				break
			}
		}
		b.StartTimer()
	}
}
