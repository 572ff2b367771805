package e2e

// End-to-end test of the reaper's clock guard (docs/operations.md,
// "Reaper"): the built binary restarted with its clock ten minutes ahead
// (serve's hidden, loopback-only --clock-offset) while agents keep
// heartbeating with the real clock.

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestReaperClockOffsetRestart: two agents with one-minute limits report
// activity to a daemon on the real clock; the daemon restarts ten minutes
// ahead, so every heartbeat is refused 401 timestamp_skew and every stored
// deadline looks nine minutes past. For the start-up grace and a minute
// beyond, zero DELETEs reach the provider: the refused heartbeats are the
// agents' contact, each holding its own deployment, and `admin reaper
// status` lists both held for it.
func TestReaperClockOffsetRestart(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	fake := dofake.New(t)
	writeToken := fake.AddToken("write", dofake.FullAccess...)
	d := proctest.StartDaemon(t, bin, map[string]string{"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": writeToken})
	k := daemontest.EnvironmentKey(t, d.Admin(), "demo-clock")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	droplets := []int{fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-clock")}).ID, fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-clock")}).ID}
	beat := func(d *proctest.Daemon) []int {
		var out []int
		for i, drop := range droplets {
			now := time.Now().UTC()
			body, _ := json.Marshal(map[string]any{
				"environmentSlug": "demo-clock", "agentVersion": "e2e/1", "sentAt": now,
				"deployment": map[string]any{"id": "dep-clock-" + string(rune('a'+i)), "dropletId": drop},
				"reaper":     map[string]any{"idleChecks": 1, "limitMinutes": 1, "lastActivityAt": now.Add(-5 * time.Second), "ciActive": false},
			})
			cl := &protocol.Client{BaseURL: d.URL, KeyID: k.KeyID, Key: raw}
			resp, err := cl.Post(context.Background(), ingest.HeartbeatRoute, body)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, resp.Status)
		}
		return out
	}
	if st := beat(d); st[0] != http.StatusAccepted || st[1] != http.StatusAccepted {
		t.Fatalf("heartbeats on the real clock: %v, want 202s", st)
	}
	ingestE2EStop(t, d)

	ahead := proctest.StartDaemon(t, bin, d.EnvCopy(), "--clock-offset", "10m")
	t.Cleanup(func() { ingestE2EStop(t, ahead) })
	// The grace (60 s) and a minute more, heartbeating every 10 s.
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); {
		if st := beat(ahead); st[0] != http.StatusUnauthorized || st[1] != http.StatusUnauthorized {
			t.Fatalf("heartbeats to the daemon 10 minutes ahead: %v, want 401 timestamp_skew", st)
		}
		if del := fake.Deletes(); len(del) != 0 {
			t.Fatalf("DELETEs %v of live droplets after a restart 10 minutes ahead", del)
		}
		time.Sleep(10 * time.Second) // the agents' cadence, not a settle wait
	}
	status := ingestE2ECLI(t, bin, ahead, "admin", "reaper", "status")
	if !regexp.MustCompile(`held now\s+2\n`).MatchString(status) || !regexp.MustCompile(`dep-clock-a\s+\d+\s+contact`).MatchString(status) ||
		!regexp.MustCompile(`dep-clock-b\s+\d+\s+contact`).MatchString(status) {
		t.Fatalf("admin reaper status does not list both deployments held for contact:\n%s", status)
	}
	if del := fake.Deletes(); len(del) != 0 {
		t.Fatalf("DELETEs %v of live droplets", del)
	}
}
