package daemon_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// steppedClock is a fake clock whose wall time the test steps apart from
// its timers and monotonic time (clockguard.Monotonic): what a
// wall-clock step does to a real server.
type steppedClock struct {
	*clockwork.FakeClock
	origin time.Time
	offset atomic.Int64
}

func (s *steppedClock) Now() time.Time                  { return s.FakeClock.Now().Add(time.Duration(s.offset.Load())) }
func (s *steppedClock) Since(t time.Time) time.Duration { return s.Now().Sub(t) }
func (s *steppedClock) Until(t time.Time) time.Duration { return t.Sub(s.Now()) }
func (s *steppedClock) Monotonic() time.Duration        { return s.FakeClock.Now().Sub(s.origin) }

// TestReaperClockSuspectSurfaces: a wall-clock step of the daemon's clock
// holds the reaper, and every surface says so: adminGetStatus,
// adminGetReaperStatus, one clock-suspect event, the
// chalupa_reaper_clock_suspect gauge and the console's banner
// (docs/operations.md, "Reaper").
func TestReaperClockSuspectSurfaces(t *testing.T) {
	ctx := context.Background()
	fake := dofake.New(t)
	token := fake.AddToken("write", dofake.FullAccess...)
	start := time.Now().UTC()
	clock := &steppedClock{FakeClock: clockwork.NewFakeClockAt(start), origin: start}
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock, Env: map[string]string{
		"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": token}})
	st, err := p.Admin.GetStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReaperClock.Suspect {
		t.Fatalf("before the step: %+v", st.ReaperClock)
	}
	metric := func() string {
		req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+p.Env[proctest.ReadyTokenVar])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "chalupa_reaper_clock_suspect ") {
				return l
			}
		}
		return "none"
	}

	clock.offset.Store(int64(10 * time.Minute))
	clock.Advance(time.Second)
	if _, err := p.Admin.RunReaperTick(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err = p.Admin.GetStatus(ctx); err != nil {
		t.Fatal(err)
	}
	if h := st.ReaperClock.Hold; !st.ReaperClock.Suspect || h == nil || h.Reason != "clock-step" || h.OffsetSeconds != 600 || !h.SessionsHeld {
		t.Fatalf("admin status after a +10m step: %+v", st.ReaperClock)
	}
	rs, err := p.Admin.GetReaperStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rs.Clock.Suspect || rs.MaxDestroyPerMinute != 10 {
		t.Fatalf("reaper status: %+v", rs)
	}
	ev, err := p.Admin.ListEvents(ctx, adminapi.ListEventsRequest{Kind: "clock-suspect"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Events) != 1 || ev.Events[0].Environment != "" || !strings.Contains(ev.Events[0].Message, "stepped 10m0s") {
		t.Fatalf("clock-suspect events %+v, want one for the fleet", ev.Events)
	}
	if m := metric(); m != "chalupa_reaper_clock_suspect 1" {
		t.Fatalf("gauge: %s", m)
	}
	setPassword(t, p)
	c := newConsoleClient(t, p)
	if resp := c.login(t, consolePassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login %d", resp.StatusCode)
	}
	if _, body := c.get(t, "/app"); !strings.Contains(body, `id="clock-suspect"`) || !strings.Contains(body, "the reaper destroys nothing") {
		t.Fatalf("the console does not show the clock guard:\n%s", body)
	}
}
