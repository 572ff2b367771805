package archtest

import (
	"slices"
	"testing"
)

// The agent's fence (docs/architecture.md, "Dependency direction"): what
// runs on a droplet, agent/..., is imported by its own packages and its
// binary, and by nothing else but the two binaries that carry `chalupa
// agent …`, which import its commands alone. The server renders what a
// droplet installs (boxes/agentrelease) without linking the agent, and the
// agent's internals can change without any other package noticing.
//
// The fence holds non-test imports, as TestImportDirection does. Tests
// outside it may import the agent: e2e runs agents in process
// (agent/agenttest's fleet, agent/logship's shipper), and the boxes and
// reaper tests check that their rules agree with the agent's constants
// (its default idle limit, its heartbeat interval). Such a test links the
// agent into a test binary only, never into the server.
const (
	// agentPkgs are the fenced packages.
	agentPkgs = "agent/..."
	// agentGate is the one fenced package an agentHost may import: the
	// agent's commands (agentcli.Cmd), which `chalupa agent …` embeds.
	agentGate = "agent/agentcli"
)

var (
	// agentInsiders may import any fenced package.
	agentInsiders = []string{"agent/...", "cmd/chalupa-agent"}
	// agentHosts are the binaries' wiring that carry `chalupa agent …`:
	// chalupad's main (the module root) and the light chalupa's
	// (cli/light, which cmd/chalupa runs).
	agentHosts = []string{".", "cli/light"}
)

// agentFenceViolation says why from (relative) may not import to, or ""
// when it may.
func agentFenceViolation(from, to string) string {
	isAny := func(p string, patterns []string) bool {
		return slices.ContainsFunc(patterns, func(pat string) bool { return matches(pat, p) })
	}
	switch {
	case !matches(agentPkgs, to), isAny(from, agentInsiders):
		return ""
	case isAny(from, agentHosts) && to == agentGate:
		return ""
	case isAny(from, agentHosts):
		return "a binary that carries `chalupa agent …` imports the agent's commands (" + agentGate + ") and nothing else of the agent"
	default:
		return "nothing outside agent/... and cmd/chalupa-agent imports the agent"
	}
}

// TestAgentFence: no non-test import crosses the agent's fence; the
// allowed list of TestImportDirection does not apply here.
func TestAgentFence(t *testing.T) {
	edges := imports(t)
	crossing := 0
	for _, e := range edges {
		if !matches(agentPkgs, e[1]) || matches(agentPkgs, e[0]) {
			continue
		}
		crossing++
		if why := agentFenceViolation(e[0], e[1]); why != "" {
			t.Errorf("%s imports %s: %s (docs/architecture.md, \"Dependency direction\")", e[0], e[1], why)
		}
	}
	if crossing == 0 {
		t.Error("no package outside agent/... imports it, yet cmd/chalupa-agent runs it: the test no longer sees the imports it checks")
	}
}

// TestAgentFenceRules checks the fence on made-up imports, so a mistake in
// its patterns cannot let everything through.
func TestAgentFenceRules(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		ok       bool
	}{
		{"agent", "agent/logship", true},
		{"agent/agentcli", "agent", true},
		{"cmd/chalupa-agent", "agent/agentcli", true},
		{"cmd/chalupa-agent", "agent", true},
		{".", "agent/agentcli", true},
		{"cli/light", "agent/agentcli", true},
		{".", "agent", false},
		{"cli/light", "agent/logship", false},
		{"cmd/chalupa", "agent/agentcli", false},
		{"cli", "agent/agentcli", false},
		{"mcpserver", "agent", false},
		{"daemon", "agent", false},
		{"boxes/agentrelease", "agent", false},
		{"ingest", "agent/agentcli", false},
		{"e2e", "agent/agenttest", false},
		{"contrib/footprint", "agent", false},
		{"daemon", "protocol", true},
		{"agentx", "agent", false},
		{".", "agentx", true},
	} {
		t.Run(tc.from+"→"+tc.to, func(t *testing.T) {
			why := agentFenceViolation(tc.from, tc.to)
			if (why == "") != tc.ok {
				t.Errorf("agentFenceViolation(%s, %s) = %q; want allowed: %v", tc.from, tc.to, why, tc.ok)
			}
		})
	}
}
