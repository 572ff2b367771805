package e2e

// End-to-end test of deadlines from elapsed time (docs/operations.md,
// "Heartbeats and deadlines"): the built binary restarted with its clock a
// little off — under the 300 s signing window, so nothing is refused and
// no step is seen — while agents keep heartbeating on the real clock.

import (
	"context"
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// offsetAgent is one droplet's agent on the real clock.
type offsetAgent struct {
	dep     string
	droplet int
	limit   int64
}

// TestReaperSmallServerClockOffset: agents whose users are active, with
// limits of 1 and 2 minutes, report to a daemon on the real clock; the
// daemon restarts with its clock 61 s, 4 minutes or −4 minutes off. Each
// heartbeat after the restart is answered with a deadline of the daemon's
// own time plus the limit (its activity placed by its age, not by the
// agent's clock), and for 2.5 minutes — a 2-minute limit and an interval
// beyond — no live droplet is DELETEd. A third agent heartbeats once
// after the restart and dies: with the clock ahead its droplet is DELETEd
// one limit after that heartbeat, neither sooner nor much later (the
// reaper runs and judges on the server's clock). With the clock behind the
// last mark a start is a step back, which holds the reaper by itself, so
// there only the live droplets are checked. On today's code the daemon
// 61 s ahead DELETEd the 1-minute droplet, and 4 minutes ahead both, within
// seconds of the restart.
func TestReaperSmallServerClockOffset(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	for _, offset := range []time.Duration{61 * time.Second, 4 * time.Minute, -4 * time.Minute} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			testReaperServerClockOffset(t, bin, offset)
		})
	}
}

func testReaperServerClockOffset(t *testing.T, bin string, offset time.Duration) {
	const slug = "demo-offset"
	// cadence is the agents' heartbeat interval here: a third of the
	// agent's 30 s, so a deadline error shows within seconds.
	const cadence = 10 * time.Second
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
	dead := newAgent("dead", 1)
	// beat sends a's heartbeat as the agent does: its user active this
	// second, sentAt and the signature from the real clock. It returns the
	// status, and for a 202 how far the answered deadline lies from the
	// daemon's own time + the limit.
	beat := func(d *proctest.Daemon, a offsetAgent) (int, time.Duration) {
		t.Helper()
		now := time.Now().UTC()
		body, _ := json.Marshal(protocol.HeartbeatV1{
			EnvironmentSlug: slug, AgentVersion: "e2e/1", SentAt: now,
			Deployment: protocol.HeartbeatDeploy{ID: a.dep, DropletID: int64(a.droplet)},
			Reaper:     protocol.ReaperObservation{LimitMinutes: a.limit, LastActivityAt: now.Truncate(time.Second)},
		})
		cl := &protocol.Client{BaseURL: d.URL, KeyID: k.KeyID, Key: raw}
		resp, err := cl.Post(context.Background(), ingest.HeartbeatRoute, body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusAccepted {
			return resp.Status, 0
		}
		var acc protocol.HeartbeatAccepted
		if err := json.Unmarshal(resp.Body, &acc); err != nil {
			t.Fatal(err)
		}
		return resp.Status, acc.IdleDeadlineAt.Sub(acc.ServerTime.Add(time.Duration(a.limit) * time.Minute))
	}
	for _, a := range append([]offsetAgent{dead}, live...) {
		if st, _ := beat(d, a); st != http.StatusAccepted {
			t.Fatalf("%s's heartbeat on the real clock: %d", a.dep, st)
		}
	}
	ingestE2EStop(t, d)

	off := proctest.StartDaemon(t, bin, d.EnvCopy(), "--clock-offset="+offset.String())
	t.Cleanup(func() { ingestE2EStop(t, off) })
	if st, _ := beat(off, dead); st != http.StatusAccepted {
		t.Fatalf("the dead agent's last heartbeat: %d", st)
	}
	deadBeat := time.Now()
	deleted := func() map[int]time.Time {
		out := map[int]time.Time{}
		for _, r := range fake.Deletes() {
			if id, err := strconv.Atoi(path.Base(r.Path)); err == nil {
				if _, ok := out[id]; !ok {
					out[id] = r.At
				}
			}
		}
		return out
	}
	var once sync.Once
	worst := time.Duration(0)
	for end := deadBeat.Add(2*time.Minute + 30*time.Second); time.Now().Before(end); {
		for _, a := range live {
			st, miss := beat(off, a)
			if st != http.StatusAccepted {
				// Its droplet was DELETEd and its deployment ended.
				continue
			}
			if miss < 0 {
				miss = -miss
			}
			worst = max(worst, miss)
		}
		if dels := deleted(); len(dels) > 0 {
			for _, a := range live {
				if at, ok := dels[a.droplet]; ok {
					once.Do(func() {
						t.Errorf("%s's droplet (limit %d min, its user active) DELETEd %s after the restart %s off",
							a.dep, a.limit, at.Sub(deadBeat).Round(time.Second), offset)
					})
				}
			}
		}
		time.Sleep(cadence) // the agents' cadence, not a settle wait
	}
	dels := deleted()
	liveDeleted := 0
	for _, a := range live {
		if _, ok := dels[a.droplet]; ok {
			liveDeleted++
		}
	}
	t.Logf("clock %s off: %d live droplets DELETEd; answered deadlines at most %s from the daemon's time + limit", offset, liveDeleted, worst)
	if liveDeleted > 0 {
		t.Errorf("%d live droplets DELETEd after the restart %s off, want none", liveDeleted, offset)
	}
	// The daemon's time is stamped inside its writer, the activity placed
	// at the request's arrival less its age (under a second: the agent
	// truncates to whole seconds).
	if worst > 2*time.Second {
		t.Errorf("answered deadlines up to %s from the daemon's time + the limit, want within 2 s", worst)
	}
	at, ok := dels[dead.droplet]
	switch {
	case ok && at.Before(deadBeat.Add(time.Minute-5*time.Second)):
		t.Errorf("the dead agent's droplet was DELETEd %s after its last heartbeat, before its 1-minute limit", at.Sub(deadBeat).Round(time.Second))
	case offset < 0:
		// A start behind the last accepted signed time is a step back;
		// the clock guard may hold the reaper for it.
	case !ok:
		t.Errorf("the dead agent's droplet was not DELETEd within 2.5 minutes of its last heartbeat (limit 1 minute)")
	case at.After(deadBeat.Add(time.Minute + 2*cadence)):
		t.Errorf("the dead agent's droplet was DELETEd %s after its last heartbeat, want within 20 s of its 1-minute limit", at.Sub(deadBeat).Round(time.Second))
	}
}
