package e2e

// End-to-end test of the clock guard against large offsets
// (docs/operations.md, "Reaper"): the built binary restarted with its clock
// beyond the 300 s signing window — ahead and behind — while agents keep
// heartbeating on the real clock, then restarted with the clock right.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/reaper"
)

// TestReaperLargeServerClockOffset: agents whose users are active (limits
// of 1 and 2 minutes) and one that dies (limit 5 minutes) report to a daemon on the real
// clock; the daemon restarts with its clock +10 minutes, −10 minutes or
// +2 hours off, so every live heartbeat is refused for its timestamp. For
// the start-up grace and the 2-minute limit beyond it no live droplet is
// DELETEd, nor the dead one, whose limit has not passed in real time.
// Restarted with the clock right, the dead agent's droplet is DELETEd at
// its limit, within its limit and the grace of that restart, and the live
// droplets still never are.
func TestReaperLargeServerClockOffset(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	for _, offset := range []time.Duration{10 * time.Minute, -10 * time.Minute, 2 * time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			testReaperLargeServerClockOffset(t, bin, offset)
		})
	}
}

func testReaperLargeServerClockOffset(t *testing.T, bin string, offset time.Duration) {
	const slug = "demo-large-offset"
	// cadence is the live agents' heartbeat interval: a third of the
	// agent's 30 s, so a lapse in their holds shows within seconds.
	const cadence = 10 * time.Second
	ctx := context.Background()
	fake := dofake.New(t)
	writeToken := fake.AddToken("write", dofake.FullAccess...)
	d := proctest.StartDaemon(t, bin, map[string]string{"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": writeToken})
	k := daemontest.EnvironmentKey(t, d.Admin(), slug)
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	newAgent := func(name string, limit int64) offsetAgent {
		return offsetAgent{dep: "dep-" + name, droplet: fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags(slug)}).ID, limit: limit}
	}
	live := []offsetAgent{newAgent("live-1", 1), newAgent("live-2", 2)}
	// The dead agent's limit (5 minutes) outlasts the wrong clock's run:
	// a DELETE then would be the offset's doing, not the agent's silence.
	dead := newAgent("dead", 5)
	// beat sends a's heartbeat as the agent does: its user active this
	// second, sentAt and the signature from the real clock. A daemon
	// between two runs answers nothing (0); the agent beats again later.
	beat := func(url string, a offsetAgent) int {
		now := time.Now().UTC()
		body, _ := json.Marshal(protocol.HeartbeatV1{
			EnvironmentSlug: slug, AgentVersion: "e2e/1", SentAt: now,
			Deployment: protocol.HeartbeatDeploy{ID: a.dep, DropletID: int64(a.droplet)},
			Reaper:     protocol.ReaperObservation{LimitMinutes: a.limit, LastActivityAt: now.Truncate(time.Second)},
		})
		resp, err := (&protocol.Client{BaseURL: url, KeyID: k.KeyID, Key: raw}).Post(ctx, ingest.HeartbeatRoute, body)
		if err != nil {
			return 0
		}
		return resp.Status
	}
	for _, a := range append([]offsetAgent{dead}, live...) {
		if st := beat(d.URL, a); st != http.StatusAccepted {
			t.Fatalf("%s's heartbeat on the real clock: %d", a.dep, st)
		}
	}
	deadBeat := time.Now()
	ingestE2EStop(t, d)

	// The live agents keep their cadence against whichever daemon runs.
	var target atomic.Value
	var refused atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(cadence) // the agents' cadence, not a settle wait
		defer tk.Stop()
		for {
			if url, _ := target.Load().(string); url != "" {
				for _, a := range live {
					if beat(url, a) == http.StatusUnauthorized {
						refused.Add(1)
					}
				}
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	liveDeleted := func() []string {
		var out []string
		for _, a := range live {
			if _, ok := fake.Droplet(a.droplet); !ok {
				out = append(out, a.dep)
			}
		}
		return out
	}

	off := proctest.StartDaemon(t, bin, d.EnvCopy(), "--clock-offset="+offset.String())
	target.Store(off.URL)
	// The grace (60 s) and the longer limit (2 minutes) beyond the
	// restart: a lapse in any hold would have DELETEd a live droplet by then.
	for end := time.Now().Add(reaper.DefaultGrace + 2*time.Minute); time.Now().Before(end); {
		if gone := liveDeleted(); len(gone) > 0 {
			t.Fatalf("live droplets of %v DELETEd with the clock %s off", gone, offset)
		}
		time.Sleep(time.Second) // sampling the provider, not a settle wait
	}
	if refused.Load() == 0 {
		t.Fatalf("no live heartbeat was refused with the clock %s off: the offset did not apply", offset)
	}
	_, deadGoneEarly := fake.Droplet(dead.droplet)
	deadGoneEarly = !deadGoneEarly
	target.Store("")
	ingestE2EStop(t, off)

	rightAt := time.Now()
	right := proctest.StartDaemon(t, bin, d.EnvCopy())
	t.Cleanup(func() { ingestE2EStop(t, right) })
	target.Store(right.URL)
	deadPath := "/v2/droplets/" + strconv.Itoa(dead.droplet)
	if !deadGoneEarly {
		testwait.Eventually(t, testwait.Long, "the dead droplet DELETEd after the clock is right", func() (bool, string) {
			_, ok := fake.Droplet(dead.droplet)
			return !ok, fmt.Sprint(fake.Deletes())
		})
	}
	var at time.Time
	for _, r := range fake.Deletes() {
		if r.Path == deadPath && at.IsZero() {
			at = r.At
		}
	}
	deadLimit := time.Duration(dead.limit) * time.Minute
	// Its activity was up to a second before the heartbeat (the agent
	// truncates to whole seconds), which arrived before deadBeat.
	if at.Before(deadBeat.Add(deadLimit - 2*time.Second)) {
		t.Errorf("the dead droplet DELETEd %s after its last heartbeat, before its %s limit", at.Sub(deadBeat).Round(time.Second), deadLimit)
	}
	// Within its limit and the grace of the restart with the clock right
	// (+30 s of start-up and a tick).
	if after := at.Sub(rightAt); !deadGoneEarly && after > deadLimit+reaper.DefaultGrace+30*time.Second {
		t.Errorf("the dead droplet DELETEd %s after the clock was right, want within its %s limit and the grace %s (+30 s of start-up)", after.Round(time.Second), deadLimit, reaper.DefaultGrace)
	}
	// A tick and more with the clock right: the live droplets stay.
	end := time.Now().Add(2 * cadence)
	for time.Now().Before(end) {
		time.Sleep(time.Second) // sampling the provider, not a settle wait
	}
	if gone := liveDeleted(); len(gone) > 0 {
		t.Fatalf("live droplets of %v DELETEd after the clock was right", gone)
	}
	t.Logf("clock %s off: 0 live DELETEs; the dead droplet DELETEd %s after its last heartbeat (%s the clock was right)",
		offset, at.Sub(deadBeat).Round(time.Second), map[bool]string{true: "before", false: at.Sub(rightAt).Round(time.Second).String() + " after"}[deadGoneEarly])
}
