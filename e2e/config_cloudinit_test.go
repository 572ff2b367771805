package e2e

import (
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestConfigCloudInit: `chalupa config cloud-init` prints the one template
// converge renders, from the configured release (docs/operations.md,
// "Agent install"), so a hand-made droplet never gets a stale copy; a
// release that fails its checks is exit 1 naming the variable, never its
// value; the agent's own limits are exit 2.
func TestConfigCloudInit(t *testing.T) {
	bin := proctest.BuildBinary(t)
	rel := proctest.AgentRelease()
	out, code := proctest.RunCommand(t, bin, "", rel, "config", "cloud-init", "--env", "demo-harbor",
		"--url", "https://chalupa.example", "--size", "s-1vcpu-1gb", "--idle-minutes", "45")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	want, err := agentrelease.RenderCloudInit(agentrelease.FromEnv(func(k string) string { return rel[k] }),
		agentrelease.Params{URL: "https://chalupa.example", Environment: "demo-harbor", Size: "s-1vcpu-1gb", IdleLimitMinutes: 45})
	if err != nil {
		t.Fatal(err)
	}
	if out != want {
		t.Fatalf("printed user data differs from agentrelease.RenderCloudInit's:\n%s", out)
	}

	rel["CHALUPA_AGENT_VERSION"] = "latest"
	out, code = proctest.RunCommand(t, bin, "", rel, "config", "cloud-init", "--env", "demo-harbor", "--url", "https://chalupa.example")
	if code != 1 || !strings.Contains(out, agentrelease.EnvVersion) || strings.Contains(out, "#cloud-config") {
		t.Fatalf("latest: exit %d, want 1 naming %s and printing no user data:\n%s", code, agentrelease.EnvVersion, out)
	}
	if _, code := proctest.RunCommand(t, bin, "", proctest.AgentRelease(), "config", "cloud-init", "--env", "demo-harbor",
		"--url", "https://chalupa.example", "--idle-minutes", "20000"); code != 2 {
		t.Fatalf("an idle limit over a week: exit %d, want 2", code)
	}
}

// TestConfigCheckWarnsAboutTheAgentRelease: with converge on, `config
// check` accepts a release converge cannot install (serve still starts) and
// prints a warning naming the variable, never its value
// (docs/operations.md, "Configuration").
func TestConfigCheckWarnsAboutTheAgentRelease(t *testing.T) {
	env := proctest.AgentRelease()
	env["CHALUPA_AGENT_RELEASE_URL"] = "http://releases.example/v1"
	env["CHALUPA_DATA_DIR"] = t.TempDir()
	env["DIGITALOCEAN_PROVISION_TOKEN"] = "a-provision-token-for-the-config-check-test"
	env["CHALUPA_PULUMI_CLI"] = "/bin/sh"
	out, code := proctest.RunCommand(t, proctest.BuildBinary(t), "", env, "config", "check")
	if code != 0 || !strings.Contains(out, "configuration ok") {
		t.Fatalf("config check: exit %d, want 0 and configuration ok:\n%s", code, out)
	}
	var warning string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "warning") && strings.Contains(l, agentrelease.EnvReleaseURL) {
			warning = l
		}
	}
	if warning == "" || strings.Contains(warning, "releases.example") {
		t.Fatalf("want a warning naming %s without its value:\n%s", agentrelease.EnvReleaseURL, out)
	}
}
