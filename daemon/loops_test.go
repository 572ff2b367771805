package daemon_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// daemon.Run hands its one clock to the registered loops and their metrics
// to GET /metrics. With an empty fleet the daemon is quiet: the timers on
// its clock are replication's idle check and the hourly retention pass's
// wait for minute 43, and ten minutes of clock (the
// nonce pruner's interval) pass without a prune tick, since there is no
// nonce to prune (ingest's TestNoncePrunerSleepsUntilActivity covers the
// wake-up).
func TestRunDrivesLoopsWithItsClock(t *testing.T) {
	env := proctest.NewSecrets()
	env["CHALUPA_DATA_DIR"] = t.TempDir()
	env["CHALUPA_LISTEN"] = "127.0.0.1:0"
	env["CHALUPA_REPLICA_URL"] = (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "replica")}).String()
	cfg, err := daemon.LoadConfig(envFunc(env))
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewFakeClockAt(time.Now().UTC().Truncate(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(rctx, cfg, daemon.RunOptions{Logs: io.Discard, Clock: clock, Listening: func(a string) { addr <- a }})
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("Run exited: %v", err)
	case <-ctx.Done():
		t.Fatal("Run did not listen")
	}
	ticks := func() string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+env["CHALUPA_READY_TOKEN"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		m := regexp.MustCompile(`(?m)^chalupa_nonce_prune_ticks_total\{result="ok"\} (\S+)$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("/metrics lacks chalupa_nonce_prune_ticks_total{result=\"ok\"}:\n%s", b)
		}
		return string(m[1])
	}
	// Replication's idle check (and the retention pass's wait) are the
	// daemon's timers.
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := ticks(); got != "0" {
		t.Fatalf("%s prune ticks before the clock moved", got)
	}
	for range ingest.PruneInterval / time.Minute {
		clock.Advance(time.Minute)
		if err := clock.BlockUntilContext(ctx, 1); err != nil { // the next idle check is scheduled
			t.Fatal(err)
		}
	}
	if got := ticks(); got != "0" {
		t.Fatalf("%s prune ticks with no nonce stored, want 0 (the pruner sleeps without a timer)", got)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after cancel", err)
	}
}
