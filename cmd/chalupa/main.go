// Command chalupa is the operator's light binary: the admin commands, mcp,
// smoke, version and the agent's commands, without the server's packages, so
// each command starts in a fraction of the full binary's memory. Its server
// commands (serve, migrate, config, rewrap) replace the process with
// chalupad, the full binary built from the module root, found beside it or
// on PATH (cli/light; docs/operations.md, "Releases", "Footprint").
package main

import (
	"os"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/cli/light"
)

func main() { os.Exit(cli.Run(cli.OS(), light.Wiring(light.OS()))) }
