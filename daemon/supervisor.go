package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
)

// Restart back-off of a failed loop: the pause doubles from
// restartBackoffMin with each failure, up to restartBackoffMax, so a
// transient fault is retried at once and a persistent one is neither spun on
// nor left for long.
const (
	// restartBackoffMin is the pause before the first restart.
	restartBackoffMin = time.Second
	// restartBackoffMax caps the pause: a loop failing for good is still
	// retried every five minutes, well inside every loop's own cadence.
	restartBackoffMax = 5 * time.Minute
	// restartBackoffReset is how long a loop must run before failing for
	// the run to count as healthy: its next pause starts again from
	// restartBackoffMin rather than continuing an old streak.
	restartBackoffReset = 10 * time.Minute
)

// errReturnedEarly is the failure of a loop whose Run returned nil while its
// context was still live: it stopped working without being told to.
var errReturnedEarly = errors.New("loop returned before shutdown")

// nextBackoff returns the pause before restarting a loop that failed after
// running for ran, given the pause before its previous restart (zero for
// none).
func nextBackoff(prev, ran time.Duration) time.Duration {
	if prev == 0 || ran >= restartBackoffReset {
		return restartBackoffMin
	}
	return min(2*prev, restartBackoffMax)
}

// supervisor runs each loop in its own goroutine and restarts it, after a
// growing pause on its clock, whenever it fails (returns an error, returns
// early or panics).
type supervisor struct {
	log    zerolog.Logger
	clock  clockwork.Clock
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// startSupervisor starts every loop under a context derived from ctx; stop
// (or ctx ending) ends them all.
func startSupervisor(ctx context.Context, log zerolog.Logger, clock clockwork.Clock, loops []Loop) *supervisor {
	ctx, cancel := context.WithCancel(ctx)
	s := &supervisor{log: log, clock: clock, cancel: cancel}
	for _, l := range loops {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.supervise(ctx, l)
		}()
	}
	return s
}

// supervise runs l until ctx ends, restarting it after each failure.
func (s *supervisor) supervise(ctx context.Context, l Loop) {
	var pause time.Duration
	for {
		started := s.clock.Now()
		err := runLoop(ctx, l)
		if ctx.Err() != nil {
			return // shutdown: whatever Run returned, it is not restarted
		}
		if err == nil {
			err = errReturnedEarly
		}
		pause = nextBackoff(pause, s.clock.Since(started))
		s.log.Error().Str("loop", l.Name()).Err(err).Dur("restart_in", pause).Msg("background loop failed; restarting")
		t := s.clock.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
	}
}

// runLoop runs l once, turning a panic into an error: one faulty loop is
// restarted like any failed one instead of taking the daemon (and ingest)
// down with it.
func runLoop(ctx context.Context, l Loop) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
		}
	}()
	return l.Run(ctx)
}

// stop cancels every loop and waits for them to return.
func (s *supervisor) stop() {
	s.cancel()
	s.wg.Wait()
}
