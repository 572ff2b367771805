package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestClockOffsetShownHoldsNothing: agents 45 s behind the server's clock
// (within the signing window, so nothing is refused) show the offset on
// every surface — admin status (the fleet's and each environment's),
// chalupa_clock_offset_seconds{scope}, the console's banner — and the
// reaper still reaps the due deployment beside them: the offset holds
// nothing (docs/operations.md, "Heartbeats and deadlines").
func TestClockOffsetShownHoldsNothing(t *testing.T) {
	ctx := context.Background()
	fake := dofake.New(t)
	token := fake.AddToken("write", dofake.FullAccess...)
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: map[string]string{
		"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": token}})
	const offset = 45 * time.Second
	send := func(k daemontest.Key, dep string, droplet int64, activity time.Time) {
		t.Helper()
		h.Clock.Advance(137 * time.Millisecond)
		sentAt := h.Clock.Now().Add(-offset)
		body := h.Heartbeat(daemontest.HeartbeatOpts{Env: k.Env, Deployment: dep, DropletID: droplet, LimitMinutes: 1, SentAt: sentAt, LastActivityAt: activity})
		if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, TS: strconv.FormatInt(sentAt.Unix(), 10), Body: body}); r.Status != http.StatusAccepted {
			t.Fatalf("%s/%s: %s", k.Env, dep, r)
		}
	}
	for _, env := range []string{"demo-north", "demo-south"} {
		h.CreateEnv(env)
		k := h.Issue(env)
		for i := range 5 {
			// Active agents: their activity is their send.
			send(k, fmt.Sprintf("live-%d", i), 0, h.Clock.Now().Add(-offset))
		}
	}
	// A dead agent's last heartbeat: activity 5 min before it, limit 1
	// min, so it is due at once.
	dead := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-north"), CreatedAt: time.Now().Add(-2 * time.Hour)})
	send(h.Issue("demo-north"), "dead", int64(dead.ID), h.Clock.Now().Add(-offset-5*time.Minute))

	st, err := h.Admin.GetStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := st.ClockOffset
	if !o.Measured || !o.Off || o.Deployments != 11 || len(o.Environments) != 2 || o.Environments[0].Environment != "demo-north" || o.Environments[0].Deployments != 6 {
		t.Fatalf("admin status clockOffset %+v", o)
	}
	for _, s := range append([]float64{o.Seconds}, o.Environments[0].Seconds, o.Environments[1].Seconds) {
		if s < 44 || s > 46 {
			t.Fatalf("offset %v s, injected 45 s: %+v", s, o)
		}
	}
	req, _ := http.NewRequest("GET", h.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+h.Env[proctest.ReadyTokenVar])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, scope := range []string{"fleet", "env:demo-north", "env:demo-south"} {
		if !strings.Contains(string(metrics), `chalupa_clock_offset_seconds{scope="`+scope+`"} 45`) {
			t.Errorf("/metrics lacks scope %s at 45 s:\n%s", scope, grepLines(string(metrics), "chalupa_clock_offset"))
		}
	}
	setPassword(t, h.InProcess)
	c := newConsoleClient(t, h.InProcess)
	if resp := c.login(t, consolePassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login %d", resp.StatusCode)
	}
	if _, body := c.get(t, "/app"); !strings.Contains(body, `id="clock-offset"`) || !strings.Contains(body, "nothing is held") {
		t.Fatalf("the console does not show the offset:\n%s", body)
	}

	tick, err := h.Admin.RunReaperTick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tick.Outcomes) != 1 || tick.Outcomes[0].Deployment != "dead" || tick.Outcomes[0].Action != "destroyed" {
		t.Fatalf("tick %+v, want the dead agent's droplet destroyed and no live one", tick)
	}
	if d := fake.Deletes(); len(d) != 1 || d[0].Path != "/v2/droplets/"+strconv.Itoa(dead.ID) {
		t.Fatalf("DELETEs %v", d)
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
