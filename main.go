// Command chalupa is the whole control plane for a solo operator's short-lived
// developer and GPU environments on DigitalOcean: one daemon (`chalupa serve`)
// over one SQLite file replicated by embedded Litestream, plus the operator's
// commands (`chalupa admin …`) and a reference agent (`chalupa agent …`).
// The commands live in cli/ (and cli/servercmd/); see README.md and
// docs/architecture.md.
package main

import (
	"os"

	"github.com/chalupa-run/chalupa/agent/agentcli"
	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/cli/servercmd"
	"github.com/chalupa-run/chalupa/daemon"
)

func main() { os.Exit(run(cli.OS())) }

// run is the whole command line: cli's commands with the server's and the
// agent's wired in.
func run(env cli.Env) int { return cli.Run(env, wiring()) }

// wiring is what cli cannot import: the server's and the agent's commands,
// and the OpenAPI document (built from the server's wire types).
func wiring() cli.Wiring {
	return cli.Wiring{Commands: []any{&servercmd.Commands{}, &agentCommands{}}, OpenAPI: daemon.OpenAPI}
}

// agentCommands puts the fleet agent's commands (agent/agentcli, the same
// ones cmd/chalupa-agent runs) under `chalupa agent`.
type agentCommands struct {
	Agent agentcli.Cmd `cmd:"" help:"The reference fleet agent."`
}
