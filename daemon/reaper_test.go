package daemon_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestReaperOperations: the reaper's admin operations through the typed
// client, with the write token pointed at dofake: a tick reaps a due
// deployment (droplet destroyed with the write token, deployment ended,
// environment sunk, reaper-destroyed listed by adminListEvents and its
// filters, the metric counted); the status shows the tick; no log line
// holds the token.
func TestReaperOperations(t *testing.T) {
	ctx := context.Background()
	fake := dofake.New(t)
	token := fake.AddToken("write", dofake.FullAccess...)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{
		"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": token}})
	if _, err := p.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	env, err := storage.EnvironmentBySlug(ctx, p.App.DB.Read, "demo-harbor")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	drop := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-harbor"), CreatedAt: now.Add(-2 * time.Hour)})
	// Its agent heartbeated since the daemon started (an idle state): the
	// start-up grace does not hold it.
	storagetest.Deployment(t, p.App.DB, storage.Deployment{EnvironmentID: env.ID, ID: "dep-1", DropletID: int64(drop.ID),
		LaunchedAt: now.Add(-time.Hour), IdleDeadlineAt: now.Add(-time.Minute), LastHeartbeatAt: now})

	st, err := p.Admin.GetReaperStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.TokenConfigured || st.Mode != "live" || st.DryRun || st.ActiveDeployments != 1 || len(st.Due) != 1 || st.Due[0].Deployment != "dep-1" || st.LastTick != nil {
		t.Fatalf("status before the tick: %+v", st)
	}
	tick, err := p.Admin.RunReaperTick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tick.Outcomes) != 1 || tick.Outcomes[0].Action != "destroyed" || tick.Outcomes[0].Reason != "idle" || tick.Outcomes[0].DropletID != int64(drop.ID) {
		t.Fatalf("tick %+v, want dep-1 destroyed (idle)", tick)
	}
	if d := fake.Deletes(); len(d) != 1 || d[0].Token != "write" || d[0].Path != "/v2/droplets/"+strconv.Itoa(drop.ID) {
		t.Fatalf("DELETEs %v", d)
	}
	fleet, err := p.Admin.ListFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := fleet.Environments[0]; e.Status != "sunk" || e.Deployments[0].Status != "ended" {
		t.Fatalf("fleet %+v, want the environment sunk and dep-1 ended", e)
	}
	for _, f := range []struct {
		filter adminapi.ListEventsRequest
		want   int
	}{
		{adminapi.ListEventsRequest{}, 1},
		{adminapi.ListEventsRequest{Environment: "demo-harbor", Kind: "reaper-destroyed"}, 1},
		{adminapi.ListEventsRequest{Environment: "other"}, 0},
		{adminapi.ListEventsRequest{Kind: "reaper-warning"}, 0},
	} {
		ev, err := p.Admin.ListEvents(ctx, f.filter)
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.Events) != f.want {
			t.Fatalf("events %+v with %+v, want %d", ev.Events, f.filter, f.want)
		}
		if f.want == 1 && (ev.Events[0].ID != "reaper:demo-harbor:dep-1" || ev.Events[0].Deployment != "dep-1" || ev.Events[0].Reason != "idle") {
			t.Fatalf("event %+v", ev.Events[0])
		}
	}
	st, err = p.Admin.GetReaperStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastTick == nil || len(st.LastTick.Outcomes) != 1 || len(st.Due) != 0 || st.ActiveDeployments != 0 {
		t.Fatalf("status after the tick: %+v", st)
	}
	req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+p.Env[proctest.ReadyTokenVar])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `chalupa_reaper_droplets_destroyed_total{reason="idle"} 1`) {
		t.Fatalf("/metrics lacks the reaped droplet:\n%s", body)
	}
	if strings.Contains(p.Logs.String(), token) {
		t.Fatal("the write token appears in the daemon's log")
	}
}

// TestReaperWithoutWriteToken: without DIGITALOCEAN_WRITE_TOKEN the status
// says so, a tick is refused 409 reaper_not_configured, and the log says
// it once.
func TestReaperWithoutWriteToken(t *testing.T) {
	ctx := context.Background()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{StartLoops: true})
	st, err := p.Admin.GetReaperStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TokenConfigured || st.Mode != "off" || st.NextWakeAt != (time.Time{}) {
		t.Fatalf("status %+v, want no token and no wake-up", st)
	}
	_, err = p.Admin.RunReaperTick(ctx)
	var ae *adminapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "reaper_not_configured" {
		t.Fatalf("tick without a token: %v, want 409 reaper_not_configured", err)
	}
	if n := strings.Count(p.Logs.String(), "the reaper is off"); n != 1 {
		t.Fatalf("the log says the reaper does not run %d times, want once:\n%s", n, p.Logs.String())
	}
}
