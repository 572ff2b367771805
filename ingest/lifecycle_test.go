package ingest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestIngestLifecycleAnswers: POST /api/ingest/lifecycle (docs/operations.md,
// "Lifecycle events and runs"): launched creates the deployment; the same id
// and body is 202 deduplicated with nothing written (not even the nonce);
// the same id with another body is 409; the deployment rules each have
// their status, and every refusal writes nothing.
func TestIngestLifecycleAnswers(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	send := func(body []byte) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: body, Path: ingest.LifecycleRoute})
	}
	launched := h.LifecycleEvent("demo-harbor", "launch-1", protocol.EventLaunched, "dep-1", func(e *protocol.LifecycleEventV1) {
		e.Deployment.DropletID, e.Deployment.Region, e.Deployment.Size, e.Deployment.Managed = 4242, "nyc3", "s-1vcpu-1gb", true
	})
	if r := send(launched); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"created":true`) {
		t.Fatalf("launched: %s", r)
	}
	if got := h.Count(`SELECT count(*) FROM deployments WHERE id = 'dep-1' AND status = 'active' AND droplet_id = 4242 AND managed = 1 AND idle_deadline_at IS NOT NULL`); got != 1 {
		t.Fatalf("launched did not create the deployment: %d", got)
	}
	// A heartbeat naming another droplet for it is refused: the droplet
	// id never changes.
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1", DropletID: 7})}); r.Status != http.StatusConflict {
		t.Fatalf("heartbeat with another droplet: %s", r)
	}
	h.Exec(`INSERT INTO deployments (environment_id, id, status, launched_at, ended_at) SELECT id, 'dep-old', 'ended', 1, 2 FROM environments WHERE slug = 'demo-harbor'`)
	for _, tc := range []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"exact retry", launched, http.StatusAccepted, ""},
		{"same id, re-encoded time", h.LifecycleEvent("demo-harbor", "launch-1", protocol.EventLaunched, "dep-1", func(e *protocol.LifecycleEventV1) {
			e.Deployment.DropletID, e.Deployment.Region, e.Deployment.Size, e.Deployment.Managed = 4242, "nyc3", "s-1vcpu-1gb", true
			e.OccurredAt = e.OccurredAt.In(time.FixedZone("x", 3600))
		}), http.StatusAccepted, ""},
		{"same id, other body", h.LifecycleEvent("demo-harbor", "launch-1", protocol.EventLaunched, "dep-1", nil), http.StatusConflict, "event_conflict"},
		{"launched, other droplet", h.LifecycleEvent("demo-harbor", "launch-2", protocol.EventLaunched, "dep-1", func(e *protocol.LifecycleEventV1) { e.Deployment.DropletID = 9 }), http.StatusConflict, "droplet_mismatch"},
		{"booted, other droplet", h.LifecycleEvent("demo-harbor", "boot-x", protocol.EventBooted, "dep-1", func(e *protocol.LifecycleEventV1) { e.Deployment.DropletID = 9 }), http.StatusConflict, "droplet_mismatch"},
		{"booted, unknown deployment", h.LifecycleEvent("demo-harbor", "boot-1", protocol.EventBooted, "dep-none", nil), http.StatusNotFound, "deployment_not_found"},
		{"launched, ended deployment", h.LifecycleEvent("demo-harbor", "launch-3", protocol.EventLaunched, "dep-old", nil), http.StatusConflict, "deployment_ended"},
		{"ci-started, ended deployment", h.LifecycleEvent("demo-harbor", "ci-1", protocol.EventCIStarted, "dep-old", nil), http.StatusConflict, "deployment_ended"},
		{"unknown kind", h.LifecycleEvent("demo-harbor", "x-1", "exploded", "dep-1", nil), http.StatusUnprocessableEntity, "invalid_body"},
		{"managed on booted", h.LifecycleEvent("demo-harbor", "x-2", protocol.EventBooted, "dep-1", func(e *protocol.LifecycleEventV1) { e.Deployment.Managed = true }), http.StatusUnprocessableEntity, "invalid_body"},
		{"in the future", h.LifecycleEvent("demo-harbor", "x-3", protocol.EventBooted, "dep-1", func(e *protocol.LifecycleEventV1) { e.OccurredAt = e.OccurredAt.Add(time.Hour) }), http.StatusUnprocessableEntity, "invalid_body"},
		{"unknown field", []byte(strings.TrimSuffix(string(h.LifecycleEvent("demo-harbor", "x-4", protocol.EventBooted, "dep-1", nil)), "}") + `,"extra":1}`), http.StatusUnprocessableEntity, "invalid_body"},
		{"unknown field in deployment", []byte(strings.Replace(string(h.LifecycleEvent("demo-harbor", "x-5", protocol.EventBooted, "dep-1", nil)), `"id":"dep-1"`, `"id":"dep-1","extra":1`, 1)), http.StatusUnprocessableEntity, "invalid_body"},
		{"other environment", h.LifecycleEvent("other-env", "x-6", protocol.EventBooted, "dep-1", nil), http.StatusForbidden, "environment_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.LifecycleRows()
			r := send(tc.body)
			if r.Status != tc.status || (tc.code != "" && !strings.Contains(string(r.Body), `"code":"`+tc.code+`"`)) {
				t.Fatalf("got %s, want %d %s", r, tc.status, tc.code)
			}
			if tc.status == http.StatusAccepted && !strings.Contains(string(r.Body), `"deduplicated":true`) {
				t.Fatalf("retry not deduplicated: %s", r)
			}
			if after := h.LifecycleRows(); after != before {
				t.Fatalf("rows %s -> %s: something was written", before, after)
			}
		})
	}
	t.Run("after the end", func(t *testing.T) {
		for _, kind := range []string{protocol.EventShutdown, protocol.EventCIFinished, protocol.EventSunk} {
			if r := send(h.LifecycleEvent("demo-harbor", "late-"+kind, kind, "dep-old", nil)); r.Status != http.StatusAccepted || strings.Contains(string(r.Body), "droplet") {
				t.Fatalf("%s for an ended deployment: %s", kind, r)
			}
		}
	})
	t.Run("booted is recorded", func(t *testing.T) {
		if r := send(h.LifecycleEvent("demo-harbor", "boot-2", protocol.EventBooted, "dep-1", nil)); r.Status != http.StatusAccepted {
			t.Fatalf("booted: %s", r)
		}
		ev, err := h.Admin.ListEvents(context.Background(), adminapi.ListEventsRequest{Environment: "demo-harbor", Kind: protocol.EventBooted})
		if err != nil || len(ev.Events) != 1 || ev.Events[0].Deployment != "dep-1" {
			t.Fatalf("events = %+v, %v", ev, err)
		}
	})
}

// TestIngestLifecycleSunk: a sunk event is checked with the provider (the
// DigitalOcean API test server) with the read token: a droplet that still
// exists leaves the deployment active with a reaper-warning; a droplet that
// is gone ends the deployment, its telemetry sessions and (last one) the
// environment; without a read token the deployment stays active, unchecked.
func TestIngestLifecycleSunk(t *testing.T) {
	fake := dofake.New(t)
	read := fake.AddToken("read", dofake.ReadOnly...)
	live := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-harbor")})
	gone := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-harbor")})
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: map[string]string{"DIGITALOCEAN_READ_TOKEN": read, "CHALUPA_DO_API_URL": fake.URL}})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	send := func(body []byte) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: body, Path: ingest.LifecycleRoute})
	}
	for dep, drop := range map[string]int{"dep-live": live.ID, "dep-gone": gone.ID} {
		if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: dep, DropletID: int64(drop)})}); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat: %s", r)
		}
		if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.TelemetryWindow("demo-harbor", dep, "s-"+dep, time.Time{}, nil), Path: ingest.TelemetryRoute}); r.Status != http.StatusAccepted {
			t.Fatalf("window: %s", r)
		}
	}
	fake.RemoveDroplet(gone.ID)

	t.Run("droplet still exists", func(t *testing.T) {
		r := send(h.LifecycleEvent("demo-harbor", "sunk-live", protocol.EventSunk, "dep-live", nil))
		if r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"droplet":"exists"`) {
			t.Fatalf("sunk: %s", r)
		}
		if st := h.Count(`SELECT count(*) FROM deployments WHERE id = 'dep-live' AND status = 'active'`); st != 1 {
			t.Fatal("a sunk event took a live droplet off the reaper's list")
		}
		if n := h.Count(`SELECT count(*) FROM lifecycle_events WHERE deployment_id = 'dep-live' AND kind = 'reaper-warning'`); n != 1 {
			t.Fatalf("reaper-warning events = %d, want 1", n)
		}
		if n := h.Count(`SELECT count(*) FROM telemetry_sessions WHERE deployment_id = 'dep-live' AND ended_at IS NULL`); n != 1 {
			t.Fatalf("open sessions of the live deployment = %d, want 1", n)
		}
	})
	t.Run("droplet gone", func(t *testing.T) {
		r := send(h.LifecycleEvent("demo-harbor", "sunk-gone", protocol.EventSunk, "dep-gone", nil))
		if r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"droplet":"gone"`) {
			t.Fatalf("sunk: %s", r)
		}
		if st := h.Count(`SELECT count(*) FROM deployments WHERE id = 'dep-gone' AND status = 'ended'`); st != 1 {
			t.Fatal("the deployment of a gone droplet did not end")
		}
		if n := h.Count(`SELECT count(*) FROM telemetry_sessions WHERE deployment_id = 'dep-gone' AND ended_at IS NULL`); n != 0 {
			t.Fatalf("open sessions of the ended deployment = %d, want 0", n)
		}
		if n := h.Count(`SELECT count(*) FROM lifecycle_events WHERE deployment_id = 'dep-gone' AND kind = 'deployment-ended' AND reason = 'provider'`); n != 1 {
			t.Fatalf("deployment-ended events = %d, want 1", n)
		}
		if n := h.Count(`SELECT count(*) FROM environments WHERE slug = 'demo-harbor' AND status = 'sunk'`); n != 0 {
			t.Fatal("environment sunk while dep-live is active")
		}
	})
	t.Run("a gone droplet named by the event alone", func(t *testing.T) {
		if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-anon"})}); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat: %s", r)
		}
		r := send(h.LifecycleEvent("demo-harbor", "sunk-anon", protocol.EventSunk, "dep-anon", func(e *protocol.LifecycleEventV1) { e.Deployment.DropletID = int64(gone.ID) }))
		if r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"droplet":"unchecked"`) {
			t.Fatalf("sunk: %s", r)
		}
		if st := h.Count(`SELECT count(*) FROM deployments WHERE id = 'dep-anon' AND status = 'active'`); st != 1 {
			t.Fatal("a droplet id named only by the sunk event ended the deployment")
		}
	})
	t.Run("read token only", func(t *testing.T) {
		for _, req := range fake.Requests() {
			if req.Token != "read" || req.Method != http.MethodGet {
				t.Errorf("provider request %s with token %s", req, req.Token)
			}
		}
	})
	// A customer organization's droplet lives in the customer's own
	// account: the platform's read token would answer 404 for it and end a
	// live deployment. It is looked up with the organization's own token,
	// and without one it stays unchecked.
	t.Run("customer droplet never looked up with the platform token", func(t *testing.T) {
		ctx := context.Background()
		if _, err := h.Admin.CreateOrganization(ctx, adminapi.CreateOrganizationRequest{Slug: "acme"}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "acme-gpu", Organization: "acme"}); err != nil {
			t.Fatal(err)
		}
		ck := h.Issue("acme-gpu")
		cust := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("acme-gpu")})
		if r := h.Send(daemontest.SignedReq{KeyID: ck.ID, Key: ck.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "acme-gpu", Deployment: "dep-c", DropletID: int64(cust.ID)})}); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat: %s", r)
		}
		before := len(fake.Requests())
		r := h.Send(daemontest.SignedReq{KeyID: ck.ID, Key: ck.Raw, Body: h.LifecycleEvent("acme-gpu", "sunk-c1", protocol.EventSunk, "dep-c", nil), Path: ingest.LifecycleRoute})
		if r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"droplet":"unchecked"`) {
			t.Fatalf("sunk without a customer token: %s", r)
		}
		if n := len(fake.Requests()); n != before {
			t.Errorf("%d provider requests for a customer droplet with no customer token", n-before)
		}
		custToken := fake.AddToken("customer:acme", dofake.CustomerScopes...)
		if _, err := h.Admin.SetProviderToken(ctx, "acme", custToken); err != nil {
			t.Fatal(err)
		}
		r = h.Send(daemontest.SignedReq{KeyID: ck.ID, Key: ck.Raw, Body: h.LifecycleEvent("acme-gpu", "sunk-c2", protocol.EventSunk, "dep-c", nil), Path: ingest.LifecycleRoute})
		if r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"droplet":"exists"`) {
			t.Fatalf("sunk with the customer token: %s", r)
		}
		if st := h.Count(`SELECT count(*) FROM deployments WHERE id = 'dep-c' AND status = 'active'`); st != 1 {
			t.Fatal("a sunk event ended a customer's live deployment")
		}
		for _, req := range fake.Requests()[before:] {
			if req.Token != "customer:acme" || req.Method != http.MethodGet {
				t.Errorf("customer droplet request %s with token %s", req, req.Token)
			}
		}
	})
}

// TestIngestLifecycleSunkWithoutToken: with no read token the sunk event is
// recorded and the deployment stays active (inventory reconciliation or the
// reaper settles it).
func TestIngestLifecycleSunkWithoutToken(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1", DropletID: 11})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.LifecycleEvent("demo-harbor", "s-1", protocol.EventSunk, "dep-1", nil), Path: ingest.LifecycleRoute})
	if r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"droplet":"unchecked"`) {
		t.Fatalf("sunk: %s", r)
	}
	if st := h.Count(`SELECT count(*) FROM deployments WHERE id = 'dep-1' AND status = 'active'`); st != 1 {
		t.Fatal("an unchecked sunk event ended the deployment")
	}
}
