package daemon_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestConvergeInstallsTheAgent: with the real pulumi CLI and the test
// provider, an up of a box that carries the agent creates its droplet with
// the rendered cloud-init (both digests, the box's environment and idle
// limit, no key material) and records its deployment with the box's idle
// limit; a later change of the box's agent settings (new user data) is
// ignored by the program, so the next up neither replaces nor updates the
// droplet; a box with the agent off gets no user data (docs/operations.md,
// "Converge").
func TestConvergeInstallsTheAgent(t *testing.T) {
	t.Parallel()
	api, droplet := newConvergeAPI(t), newFakeDroplet(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: convergeEnv(t, api, droplet), StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	authorize(t, cl, droplet)
	newEnv(t, cl, "demo")
	req := validBox("agent-1", "demo")
	req.AgentIdleMinutes, req.VolumeSizeGiB = 90, 0
	if _, err := cl.CreateBox(ctx, req); err != nil {
		t.Fatal(err)
	}

	converge(t, cl, "agent-1", "up")
	ds := api.Droplets()
	if len(ds) != 1 {
		t.Fatalf("%d droplets after up", len(ds))
	}
	ud := ds[0].UserData
	rel := proctest.AgentRelease()
	for _, want := range []string{"#cloud-config\n", `"CHALUPA_AGENT_ENV=demo"`, `"CHALUPA_AGENT_LIMIT_MINUTES=90"`,
		`"CHALUPA_AGENT_SIZE=s-2vcpu-4gb"`, rel["CHALUPA_AGENT_VERSION"], rel["CHALUPA_AGENT_RELEASE_URL"],
		rel["CHALUPA_AGENT_SHA256_AMD64"], rel["CHALUPA_AGENT_SHA256_ARM64"], "/usr/local/lib/chalupa/install-agent.sh"} {
		if !strings.Contains(ud, want) {
			t.Fatalf("the droplet's user data lacks %q:\n%s", want, ud)
		}
	}
	_, material := delivered(t, droplet)
	if strings.Contains(ud, material) || strings.Contains(ud, "ingest.key:") {
		t.Fatal("the user data carries the ingest key")
	}
	var launched, deadline int64
	dep := "droplet-" + strconv.Itoa(ds[0].ID)
	if err := p.App.DB.Read.QueryRow(`SELECT launched_at, idle_deadline_at FROM deployments WHERE id = ?`, dep).Scan(&launched, &deadline); err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(deadline-launched) * time.Millisecond; got != 90*time.Minute {
		t.Fatalf("the launch deadline is %v after launch, want the box's 90m", got)
	}

	idle := int64(240)
	if _, err := cl.UpdateBox(ctx, adminapi.UpdateBoxRequest{Box: "agent-1", AgentIdleMinutes: &idle}); err != nil {
		t.Fatal(err)
	}
	_, sum := converge(t, cl, "agent-1", "up")
	if sum["replace"] != 0.0 || sum["update"] != 0.0 || sum["create"] != 0.0 {
		t.Fatalf("an up after a change of the agent settings: %v (user data must be ignored after creation)", sum["steps"])
	}
	if after := api.Droplets(); len(after) != 1 || after[0].ID != ds[0].ID || after[0].UserData != ud {
		t.Fatalf("the droplet changed: %+v", after)
	}

	off := false
	plain := validBox("plain-1", "demo")
	plain.Agent, plain.VolumeSizeGiB = &off, 0
	if _, err := cl.CreateBox(ctx, plain); err != nil {
		t.Fatal(err)
	}
	converge(t, cl, "plain-1", "up")
	b, err := cl.GetBox(ctx, "plain-1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range api.Droplets() {
		if int64(d.ID) == b.Resources.DropletID {
			found = true
			if d.UserData != "" {
				t.Fatalf("a box with the agent off got user data:\n%s", d.UserData)
			}
		}
	}
	if !found {
		t.Fatal("plain-1's droplet is not at the provider")
	}
}
