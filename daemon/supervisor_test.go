package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/internal/testwait"
)

// waitFor bounds every wait on the supervisor's goroutines: a hang fails the
// test instead of timing out the package. Nothing sleeps for real; time moves
// only when the test advances the fake clock.
const waitFor = 10 * time.Second

var supervisorEpoch = time.Date(2026, 3, 10, 10, 0, 0, 0, time.UTC)

// testLoop is a Loop whose Run reports each start (at the fake clock's time)
// on starts and then does whatever run says.
type testLoop struct {
	name    string
	clock   clockwork.Clock
	starts  chan time.Time
	running atomic.Int32
	calls   atomic.Int32
	run     func(ctx context.Context, call int) error
}

func newTestLoop(name string, clock clockwork.Clock, run func(ctx context.Context, call int) error) *testLoop {
	return &testLoop{name: name, clock: clock, starts: make(chan time.Time, 100), run: run}
}

func (l *testLoop) Name() string { return l.name }

func (l *testLoop) Run(ctx context.Context) error {
	l.running.Add(1)
	defer l.running.Add(-1)
	call := int(l.calls.Add(1))
	l.starts <- l.clock.Now()
	return l.run(ctx, call)
}

// started waits for the loop's next start and returns its clock time.
func (l *testLoop) started(t *testing.T) time.Time {
	t.Helper()
	select {
	case at := <-l.starts:
		return at
	case <-time.After(waitFor):
		t.Fatalf("loop %s did not start", l.name)
		return time.Time{}
	}
}

// notStarted fails if the loop has started again. Only meaningful while the
// supervisor is parked on a fake-clock timer that has not fired.
func (l *testLoop) notStarted(t *testing.T, why string) {
	t.Helper()
	select {
	case at := <-l.starts:
		t.Fatalf("loop %s started at %s: %s", l.name, at.Format(time.RFC3339Nano), why)
	default:
	}
}

func failing(ctx context.Context, call int) error { return fmt.Errorf("fault %d", call) }

func untilDone(ctx context.Context, _ int) error { <-ctx.Done(); return nil }

// lockedBuffer collects the supervisor's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startTestSupervisor starts loops under a fake clock; cleanup stops them.
func startTestSupervisor(t *testing.T, ctx context.Context, clock clockwork.Clock, loops ...Loop) (*supervisor, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	sup := startSupervisor(ctx, zerolog.New(logs), clock, loops)
	t.Cleanup(func() { stopWithin(t, sup) })
	return sup, logs
}

// stopWithin calls sup.stop and fails the test if it does not return.
func stopWithin(t *testing.T, sup *supervisor) {
	t.Helper()
	done := make(chan struct{})
	go func() { sup.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("supervisor.stop did not return")
	}
}

// pauseClock is the supervisor's fake clock; it reports the duration of
// every timer the supervisor sets (its back-off pauses), once the timer is
// pending. Loops use the embedded FakeClock, so their timers go unreported.
type pauseClock struct {
	*clockwork.FakeClock
	pauses chan time.Duration
}

func newPauseClock() *pauseClock {
	return &pauseClock{FakeClock: clockwork.NewFakeClockAt(supervisorEpoch), pauses: make(chan time.Duration, 100)}
}

func (c *pauseClock) NewTimer(d time.Duration) clockwork.Timer {
	t := c.FakeClock.NewTimer(d)
	c.pauses <- d
	return t
}

// pause waits for the supervisor's next back-off timer and returns its length.
func (c *pauseClock) pause(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.pauses:
		return d
	case <-time.After(waitFor):
		t.Fatal("the supervisor set no back-off timer")
		return 0
	}
}

// parked waits until n timers are pending on the fake clock.
func parked(t *testing.T, clock *clockwork.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers on the fake clock: %v", n, err)
	}
}

// restartAfter checks that after a failure the supervisor pauses for exactly
// pause, that the loop has not restarted one ns before the pause ends, and
// that it restarts once the pause has passed.
func restartAfter(t *testing.T, clock *pauseClock, l *testLoop, prev time.Time, pause time.Duration) time.Time {
	t.Helper()
	if got := clock.pause(t); got != pause {
		t.Fatalf("back-off %v after start %d, want %v", got, l.calls.Load(), pause)
	}
	clock.Advance(pause - time.Nanosecond)
	l.notStarted(t, fmt.Sprintf("before its %v back-off passed", pause))
	clock.Advance(time.Nanosecond)
	at := l.started(t)
	if got := at.Sub(prev); got != pause {
		t.Fatalf("restarted %v after the previous start, want %v", got, pause)
	}
	return at
}

func TestNextBackoff(t *testing.T) {
	for _, c := range []struct {
		name      string
		prev, ran time.Duration
		want      time.Duration
	}{
		{"first failure", 0, 0, restartBackoffMin},
		{"first failure after a long run", 0, time.Hour, restartBackoffMin},
		{"doubles", time.Second, 0, 2 * time.Second},
		{"doubles after a short run", 8 * time.Second, restartBackoffReset - time.Nanosecond, 16 * time.Second},
		{"capped", 4 * time.Minute, 0, restartBackoffMax},
		{"stays capped", restartBackoffMax, 0, restartBackoffMax},
		{"healthy run resets", restartBackoffMax, restartBackoffReset, restartBackoffMin},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := nextBackoff(c.prev, c.ran); got != c.want {
				t.Fatalf("nextBackoff(%v, %v) = %v, want %v", c.prev, c.ran, got, c.want)
			}
		})
	}
}

// A loop that keeps failing is restarted each time, after 1 s, 2 s, 4 s, …
// up to the 5-minute cap, measured on the supervisor's clock.
func TestSupervisorRestartsFailingLoopWithGrowingBackoff(t *testing.T) {
	clock := newPauseClock()
	l := newTestLoop("flaky", clock.FakeClock, failing)
	_, logs := startTestSupervisor(t, context.Background(), clock, l)

	prev := l.started(t)
	if !prev.Equal(supervisorEpoch) {
		t.Fatalf("first start at %s, want at once", prev)
	}
	pauses := []time.Duration{
		time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second,
		restartBackoffMax, restartBackoffMax,
	}
	for i, pause := range pauses {
		prev = restartAfter(t, clock, l, prev, pause)
		if got := int(l.calls.Load()); got != i+2 {
			t.Fatalf("after restart %d Run was called %d times", i+1, got)
		}
	}
	if n := strings.Count(logs.String(), `"loop":"flaky"`); n < len(pauses) {
		t.Errorf("%d failure log lines for %d failures:\n%s", n, len(pauses), logs)
	}
	if !strings.Contains(logs.String(), "fault 1") {
		t.Errorf("the loop's error is not logged:\n%s", logs)
	}
}

// A loop that ran healthily for restartBackoffReset before failing starts
// its back-off again from the minimum.
func TestSupervisorResetsBackoffAfterHealthyRun(t *testing.T) {
	clock := newPauseClock()
	l := newTestLoop("recovers", clock.FakeClock, func(ctx context.Context, call int) error {
		if call == 4 {
			select {
			case <-clock.After(restartBackoffReset):
			case <-ctx.Done():
				return nil
			}
		}
		return fmt.Errorf("fault %d", call)
	})
	startTestSupervisor(t, context.Background(), clock, l)

	prev := l.started(t)
	prev = restartAfter(t, clock, l, prev, time.Second)
	prev = restartAfter(t, clock, l, prev, 2*time.Second)
	prev = restartAfter(t, clock, l, prev, 4*time.Second)
	// Call 4 runs healthily (its own timer is the clock's one waiter), then fails.
	parked(t, clock.FakeClock, 1)
	clock.Advance(restartBackoffReset)
	prev = prev.Add(restartBackoffReset)
	prev = restartAfter(t, clock, l, prev, time.Second)
	restartAfter(t, clock, l, prev, 2*time.Second)
}

// A loop whose Run returns nil while the daemon is still running stopped
// without being told to: that is a failure, restarted like one. A panic is
// too, and does not take the process down.
func TestSupervisorRestartsLoopThatReturnsEarlyOrPanics(t *testing.T) {
	for name, run := range map[string]func(context.Context, int) error{
		"returns nil early": func(context.Context, int) error { return nil },
		"panics":            func(context.Context, int) error { panic("loop bug") },
	} {
		t.Run(name, func(t *testing.T) {
			clock := newPauseClock()
			l := newTestLoop("quitter", clock.FakeClock, run)
			_, logs := startTestSupervisor(t, context.Background(), clock, l)
			prev := l.started(t)
			prev = restartAfter(t, clock, l, prev, time.Second)
			restartAfter(t, clock, l, prev, 2*time.Second)
			want := errReturnedEarly.Error()
			if name == "panics" {
				want = "panic: loop bug"
			}
			if !strings.Contains(logs.String(), want) {
				t.Errorf("logs lack %q:\n%s", want, logs)
			}
		})
	}
}

// stop cancels every loop, whether running or waiting out a back-off, waits
// until each Run has returned, and restarts none of them.
func TestSupervisorStopStopsAllLoops(t *testing.T) {
	clock := newPauseClock()
	idle := newTestLoop("idle", clock.FakeClock, untilDone)
	ctxErr := newTestLoop("ctx-err", clock.FakeClock, func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() })
	var slowReturned atomic.Bool
	draining, release := make(chan struct{}), make(chan struct{})
	slow := newTestLoop("slow-to-stop", clock.FakeClock, func(ctx context.Context, _ int) error {
		<-ctx.Done()
		// Still draining after stop cancelled it, until the test lets it
		// finish: stop must wait for it.
		close(draining)
		<-release
		slowReturned.Store(true)
		return nil
	})
	backingOff := newTestLoop("backing-off", clock.FakeClock, failing)
	loops := []*testLoop{idle, ctxErr, slow, backingOff}
	sup, _ := startTestSupervisor(t, context.Background(), clock, idle, ctxErr, slow, backingOff)
	for _, l := range loops {
		l.started(t)
	}
	if d := clock.pause(t); d != restartBackoffMin { // backingOff waits out its first back-off
		t.Fatalf("first back-off %v", d)
	}

	stopped := make(chan struct{})
	go func() { sup.stop(); close(stopped) }()
	<-draining
	// Every other Run returns once cancelled; a stop that did not wait for
	// the slow one would have returned by then.
	for _, l := range []*testLoop{idle, ctxErr, backingOff} {
		testwait.Eventually(t, testwait.Short, "loop "+l.name+" to return", func() (bool, string) {
			n := l.running.Load()
			return n == 0, fmt.Sprintf("%d Runs running", n)
		})
	}
	select {
	case <-stopped:
		t.Error("stop returned while a loop's Run was still draining")
	default:
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(waitFor):
		t.Fatal("supervisor.stop did not return")
	}
	if !slowReturned.Load() {
		t.Error("stop returned before a loop's Run did")
	}
	for _, l := range loops {
		if n := l.running.Load(); n != 0 {
			t.Errorf("loop %s: %d Runs still running after stop", l.name, n)
		}
		if n := l.calls.Load(); n != 1 {
			t.Errorf("loop %s: Run called %d times, want 1 (no restart on shutdown)", l.name, n)
		}
	}
	// Time passing after stop restarts nothing.
	clock.Advance(time.Hour)
	for _, l := range loops {
		l.notStarted(t, "after stop")
	}
}

// When the daemon's own context ends (SIGTERM), a loop that returns, with
// nil or with an error, is not restarted.
func TestSupervisorDoesNotRestartAfterContextEnds(t *testing.T) {
	for name, ret := range map[string]error{"nil": nil, "an error": errors.New("interrupted mid-tick")} {
		t.Run("returns "+name, func(t *testing.T) {
			clock := newPauseClock()
			ctx, cancel := context.WithCancel(context.Background())
			l := newTestLoop("stopping", clock.FakeClock, func(ctx context.Context, _ int) error { <-ctx.Done(); return ret })
			sup, logs := startTestSupervisor(t, ctx, clock, l)
			l.started(t)
			cancel()
			stopWithin(t, sup)
			clock.Advance(time.Hour)
			l.notStarted(t, "after its context ended")
			if n := l.calls.Load(); n != 1 {
				t.Fatalf("Run called %d times, want 1", n)
			}
			if len(clock.pauses) != 0 || strings.Contains(logs.String(), "restarting") {
				t.Errorf("a shutdown was logged as a failure:\n%s", logs)
			}
		})
	}
}
