package daemon_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
)

// TestAdminEndDeployment: the operator's path to end a deployment
// (docs/operations.md, "Ending a deployment") ends it and its open
// telemetry sessions in one unit, records one event, sinks the environment
// when it was the last active deployment, is idempotent, and refuses
// unknown names with 404; the droplet's later heartbeats are 409.
func TestAdminEndDeployment(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	for _, dep := range []string{"dep-a", "dep-b"} {
		if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: dep})}); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat %s: %s", dep, r)
		}
	}
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Path: ingest.TelemetryRoute, Body: h.TelemetryWindow("demo-harbor", "dep-a", "s1", h.Clock.Now().UTC().Truncate(60e9).Add(-60e9), nil)}); r.Status != http.StatusAccepted {
		t.Fatalf("window: %s", r)
	}
	ctx := context.Background()
	cl := h.Admin
	end := func(slug, dep string) (adminapi.EndedDeployment, error) { return cl.EndDeployment(ctx, slug, dep) }

	e, err := end("demo-harbor", "dep-a")
	if err != nil || e.AlreadyEnded || e.EnvironmentSunk || e.EndedAt.IsZero() {
		t.Fatalf("end dep-a: %+v %v", e, err)
	}
	if n := h.Count(`SELECT count(*) FROM telemetry_sessions WHERE deployment_id = 'dep-a' AND ended_at IS NULL`); n != 0 {
		t.Fatalf("%d open sessions left on an ended deployment", n)
	}
	again, err := end("demo-harbor", "dep-a")
	if err != nil || !again.AlreadyEnded || !again.EndedAt.Equal(e.EndedAt) {
		t.Fatalf("second end: %+v %v", again, err)
	}
	last, err := end("demo-harbor", "dep-b")
	if err != nil || !last.EnvironmentSunk {
		t.Fatalf("end of the last active deployment: %+v %v", last, err)
	}
	if st := daemontest.FleetEnv(t, h.Fleet(), "demo-harbor").Status; st != "sunk" {
		t.Fatalf("environment %s, want sunk", st)
	}
	if n := h.Count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'deployment-ended' AND reason = 'manual'`); n != 2 {
		t.Fatalf("%d deployment-ended events, want 2 (one per deployment)", n)
	}
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-a"})}); r.Status != http.StatusConflict || r.Code != "deployment_ended" {
		t.Fatalf("heartbeat after the end: %s", r)
	}
	for _, tc := range []struct{ name, slug, dep, code string }{
		{"unknown environment", "nope-env", "dep-a", "environment_not_found"},
		{"malformed slug", "Demo", "dep-a", "environment_not_found"},
		{"unknown deployment", "demo-harbor", "dep-zzz", "deployment_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := end(tc.slug, tc.dep)
			var ae *adminapi.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != tc.code {
				t.Fatalf("%v, want 404 %s", err, tc.code)
			}
		})
	}
}
