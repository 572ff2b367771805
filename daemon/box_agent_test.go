package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/jobs/jobstest"
)

// TestBoxAgentField: a box carries the agent unless it opts out, with the
// agent's own limits by default (idle 30 minutes, no session limit); the
// admin API shows it, an update changes it, a limit out of range is 422
// invalid_box with nothing written, and the OpenAPI document describes it
// (docs/operations.md, "Boxes").
func TestBoxAgentField(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	cl, ctx := p.Admin, context.Background()
	newEnv(t, cl, "demo")

	// The body has no "agent" at all: the typed client omits a nil one.
	if a := callOp(t, cl, adminapi.OpCreateBox, nil, validBox("with-agent", "demo")); a.status != http.StatusCreated {
		t.Fatalf("create: %d %s", a.status, a.code)
	}
	b, err := cl.GetBox(ctx, "with-agent")
	if err != nil {
		t.Fatal(err)
	}
	if !b.Agent || b.AgentIdleMinutes != 30 || b.AgentSessionMinutes != 0 {
		t.Fatalf("default agent: on %v, idle %d, session %d; want on, 30, 0", b.Agent, b.AgentIdleMinutes, b.AgentSessionMinutes)
	}
	body := strings.Replace(string(mustJSON(t, validBox("no-agent", "demo"))), `{`, `{"agent":false,`, 1)
	if a := callOp(t, cl, adminapi.OpCreateBox, nil, body); a.status != http.StatusCreated {
		t.Fatalf("create with agent false: %d %s", a.status, a.code)
	}
	if b, _ := cl.GetBox(ctx, "no-agent"); b.Agent {
		t.Fatal(`"agent":false did not opt out`)
	}
	limits := validBox("limits", "demo")
	limits.AgentIdleMinutes, limits.AgentSessionMinutes = 90, 240
	if b, err := cl.CreateBox(ctx, limits); err != nil || !b.Agent || b.AgentIdleMinutes != 90 || b.AgentSessionMinutes != 240 {
		t.Fatalf("create with limits: %+v %v", b, err)
	}
	for _, tc := range []struct {
		name          string
		idle, session int64
	}{{"idle over a week", 10081, 0}, {"negative idle", -1, 0}, {"session over 30 days", 30, 43201}} {
		t.Run("create refuses "+tc.name, func(t *testing.T) {
			req := validBox("refused", "demo")
			req.AgentIdleMinutes, req.AgentSessionMinutes = tc.idle, tc.session
			if a := callOp(t, cl, adminapi.OpCreateBox, nil, req); a.status != http.StatusUnprocessableEntity || a.code != "invalid_box" {
				t.Fatalf("got %d %s, want 422 invalid_box", a.status, a.code)
			}
			if _, err := cl.GetBox(ctx, "refused"); err == nil {
				t.Fatal("a refused create wrote the box")
			}
		})
	}

	off, idle := false, int64(120)
	up, err := cl.UpdateBox(ctx, adminapi.UpdateBoxRequest{Box: "with-agent", Agent: &off, AgentIdleMinutes: &idle})
	if err != nil || up.Agent || up.AgentIdleMinutes != 120 || up.ConfigVersion != 2 {
		t.Fatalf("update: %+v %v", up, err)
	}
	zero := int64(0)
	if a := callOp(t, cl, adminapi.OpUpdateBox, adminapi.Params{"box": "with-agent"}, adminapi.UpdateBoxRequest{AgentIdleMinutes: &zero}); a.status != http.StatusUnprocessableEntity || a.code != "invalid_box" {
		t.Fatalf("idle 0 on update: %d %s", a.status, a.code)
	}
	if b, _ := cl.GetBox(ctx, "with-agent"); b.ConfigVersion != 2 || b.AgentIdleMinutes != 120 {
		t.Fatalf("a refused update wrote: %+v", b)
	}

	doc, err := daemon.OpenAPI("test")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"agent"`, `"agentIdleMinutes"`, `"agentSessionMinutes"`} {
		if !strings.Contains(string(doc), f) {
			t.Errorf("the OpenAPI document does not describe %s", f)
		}
	}
}

// TestConvergeRefusesTheAgentWithoutARelease: with converge configured and
// an agent release that fails its checks, up and preview of a box that
// carries the agent answer 422 agent_release_invalid naming the variable
// (never its value) and enqueue nothing; refresh and destroy, and a box
// with the agent off, are admitted (docs/operations.md, "Converge").
func TestConvergeRefusesTheAgentWithoutARelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		vars []string
	}{
		{"nothing configured", map[string]string{"CHALUPA_AGENT_VERSION": "", "CHALUPA_AGENT_RELEASE_URL": "", "CHALUPA_AGENT_SHA256_AMD64": "", "CHALUPA_AGENT_SHA256_ARM64": ""},
			[]string{agentrelease.EnvVersion, agentrelease.EnvReleaseURL, agentrelease.EnvSHA256AMD64, agentrelease.EnvSHA256ARM64}},
		{"latest", map[string]string{"CHALUPA_AGENT_VERSION": "latest"}, []string{agentrelease.EnvVersion}},
		{"plain http", map[string]string{"CHALUPA_AGENT_RELEASE_URL": "http://releases.example/v1.2.3"}, []string{agentrelease.EnvReleaseURL}},
		{"missing arm64 digest", map[string]string{"CHALUPA_AGENT_SHA256_ARM64": ""}, []string{agentrelease.EnvSHA256ARM64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: &jobstest.Executor{}, Env: tc.env})
			cl, ctx := p.Admin, context.Background()
			newEnv(t, cl, "demo")
			for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
				if _, err := cl.CreateBox(ctx, validBox(n, "demo")); err != nil {
					t.Fatal(err)
				}
			}
			off := false
			opted := validBox("no-agent", "demo")
			opted.Agent = &off
			if _, err := cl.CreateBox(ctx, opted); err != nil {
				t.Fatal(err)
			}
			for _, action := range []string{"up", "preview"} {
				_, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "gpu-1"}, Action: action})
				var ae *adminapi.APIError
				if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || ae.Code != "agent_release_invalid" {
					t.Fatalf("%s: %v, want 422 agent_release_invalid", action, err)
				}
				for _, v := range tc.vars {
					if !strings.Contains(ae.Message, v) {
						t.Errorf("%s: the message does not name %s: %q", action, v, ae.Message)
					}
				}
				for _, v := range tc.env {
					if v != "" && strings.Contains(ae.Message, v) {
						t.Errorf("%s: the message carries the value %q", action, v)
					}
				}
			}
			if l, _ := cl.ListJobs(ctx, adminapi.ListJobsRequest{}); len(l.Jobs) != 0 {
				t.Fatalf("a refused request enqueued: %+v", l.Jobs)
			}
			for box, action := range map[string]string{"gpu-2": "refresh", "gpu-3": "destroy", "no-agent": "up"} {
				if _, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: box}, Action: action}); err != nil {
					t.Errorf("%s of %s: %v, want it enqueued", action, box, err)
				}
			}
		})
	}
}

// TestConfigWarnsAboutTheAgentRelease: config check and serve accept an
// agent release converge cannot install, with a warning naming the
// variable (never its value) while converge is on; with converge off an
// unset release says nothing (docs/operations.md, "Configuration").
func TestConfigWarnsAboutTheAgentRelease(t *testing.T) {
	pulumi := proctest.ToolPath(t, "pulumi")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		converge bool
		want     string // the variable the warning names; "" for no warning
	}{
		{"a good release", proctest.AgentRelease(), true, ""},
		{"latest with converge on", with(proctest.AgentRelease(), "CHALUPA_AGENT_VERSION", "latest"), true, agentrelease.EnvVersion},
		{"no release with converge on", map[string]string{}, true, agentrelease.EnvSHA256ARM64},
		{"no release with converge off", map[string]string{}, false, ""},
		{"a missing digest with converge off", with(proctest.AgentRelease(), "CHALUPA_AGENT_SHA256_AMD64", ""), false, agentrelease.EnvSHA256AMD64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"CHALUPA_DATA_DIR": t.TempDir()}
			for k, v := range tc.env {
				env[k] = v
			}
			if tc.converge {
				env["DIGITALOCEAN_PROVISION_TOKEN"] = "provision-token-for-the-config-test"
				env["CHALUPA_PULUMI_CLI"] = pulumi
				// The origin droplets reach (a loopback one is its own
				// warning: TestConfigWarnsWhereBoxAgentsCannotWork).
				env["CHALUPA_ORIGIN"] = "https://chalupa.example.net"
			}
			cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatalf("LoadConfig refused: %v", err)
			}
			i := slices.IndexFunc(cfg.Warnings, func(w string) bool { return strings.Contains(w, "agent") })
			if tc.want == "" {
				if i >= 0 {
					t.Fatalf("unexpected warning %q", cfg.Warnings[i])
				}
				return
			}
			if i < 0 || !strings.Contains(cfg.Warnings[i], tc.want) {
				t.Fatalf("warnings %q: want one naming %s", cfg.Warnings, tc.want)
			}
			if v := env["CHALUPA_AGENT_VERSION"]; v != "" && strings.Contains(cfg.Warnings[i], v) {
				t.Fatalf("the warning carries the value: %q", cfg.Warnings[i])
			}
		})
	}
}

// TestConsoleBoxAgent: the console's box page says whether the box
// carries the agent and with which limits, and its converge form refuses
// an up while the agent release fails its checks with the same 422 naming
// the variable, enqueueing nothing (docs/operations.md, "Console" and
// "Converge").
func TestConsoleBoxAgent(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Executor: &jobstest.Executor{},
		Env: map[string]string{"CHALUPA_AGENT_VERSION": "latest"}})
	setPassword(t, p)
	ctx := context.Background()
	newEnv(t, p.Admin, "demo")
	if _, err := p.Admin.CreateBox(ctx, validBox("box-web", "demo")); err != nil {
		t.Fatal(err)
	}
	off := false
	opted := validBox("box-off", "demo")
	opted.Agent = &off
	if _, err := p.Admin.CreateBox(ctx, opted); err != nil {
		t.Fatal(err)
	}
	c := newConsoleClient(t, p)
	if r := c.login(t, consolePassword); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", r.StatusCode)
	}
	_, page := c.get(t, "/app/boxes/box-web")
	if !strings.Contains(page, "Agent: on, idle limit 30 min, no session limit") {
		t.Fatalf("the box page does not show the agent:\n%s", page)
	}
	if _, off := c.get(t, "/app/boxes/box-off"); !strings.Contains(off, "Agent: off") {
		t.Fatalf("the opted-out box's page does not say so:\n%s", off)
	}
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no csrf token")
	}
	r, body := c.post(t, "/app/boxes/box-web/converge", url.Values{"csrf_token": {m[1]}, "action": {"up"}}, nil)
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, agentrelease.EnvVersion) || strings.Contains(body, "latest") {
		t.Fatalf("up from the console: %d, want 422 naming %s without its value:\n%s", r.StatusCode, agentrelease.EnvVersion, body)
	}
	if l, _ := p.Admin.ListJobs(ctx, adminapi.ListJobsRequest{}); len(l.Jobs) != 0 {
		t.Fatalf("the refused form enqueued: %+v", l.Jobs)
	}
}

func with(m map[string]string, k, v string) map[string]string {
	m[k] = v
	return m
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
