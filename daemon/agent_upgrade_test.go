package daemon_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
)

// TestUpgradeBoxAgentRefusals: adminUpgradeBoxAgent refuses 422
// agent_release_invalid naming each variable at fault (never its value)
// when the agent release does not pass its check, 404 for an unknown box
// 409 agent_off for a box that does not carry the agent and 409 no_droplet
// for a box without a running droplet; a refusal
// records no event (docs/operations.md, "Agent install", under Upgrade).
func TestUpgradeBoxAgentRefusals(t *testing.T) {
	digest := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		box      string
		agentOff bool
		status   int
		code     string
		mentions []string
	}{
		// An empty value removes the harness's default release.
		{"no release", map[string]string{"CHALUPA_AGENT_VERSION": "", "CHALUPA_AGENT_RELEASE_URL": "",
			"CHALUPA_AGENT_SHA256_AMD64": "", "CHALUPA_AGENT_SHA256_ARM64": ""}, "up-1", false, http.StatusUnprocessableEntity, "agent_release_invalid",
			[]string{"CHALUPA_AGENT_VERSION", "CHALUPA_AGENT_RELEASE_URL", "CHALUPA_AGENT_SHA256_AMD64", "CHALUPA_AGENT_SHA256_ARM64"}},
		{"latest and plain http", map[string]string{"CHALUPA_AGENT_VERSION": "latest", "CHALUPA_AGENT_RELEASE_URL": "http://example.com/rel",
			"CHALUPA_AGENT_SHA256_AMD64": digest, "CHALUPA_AGENT_SHA256_ARM64": digest}, "up-1",
			false, http.StatusUnprocessableEntity, "agent_release_invalid", []string{"CHALUPA_AGENT_VERSION", "CHALUPA_AGENT_RELEASE_URL"}},
		{"missing digest", map[string]string{"CHALUPA_AGENT_VERSION": "v1.2.3", "CHALUPA_AGENT_RELEASE_URL": "https://example.com/rel",
			"CHALUPA_AGENT_SHA256_AMD64": digest, "CHALUPA_AGENT_SHA256_ARM64": ""}, "up-1",
			false, http.StatusUnprocessableEntity, "agent_release_invalid", []string{"CHALUPA_AGENT_SHA256_ARM64"}},
		{"unknown box", map[string]string{"CHALUPA_AGENT_VERSION": "v1.2.3", "CHALUPA_AGENT_RELEASE_URL": "https://example.com/rel",
			"CHALUPA_AGENT_SHA256_AMD64": digest, "CHALUPA_AGENT_SHA256_ARM64": digest}, "nope-1", false, http.StatusNotFound, "not_found", nil},
		{"no droplet", map[string]string{"CHALUPA_AGENT_VERSION": "v1.2.3", "CHALUPA_AGENT_RELEASE_URL": "https://example.com/rel",
			"CHALUPA_AGENT_SHA256_AMD64": digest, "CHALUPA_AGENT_SHA256_ARM64": digest}, "up-1", false, http.StatusConflict, "no_droplet", nil},
		// A box without the agent has no unit to restart: refused before
		// anything looks for its droplet.
		{"agent off", map[string]string{"CHALUPA_AGENT_VERSION": "v1.2.3", "CHALUPA_AGENT_RELEASE_URL": "https://example.com/rel",
			"CHALUPA_AGENT_SHA256_AMD64": digest, "CHALUPA_AGENT_SHA256_ARM64": digest}, "up-1", true, http.StatusConflict, "agent_off", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: tc.env})
			ctx := context.Background()
			newEnv(t, p.Admin, "demo")
			req := validBox("up-1", "demo")
			if tc.agentOff {
				off := false
				req.Agent = &off
			}
			if _, err := p.Admin.CreateBox(ctx, req); err != nil {
				t.Fatal(err)
			}
			_, err := p.Admin.UpgradeBoxAgent(ctx, tc.box)
			var ae *adminapi.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
				t.Fatalf("upgrade: %v, want %d %s", err, tc.status, tc.code)
			}
			for _, v := range tc.mentions {
				if !strings.Contains(ae.Message, v) {
					t.Errorf("message %q does not name %s", ae.Message, v)
				}
			}
			for _, secret := range []string{"example.com", digest, "latest"} {
				if strings.Contains(ae.Message, secret) {
					t.Errorf("message %q carries a value", ae.Message)
				}
			}
			var n int
			if err := p.App.DB.Read.QueryRow(`SELECT count(*) FROM lifecycle_events WHERE kind LIKE 'agent-upgrade%'`).Scan(&n); err != nil || n != 0 {
				t.Errorf("a refusal recorded %d events (%v)", n, err)
			}
		})
	}
}

// TestUpgradeCallBoundCoversTheDaemon: the least bound a client gives one
// upgrade call covers the daemon's own at the longest report bound: the
// SSH wait, one more attempt and the remote upgrade, the report bound, and
// the same again for the restore (docs/operations.md, "Agent install",
// under Upgrade).
func TestUpgradeCallBoundCoversTheDaemon(t *testing.T) {
	need := 2*(sshdeliver.UpgradeWait+sshdeliver.DefaultAttemptTimeout+sshdeliver.UpgradeTimeout) + 2*agentrollout.MaxReport
	if adminapi.UpgradeBoxAgentCallBound < need || agentrollout.HoldMax(agentrollout.MaxReport) != need {
		t.Fatalf("UpgradeBoxAgentCallBound %v, HoldMax %v; the daemon's %v", adminapi.UpgradeBoxAgentCallBound, agentrollout.HoldMax(agentrollout.MaxReport), need)
	}
}

// TestLongOperationOutlivesTheWriteTimeout: an operation with a Bound
// (adminUpgradeBoxAgent) extends its answer's write deadline past the
// server's write timeout, through the daemon's middleware: behind a server
// whose write timeout has already passed, its answer still arrives, while
// an operation without a Bound is cut (docs/operations.md, "Agent
// install", under Upgrade: the daemon's 60 s write timeout cut the upgrade's
// answer after its 1 min SSH wait, and the CLI saw EOF).
func TestLongOperationOutlivesTheWriteTimeout(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	ctx := context.Background()
	newEnv(t, p.Admin, "demo")
	if _, err := p.Admin.CreateBox(ctx, validBox("up-1", "demo")); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(p.App.Server.Handler())
	srv.Config.WriteTimeout = time.Nanosecond // past by the time any handler writes
	srv.Start()
	t.Cleanup(srv.Close)
	cl := &adminapi.Client{BaseURL: srv.URL, Token: p.Admin.Token}
	_, err := cl.UpgradeBoxAgent(ctx, "up-1")
	var ae *adminapi.APIError
	if !errors.As(err, &ae) || ae.Code != "no_droplet" {
		t.Fatalf("upgrade behind an expired write timeout: %v, want its 409 no_droplet answer", err)
	}
	// The control: an ordinary operation's answer is cut.
	if _, err := cl.GetBox(ctx, "up-1"); err == nil || errors.As(err, &ae) {
		t.Fatalf("an operation without a Bound answered behind an expired write timeout: %v", err)
	}
}
