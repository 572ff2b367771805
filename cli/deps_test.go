package cli

import (
	"testing"

	"github.com/chalupa-run/chalupa/internal/depstest"
)

// TestDeps: the CLI (the operator's commands, smoke among them) links no
// server package — the MCP server, a client of the admin API, is its only
// neighbour — so a binary of cli alone runs on a laptop without the server
// (docs/architecture.md, "Dependency direction").
func TestDeps(t *testing.T) {
	depstest.Check(t, "the CLI", []string{depstest.Module + "/cli"}, depstest.Forbidden(map[string]string{
		depstest.Module + "/cli/servercmd": "the server's commands are wired in by main",
	}))
}
