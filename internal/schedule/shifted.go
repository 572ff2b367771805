package schedule

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// Shifted returns a clock whose Now is the real clock's plus offset, while
// timers, tickers and sleeps run in real time (their durations are
// relative). It exists for end-to-end tests of the built binary that need
// the daemon to live days ahead — retention folding week-old telemetry —
// without waiting for them (serve's hidden --clock-offset, loopback only;
// docs/operations.md, "Start-up and shutdown").
func Shifted(offset time.Duration) clockwork.Clock {
	return shifted{Clock: clockwork.NewRealClock(), offset: offset}
}

type shifted struct {
	clockwork.Clock
	offset time.Duration
}

func (s shifted) Now() time.Time                  { return s.Clock.Now().Add(s.offset) }
func (s shifted) Since(t time.Time) time.Duration { return s.Now().Sub(t) }
func (s shifted) Until(t time.Time) time.Duration { return t.Sub(s.Now()) }
