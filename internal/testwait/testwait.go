// Package testwait is the one way chalupa's tests wait for something to
// happen: Eventually asks a condition again and again until it holds or a
// named bound has passed, and a failure names what was awaited and the last
// state the condition described (docs/architecture.md, "Tests").
//
// A bound is a guard against a hang, never a speed goal: speed goals live
// in benchmarks and contrib scripts. The bounds are therefore generous —
// what a 2-vCPU machine running the whole suite beside a CPU-bound loop
// still meets — and there are three, named for what is awaited, so that a
// test says why it may wait that long instead of picking a number.
//
// A test does not sleep to let something settle: it waits with Eventually
// for the event that ends the settling, or drives the injected clock.
//
// The package is a leaf (the standard library only), so any package's
// tests can use it.
package testwait

import (
	"testing"
	"time"
)

// Bound is how long Eventually waits before it fails the test.
type Bound time.Duration

// The named bounds.
const (
	// Short bounds an event inside the test's own process: a goroutine
	// reaching a point, a loop's pass on the real clock, a SQLite commit,
	// an HTTP round trip to an in-process server. It takes milliseconds;
	// 30 s leaves room for the race detector on a loaded 2-vCPU machine.
	Short = Bound(30 * time.Second)
	// Long bounds an event that passes through another process or a real
	// tool: the built daemon, Litestream replicating to versitygw (sync
	// intervals of seconds, retries with backoff after an outage), a
	// restore, an agent shipping its spool. 5 minutes covers the slowest
	// of these under load (a replica re-seeded after an outage; a
	// benchmark's agent shipping hundreds of MiB of logs).
	Long = Bound(5 * time.Minute)
	// Converge bounds a Pulumi run through the real pulumi CLI and its
	// provider plugin, including a recovery that runs a second attempt
	// after the first was killed: each run starts plugins and walks two
	// stacks, a minute or two on a loaded machine.
	Converge = Bound(10 * time.Minute)
)

// String is the bound as a duration ("30s").
func (b Bound) String() string { return time.Duration(b).String() }

// The pause between two asks starts at firstInterval and doubles up to
// maxInterval: an in-process event is seen within a millisecond or two,
// and a wait of minutes asks a real process no more than ten times a second.
const (
	firstInterval = time.Millisecond
	maxInterval   = 100 * time.Millisecond
)

// Until asks cond until it reports true or bound has passed since the first
// ask, and returns cond's last answer. It needs no testing.TB, so it serves
// a goroutine other than the test's (a benchmark's poller); tests call
// Eventually.
func Until(bound Bound, cond func() (ok bool, state string)) (ok bool, state string) {
	deadline := time.Now().Add(time.Duration(bound))
	pause := firstInterval
	for {
		if ok, state = cond(); ok || time.Now().After(deadline) {
			return ok, state
		}
		time.Sleep(pause)
		pause = min(2*pause, maxInterval)
	}
}

// Eventually asks cond until it reports true; when bound passes first it
// fails the test with "timed out after <bound> waiting for <what>; last
// state: <state>". what says what is awaited ("the droplet destroyed");
// state is cond's description of what it saw instead. cond runs on the
// caller's goroutine, so it may call t.Fatal on an unexpected error.
func Eventually(t testing.TB, bound Bound, what string, cond func() (ok bool, state string)) {
	t.Helper()
	if ok, state := Until(bound, cond); !ok {
		t.Fatalf("timed out after %s waiting for %s; last state: %s", bound, what, state)
	}
}
