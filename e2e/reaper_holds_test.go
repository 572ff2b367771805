package e2e

// End-to-end test of holds that end (docs/operations.md, "Reaper"): a hold
// the built binary stored while its clock ran two hours ahead (serve's
// hidden, loopback-only --clock-offset) ends within its maximum of the
// clock being right.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/reaper"
)

// TestReaperHoldUnderWrongClockEnds: two agents with one-minute limits
// report to a daemon on the real clock; one then stops. The daemon
// restarts two hours ahead and holds both due deployments for the
// start-up grace, stored two hours too late; `admin reaper status` lists
// the dead one's hold with its reason and end. Restarted with the clock
// right, that hold is re-anchored (a reaper-hold-reanchored event) and the
// dead agent's droplet is DELETEd within the grace of the restart (before
// holds ended: never within the observation); the live droplet never is.
func TestReaperHoldUnderWrongClockEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := proctest.BuildBinary(t)
	fake := dofake.New(t)
	writeToken := fake.AddToken("write", dofake.FullAccess...)
	d := proctest.StartDaemon(t, bin, map[string]string{"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": writeToken})
	k := daemontest.EnvironmentKey(t, d.Admin(), "demo-holds")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	live := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-holds")}).ID
	dead := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-holds")}).ID
	// beat sends one heartbeat on the real clock, activity 5 s old.
	beat := func(url, deployment string, droplet int) int {
		now := time.Now().UTC()
		body, _ := json.Marshal(map[string]any{
			"environmentSlug": "demo-holds", "agentVersion": "e2e/1", "sentAt": now,
			"deployment": map[string]any{"id": deployment, "dropletId": droplet},
			"reaper":     map[string]any{"idleChecks": 1, "limitMinutes": 1, "lastActivityAt": now.Add(-5 * time.Second), "ciActive": false},
		})
		resp, err := (&protocol.Client{BaseURL: url, KeyID: k.KeyID, Key: raw}).Post(ctx, ingest.HeartbeatRoute, body)
		if err != nil {
			return 0 // the daemon between two runs: the agent retries at its next beat
		}
		return resp.Status
	}
	if a, b := beat(d.URL, "dep-live", live), beat(d.URL, "dep-dead", dead); a != http.StatusAccepted || b != http.StatusAccepted {
		t.Fatalf("heartbeats on the real clock: %d %d, want 202s", a, b)
	}
	ingestE2EStop(t, d)

	// The live agent keeps its cadence against whichever daemon runs.
	var target atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(10 * time.Second) // the agent's cadence, not a settle wait
		defer tk.Stop()
		for {
			if url, _ := target.Load().(string); url != "" {
				beat(url, "dep-live", live)
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	ahead := proctest.StartDaemon(t, bin, d.EnvCopy(), "--clock-offset", "2h")
	target.Store(ahead.URL)
	var hold adminapi.ReaperHeld
	testwait.Eventually(t, testwait.Long, "the dead deployment held under +2 h", func() (bool, string) {
		st, err := ahead.Admin().GetReaperStatus(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, h := range st.Held {
			if h.Deployment == "dep-dead" {
				hold = h
				return true, ""
			}
		}
		return false, fmt.Sprintf("held %+v", st.Held)
	})
	// Stopped within the grace, before it ends under the wrong clock.
	ingestE2EStop(t, ahead)
	if hold.Reason != reaper.HoldGrace || hold.MaxSeconds != reaper.DefaultGrace.Seconds() || hold.Until.Before(time.Now().Add(time.Hour)) || hold.Evidence == "" {
		t.Fatalf("the hold stored under +2 h: %+v, want the grace, ending two hours ahead, with its evidence", hold)
	}
	if del := fake.Deletes(); len(del) != 0 {
		t.Fatalf("DELETEs %v under +2 h within the grace", del)
	}

	rightAt := time.Now()
	right := proctest.StartDaemon(t, bin, d.EnvCopy())
	t.Cleanup(func() { ingestE2EStop(t, right) })
	target.Store(right.URL)
	deadPath := "/v2/droplets/" + strconv.Itoa(dead)
	testwait.Eventually(t, testwait.Long, "the dead droplet DELETEd after the clock is right", func() (bool, string) {
		del := fake.Deletes()
		return len(del) > 0, fmt.Sprint(del)
	})
	del := fake.Deletes()
	if len(del) != 1 || del[0].Path != deadPath {
		t.Fatalf("DELETEs %v, want only the dead agent's droplet %d", del, dead)
	}
	// The grace from the restart, and a start-up's and a tick's slack.
	if after := del[0].At.Sub(rightAt); after > reaper.DefaultGrace+30*time.Second {
		t.Fatalf("the dead droplet DELETEd %v after the clock was right, want within the grace %v (+30 s of start-up)", after, reaper.DefaultGrace)
	} else {
		t.Logf("the dead droplet DELETEd %v after the restart with the clock right", after)
	}
	ev, err := right.Admin().ListEvents(ctx, adminapi.ListEventsRequest{Kind: reaper.KindHoldReanchored})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range ev.Events {
		found = found || e.Deployment == "dep-dead"
	}
	if !found {
		t.Fatalf("reaper-hold-reanchored events %+v, want one for dep-dead", ev.Events)
	}
	if _, ok := fake.Droplet(live); !ok {
		t.Fatal("the live droplet was destroyed")
	}
}
