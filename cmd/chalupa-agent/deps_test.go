package main

import (
	"testing"

	"github.com/chalupa-run/chalupa/internal/depstest"
)

const module = depstest.Module

// maxAgentDeps bounds how many packages the agent links on linux/amd64
// (`GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go list -deps ./cmd/chalupa-agent
// | wc -l`): 224 when the bound was set, the standard library's packages
// included (223 once protocol replaced ingest/wire and ingest/signer; 222
// on arm64). Every droplet downloads, starts and runs the agent, and a
// package it links is paid for in its archive, its start-up and its
// memory (docs/operations.md, "Footprint"); the forbidden list catches a
// server package, this catches the slower creep of everything else. A
// change that raises the count says why in the commit that raises the
// bound.
const maxAgentDeps = 224

// TestDeps: the agent, its command and the leaves they share with the
// server (what a fleet droplet or an operator's laptop links) link no
// server package, not even mcpserver (docs/architecture.md, "Dependency
// direction").
func TestDeps(t *testing.T) {
	depstest.Check(t, "the agent or a leaf", []string{
		module + "/cmd/chalupa-agent",
		module + "/agent",
		module + "/agent/agentcli",
		module + "/agent/logship",
		module + "/adminapi",
		module + "/protocol",
	}, depstest.Forbidden(map[string]string{module + "/mcpserver": "the server's MCP tools"}))
}

// TestDepsCount: the agent links at most maxAgentDeps packages on
// linux/amd64, so a new dependency of the agent is a decision, not an
// accident.
func TestDepsCount(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	if n := depstest.Count(t, "linux", "amd64", module+"/cmd/chalupa-agent"); n > maxAgentDeps {
		t.Errorf("cmd/chalupa-agent links %d packages on linux/amd64, more than maxAgentDeps (%d): see what `GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go list -deps ./cmd/chalupa-agent` added, and drop it or raise the bound with the reason", n, maxAgentDeps)
	} else if n < 100 {
		t.Errorf("go list counted %d packages for cmd/chalupa-agent: the count no longer measures what it links", n)
	}
}
