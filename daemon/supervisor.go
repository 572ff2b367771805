package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Loop is a background worker (Coder's workers are the model): Run blocks
// until ctx ends, doing one bounded tick of work per interval of its own
// injected clock. Tests call a loop's tick method directly.
type Loop interface {
	// Name identifies the loop in logs.
	Name() string
	// Run works until ctx is done; it returns nil then, or an error that
	// the supervisor logs before restarting the loop after a pause.
	Run(ctx context.Context) error
}

// loopRestartDelay is the pause before a failed loop runs again: long enough
// not to spin on a persistent fault, short next to every loop's cadence.
const loopRestartDelay = 30 * time.Second

// supervisor runs each loop in its own goroutine and restarts it if it fails.
type supervisor struct {
	log    zerolog.Logger
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

func startSupervisor(ctx context.Context, log zerolog.Logger, loops []Loop) *supervisor {
	ctx, cancel := context.WithCancel(ctx)
	s := &supervisor{log: log, cancel: cancel}
	for _, l := range loops {
		s.wg.Add(1)
		go func(l Loop) {
			defer s.wg.Done()
			for {
				err := l.Run(ctx)
				if ctx.Err() != nil {
					return
				}
				s.log.Error().Str("loop", l.Name()).Err(err).Msg("background loop failed; restarting")
				select {
				case <-ctx.Done():
					return
				case <-time.After(loopRestartDelay):
				}
			}
		}(l)
	}
	return s
}

// stop cancels every loop and waits for them to return.
func (s *supervisor) stop() {
	s.cancel()
	s.wg.Wait()
}
