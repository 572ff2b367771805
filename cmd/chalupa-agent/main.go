// Command chalupa-agent is the chalupa fleet agent on its own: the
// commands of `chalupa agent …` (agent/agentcli) without the control
// plane's packages, released as chalupa-agent_VERSION_linux_ARCH.tar.gz
// (docs/operations.md, "Agent", "Releases").
package main

import (
	"os"

	"github.com/chalupa-run/chalupa/agent/agentcli"
)

func main() {
	os.Exit(agentcli.Main(os.Args[1:], os.Stdout, os.Stderr, os.Exit))
}
