package daemon_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// TestHeartbeatWakesTheReaperOnlyForAnEarlierDeadline: an accepted
// heartbeat signals the reaper when the deadline it stored comes before
// the reaper's own wake-up (a new deployment; an earlier session expiry),
// and not when it moves the deadline later; a refused heartbeat never
// signals (docs/operations.md, "Reaper").
func TestHeartbeatWakesTheReaperOnlyForAnEarlierDeadline(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	sig := daemon.DeadlineActivity(h.App.Server)
	now := h.Clock.Now()
	pending := func() bool {
		select {
		case <-sig.C():
			return true
		default:
			return false
		}
	}
	send := func(o daemontest.HeartbeatOpts) int {
		t.Helper()
		o.Env, o.Deployment = "demo-harbor", "dep-1"
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(o)}).Status
	}

	// The reaper has published no wake-up: the first heartbeat signals.
	if st := send(daemontest.HeartbeatOpts{LastActivityAt: now.Add(-5 * time.Minute)}); st != http.StatusAccepted || !pending() {
		t.Fatalf("first heartbeat: %d, signalled=false; want 202 and a signal", st)
	}
	// The reaper now sleeps until that deadline (activity + 30 min).
	deadline := now.Add(25 * time.Minute).Truncate(time.Millisecond)
	sig.SleepUntil(deadline)
	if st := send(daemontest.HeartbeatOpts{LastActivityAt: now.Add(-time.Minute)}); st != http.StatusAccepted || pending() {
		t.Fatalf("heartbeat moving the deadline later: %d; it must not wake the reaper", st)
	}
	soon := now.Add(time.Minute)
	if st := send(daemontest.HeartbeatOpts{LastActivityAt: now.Add(-time.Minute), SessionExpiresAt: &soon}); st != http.StatusAccepted || !pending() {
		t.Fatalf("heartbeat with an earlier session expiry: %d; it must wake the reaper", st)
	}
	sig.SleepUntil(time.Time{})
	if st := send(daemontest.HeartbeatOpts{LastActivityAt: now.Add(-30 * 24 * time.Hour)}); st == http.StatusAccepted || pending() {
		t.Fatalf("a refused heartbeat: %d; it must not wake the reaper", st)
	}
}
