package main

import (
	_ "embed"
	"fmt"
)

// agentUnit is the agent's systemd unit (docs/operations.md, "Agent
// install"), embedded so an installed binary always writes the unit that
// matches its own flags.
//
//go:embed contrib/agent/chalupa-agent.service
var agentUnit string

type agentSystemdUnitCmd struct{}

// Run prints the agent's systemd unit.
func (agentSystemdUnitCmd) Run() error {
	_, err := fmt.Print(agentUnit)
	return err
}
