package daemon_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// loopStates maps each switchable loop to whether status reports it paused.
func loopStates(t *testing.T, c *adminapi.Client) map[string]bool {
	t.Helper()
	st, err := c.GetStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range st.Loops {
		out[l.Name] = l.Paused
	}
	if len(out) != len(daemon.SwitchableLoops) {
		t.Fatalf("status lists loops %v, want all of %v", st.Loops, daemon.SwitchableLoops)
	}
	return out
}

// switchEvents returns the messages of the loop switch events, newest first.
func switchEvents(t *testing.T, c *adminapi.Client) []string {
	t.Helper()
	var out []string
	for _, kind := range []string{daemon.LoopPausedKind, daemon.LoopResumedKind} {
		l, err := c.ListEvents(context.Background(), adminapi.ListEventsRequest{Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Events {
			out = append(out, e.Kind+": "+e.Message)
		}
	}
	return out
}

// get fetches path from p with the ready bearer and returns the body.
func getProbe(t *testing.T, p *daemontest.InProcess, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+p.Env[proctest.ReadyTokenVar])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLoopSwitches: a loop paused at start (serve --pause-loops) or through
// the admin API is shown paused by status and metrics, recorded once as a
// lifecycle event, stays paused across a restart without the flag until
// resumed, and leaves the readiness body exactly as it was; an unknown name
// or one of ingest's loops is refused and writes nothing.
func TestLoopSwitches(t *testing.T) {
	ctx := context.Background()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{PauseLoops: []string{daemon.LoopRetention}})
	_, readyBefore := getProbe(t, p, "/api/ready")

	if got := loopStates(t, p.Admin); !got["retention"] || got["reaper"] || got["costs"] || got["jobs"] {
		t.Fatalf("after --pause-loops retention: %v", got)
	}
	sw, err := p.Admin.PauseLoop(ctx, "reaper")
	if err != nil || !sw.Paused || !sw.Changed {
		t.Fatalf("pause reaper: %+v, %v", sw, err)
	}
	if sw, err = p.Admin.PauseLoop(ctx, "reaper"); err != nil || !sw.Paused || sw.Changed {
		t.Fatalf("pause reaper again: %+v, %v; want paused, unchanged", sw, err)
	}
	for _, name := range []string{"ingest", "nonce-prune", "quota-events", "jobs-watch", ""} {
		t.Run("refused "+name, func(t *testing.T) {
			_, err := p.Admin.PauseLoop(ctx, name)
			var ae *adminapi.APIError
			if name != "" && (!errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != "unknown_loop") {
				t.Fatalf("pause %q: %v, want 404 unknown_loop", name, err)
			}
			if err == nil {
				t.Fatalf("pause %q accepted", name)
			}
		})
	}
	events := switchEvents(t, p.Admin)
	if len(events) != 2 || !strings.Contains(strings.Join(events, "|"), "loop retention paused (serve --pause-loops)") ||
		!strings.Contains(strings.Join(events, "|"), "loop reaper paused (admin)") {
		t.Fatalf("events after two pauses, one repeat and refusals: %q", events)
	}
	_, m := getProbe(t, p, "/metrics")
	for _, want := range []string{`chalupa_loop_paused{loop="retention"} 1`, `chalupa_loop_paused{loop="reaper"} 1`, `chalupa_loop_paused{loop="costs"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if code, ready := getProbe(t, p, "/api/ready"); code != http.StatusOK || ready != readyBefore {
		t.Fatalf("ready with loops paused: %d %q, want the body before: %q", code, ready, readyBefore)
	}

	p.Restart(daemontest.AppOptions{})
	if got := loopStates(t, p.Admin); !got["retention"] || !got["reaper"] {
		t.Fatalf("after restart without --pause-loops: %v, want retention and reaper still paused", got)
	}
	if sw, err = p.Admin.ResumeLoop(ctx, "retention"); err != nil || sw.Paused || !sw.Changed {
		t.Fatalf("resume retention: %+v, %v", sw, err)
	}
	p.Restart(daemontest.AppOptions{})
	if got := loopStates(t, p.Admin); got["retention"] || !got["reaper"] {
		t.Fatalf("after resume and restart: %v, want retention running, reaper paused", got)
	}
	if events = switchEvents(t, p.Admin); len(events) != 3 || !strings.HasPrefix(events[2], "loop-resumed: loop retention resumed (admin)") {
		t.Fatalf("events after resume: %q", events)
	}
}

// TestParseLoopNames: --pause-loops accepts the switchable loops only.
func TestParseLoopNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"reaper,retention,costs,jobs", "reaper retention costs jobs", true},
		{" jobs , jobs,", "jobs", true},
		{"", "", true},
		{"reaper,ingest", "", false},
		{"nonce-prune", "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := daemon.ParseLoopNames(tc.in)
			if (err == nil) != tc.ok || (tc.ok && strings.Join(got, " ") != tc.want) {
				t.Fatalf("ParseLoopNames(%q) = %v, %v", tc.in, got, err)
			}
			if !tc.ok && !errors.Is(err, daemon.ErrUnknownLoop) {
				t.Fatalf("error %v is not ErrUnknownLoop", err)
			}
		})
	}
}
