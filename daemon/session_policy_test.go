package daemon_test

// Session policies (docs/operations.md, "Session policies") through the
// in-process daemon: the heartbeat clamp at its exact boundary, the expiry
// a deployment with none is given, the reaper destroying at that expiry in
// the DigitalOcean API test server on the injected clock, and refused input
// writing nothing.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// storedExpiry is the deployment's session_expires_at (zero: NULL).
func storedExpiry(h *daemontest.Ingest, deployment string) time.Time {
	h.T.Helper()
	var at *int64
	if err := h.SQL().QueryRow(`SELECT session_expires_at FROM deployments WHERE id = ?`, deployment).Scan(&at); err != nil {
		h.T.Fatal(err)
	}
	if at == nil {
		return time.Time{}
	}
	return time.UnixMilli(*at).UTC()
}

// TestSessionPolicyClampsHeartbeats: in an environment with a 2-hour
// policy, a first heartbeat without an expiry is given launch + 2 h; one
// asking for exactly that is not clamped, one asking a second later is
// clamped to it (and the 202 says so), an earlier one is kept.
func TestSessionPolicyClampsHeartbeats(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	ctx := context.Background()
	res, err := h.Admin.SetSessionPolicy(ctx, adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "demo", MaxSessionSeconds: 7200})
	if err != nil || res.Policy == nil || res.Policy.Kind != "demo" || res.Policy.MaxSessionSeconds != 7200 || res.Applied != 0 {
		t.Fatalf("set policy: %+v, %v", res, err)
	}
	launch := h.Clock.Now().UTC()
	bound := launch.Add(2 * time.Hour)
	at := func(d time.Duration) *time.Time { v := launch.Add(d); return &v }
	for _, tc := range []struct {
		name        string
		ask         *time.Time
		want        time.Time
		wantClamped bool
	}{
		{"no expiry gets launch + maximum", nil, bound, false},
		{"exactly launch + maximum is not clamped", at(2 * time.Hour), bound, false},
		{"one second later is clamped", at(2*time.Hour + time.Second), bound, true},
		{"a year later is clamped", at(365 * 24 * time.Hour), bound, true},
		{"an earlier expiry is kept", at(time.Hour), launch.Add(time.Hour), false},
		{"no expiry keeps the stored one", nil, launch.Add(time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1", SessionExpiresAt: tc.ask})})
			if r.Status != http.StatusAccepted {
				t.Fatalf("heartbeat: %s", r)
			}
			var acc protocol.HeartbeatAccepted
			if err := json.Unmarshal(r.Body, &acc); err != nil {
				t.Fatal(err)
			}
			if !acc.SessionExpiresAt.Equal(tc.want) || acc.SessionExpiresAtClamped != tc.wantClamped {
				t.Errorf("202 %s: want sessionExpiresAt %s clamped %v", r.Body, tc.want, tc.wantClamped)
			}
			if got := storedExpiry(h, "dep-1"); !got.Equal(tc.want) {
				t.Errorf("stored expiry %s, want %s", got, tc.want)
			}
		})
		h.Clock.Advance(time.Second)
	}
}

// TestSessionPolicyReaperDestroysAtExpiry: a deployment with no expiry,
// launched before its environment got a 1-hour policy, is given launch +
// 1 h when the policy is set; a reaper tick a second before leaves the
// droplet in the DigitalOcean API test server, one at the expiry destroys
// it (reason session-expired) with the write token.
func TestSessionPolicyReaperDestroysAtExpiry(t *testing.T) {
	fake := dofake.New(t)
	token := fake.AddToken("write", dofake.FullAccess...)
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: map[string]string{"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": token}})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	ctx := context.Background()
	drop := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-harbor"), CreatedAt: h.Clock.Now().Add(-time.Minute)})
	launch := h.Clock.Now().UTC()
	// Active for a week as far as idleness goes: only the policy can end it.
	r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1",
		DropletID: int64(drop.ID), LimitMinutes: 7 * 24 * 60, LastActivityAt: launch})})
	if r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	if got := storedExpiry(h, "dep-1"); !got.IsZero() {
		t.Fatalf("expiry %s before any policy", got)
	}
	h.Clock.Advance(10 * time.Minute)
	res, err := h.Admin.SetSessionPolicy(ctx, adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "test", MaxSessionSeconds: 3600})
	if err != nil || res.Applied != 1 {
		t.Fatalf("set policy: %+v, %v; want it applied to the active deployment", res, err)
	}
	expiry := launch.Add(time.Hour)
	if got := storedExpiry(h, "dep-1"); !got.Equal(expiry) {
		t.Fatalf("expiry %s, want launch + 1 h = %s", got, expiry)
	}

	h.Clock.Advance(expiry.Sub(h.Clock.Now()) - time.Second)
	if _, err := h.Admin.RunReaperTick(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := fake.Droplet(drop.ID); !ok || len(fake.Deletes()) != 0 {
		t.Fatalf("destroyed a second before the expiry: %v", fake.Deletes())
	}
	h.Clock.Advance(time.Second)
	if _, err := h.Admin.RunReaperTick(ctx); err != nil {
		t.Fatal(err)
	}
	// The reaper's own loop, woken by the same clock, may be the one that
	// acts: wait for the observable result either way.
	testwait.Eventually(t, testwait.Short, "the droplet destroyed", func() (bool, string) {
		_, ok := fake.Droplet(drop.ID)
		return !ok, strconv.Itoa(len(fake.Deletes())) + " deletes"
	})
	if d := fake.Deletes(); len(d) != 1 || d[0].Token != "write" || d[0].Path != "/v2/droplets/"+strconv.Itoa(drop.ID) {
		t.Fatalf("DELETEs %v", d)
	}
	testwait.Eventually(t, testwait.Short, "the reaper-destroyed event", func() (bool, string) {
		ev, err := h.Admin.ListEvents(ctx, adminapi.ListEventsRequest{Environment: "demo-harbor", Kind: "reaper-destroyed"})
		if err != nil {
			t.Fatal(err)
		}
		return len(ev.Events) == 1 && ev.Events[0].Reason == "session-expired", strconv.Itoa(len(ev.Events)) + " events"
	})
}

// TestSessionPolicyRefusals: bad input is refused before anything is
// written, leaving an existing policy as it was; clearing reports whether
// there was a policy; the adminapi bounds are storage's.
func TestSessionPolicyRefusals(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	ctx := context.Background()
	if adminapi.MinSessionSeconds != storage.MinSessionSeconds || adminapi.MaxSessionSeconds != storage.MaxSessionSeconds ||
		adminapi.SessionKindDemo != storage.SessionKindDemo || adminapi.SessionKindTest != storage.SessionKindTest {
		t.Fatal("adminapi's session policy constants differ from storage's")
	}
	policies := func() int { return h.Count(`SELECT count(*) FROM environment_session_policies`) }
	for _, tc := range []struct {
		name       string
		req        adminapi.SetSessionPolicyRequest
		status     int
		code       string
		afterValid bool // run once a valid policy exists
	}{
		{"empty kind", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", MaxSessionSeconds: 3600}, 400, "invalid_kind", false},
		{"unknown kind", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "prod", MaxSessionSeconds: 3600}, 400, "invalid_kind", false},
		{"zero maximum", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "demo"}, 400, "invalid_max_session", false},
		{"negative maximum", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "demo", MaxSessionSeconds: -1}, 400, "invalid_max_session", false},
		{"59 s", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "demo", MaxSessionSeconds: 59}, 400, "invalid_max_session", false},
		{"30 days + 1 s", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "test", MaxSessionSeconds: 30*24*3600 + 1}, 400, "invalid_max_session", false},
		{"unknown environment", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "nowhere", Kind: "demo", MaxSessionSeconds: 3600}, 404, "environment_not_found", false},
		{"bad slug", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "Demo_Harbor", Kind: "demo", MaxSessionSeconds: 3600}, 400, "invalid_slug", false},
		{"bad kind over a policy", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "staging", MaxSessionSeconds: 60}, 400, "invalid_kind", true},
		{"too short over a policy", adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "test", MaxSessionSeconds: 1}, 400, "invalid_max_session", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := 0
			if tc.afterValid {
				if _, err := h.Admin.SetSessionPolicy(ctx, adminapi.SetSessionPolicyRequest{EnvironmentSlug: "demo-harbor", Kind: "demo", MaxSessionSeconds: 60}); err != nil {
					t.Fatal(err)
				}
				want = 1
			}
			_, err := h.Admin.SetSessionPolicy(ctx, tc.req)
			var apiErr *adminapi.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tc.status || apiErr.Code != tc.code {
				t.Fatalf("got %v, want %d %s", err, tc.status, tc.code)
			}
			if n := policies(); n != want {
				t.Fatalf("%d policy rows after a refusal, want %d", n, want)
			}
			list, err := h.Admin.ListEnvironments(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p := list.Environments[0].SessionPolicy
			if (p != nil) != tc.afterValid || (p != nil && (p.Kind != "demo" || p.MaxSessionSeconds != 60)) {
				t.Fatalf("policy after a refusal: %+v", p)
			}
		})
	}
	res, err := h.Admin.ClearSessionPolicy(ctx, adminapi.ClearSessionPolicyRequest{EnvironmentSlug: "demo-harbor"})
	if err != nil || !res.Cleared || res.Policy != nil || policies() != 0 {
		t.Fatalf("clear: %+v, %v (%d rows)", res, err, policies())
	}
	res, err = h.Admin.ClearSessionPolicy(ctx, adminapi.ClearSessionPolicyRequest{EnvironmentSlug: "demo-harbor"})
	if err != nil || res.Cleared {
		t.Fatalf("clear without a policy: %+v, %v", res, err)
	}
	var apiErr *adminapi.APIError
	if _, err := h.Admin.ClearSessionPolicy(ctx, adminapi.ClearSessionPolicyRequest{EnvironmentSlug: "nowhere"}); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("clear an unknown environment: %v", err)
	}
}
