package main

import (
	"testing"

	"github.com/chalupa-run/chalupa/internal/depstest"
)

const module = depstest.Module

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
