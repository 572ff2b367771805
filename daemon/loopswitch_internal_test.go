package daemon

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// blockingLoop counts its runs and blocks each until its context ends.
type blockingLoop struct {
	started chan struct{}
	stopped chan struct{}
}

func (*blockingLoop) Name() string { return "blocking" }

func (l *blockingLoop) Run(ctx context.Context) error {
	l.started <- struct{}{}
	<-ctx.Done()
	l.stopped <- struct{}{}
	return nil
}

// TestPausableStopsAndRestarts: pausing cancels the running loop (it
// returns as at shutdown) and nothing runs it again until it is resumed;
// resuming runs it again; shutdown while paused returns at once.
func TestPausableStopsAndRestarts(t *testing.T) {
	db := storagetest.NewDB(t)
	ctx := context.Background()
	sw, err := newLoopSwitches(ctx, db, clockwork.NewRealClock(), zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	inner := &blockingLoop{started: make(chan struct{}), stopped: make(chan struct{})}
	p := &pausable{Loop: inner, name: LoopJobs, sw: sw, log: zerolog.Nop()}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()

	<-inner.started
	// A switch of another loop does not touch this one.
	if _, _, err := sw.set(ctx, LoopReaper, true, "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sw.set(ctx, LoopJobs, true, "test"); err != nil {
		t.Fatal(err)
	}
	<-inner.stopped
	select {
	case <-inner.started:
		t.Fatal("the paused loop was run again before it was resumed")
	case err := <-done:
		t.Fatalf("Run returned %v while paused; want it to wait", err)
	default:
	}
	if _, _, err := sw.set(ctx, LoopJobs, false, "test"); err != nil {
		t.Fatal(err)
	}
	<-inner.started
	if _, _, err := sw.set(ctx, LoopJobs, true, "test"); err != nil {
		t.Fatal(err)
	}
	<-inner.stopped
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after shutdown while paused: %v, want nil", err)
	}
}
