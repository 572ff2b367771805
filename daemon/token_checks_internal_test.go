package daemon

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/digitalocean/tokencheck"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// TestTokenChecksLoopIsHourly: the token-check loop checks each token at
// start, then waits on one timer and checks again only when an hour has
// passed, never sooner on its own (docs/operations.md, "Alerts").
func TestTokenChecksLoopIsHourly(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var calls atomic.Int64
	probe := func(context.Context) error { calls.Add(1); return nil }
	tc := &tokenChecks{clock: clock, log: zerolog.Nop(),
		checkers: []*tokencheck.Checker{tokencheck.New(readTokenVariable, probe, nil, clock, zerolog.Nop())}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tc.Run(ctx) }()
	waitRound := func(n int) {
		t.Helper()
		testwait.Eventually(t, testwait.Short, fmt.Sprintf("round %d", n), func() (bool, string) {
			return tc.rounds() >= n, fmt.Sprintf("%d rounds", tc.rounds())
		})
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitRound(1)
	if calls.Load() != 1 {
		t.Fatalf("%d checks at start, want 1", calls.Load())
	}
	clock.Advance(tokencheck.Interval - time.Second)
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if tc.rounds() != 1 || calls.Load() != 1 {
		t.Fatalf("before the hour: %d rounds, %d checks", tc.rounds(), calls.Load())
	}
	clock.Advance(time.Second)
	waitRound(2)
	if calls.Load() != 2 {
		t.Fatalf("%d checks after an hour, want 2", calls.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
