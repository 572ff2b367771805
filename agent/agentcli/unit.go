package agentcli

import (
	_ "embed"
	"io"
	"strings"

	"github.com/alecthomas/kong"
)

// unitTemplate is the agent's systemd unit as the full binary runs it
// (docs/operations.md, "Agent install"), embedded so an installed binary
// always writes the unit that matches its own flags.
//
//go:embed chalupa-agent.service
var unitTemplate string

// The lines StandaloneUnit rewrites in the unit, and what it writes.
const (
	fullExecStart       = "ExecStart=/usr/local/bin/chalupa agent run"
	fullEnvironmentFile = "EnvironmentFile=-/etc/chalupa-agent/agent.env"
	// StandaloneExecStart runs the standalone agent binary the release's
	// chalupa-agent archive installs.
	StandaloneExecStart = "ExecStart=/usr/local/bin/chalupa-agent run"
	// StandaloneEnvironmentFile is required (no "-"): the install writes
	// agent.env before it enables the unit, and without it `run` lacks its
	// required --url and --env, so systemd should say the file is missing
	// rather than restart the agent every RestartSec.
	StandaloneEnvironmentFile = "EnvironmentFile=/etc/chalupa-agent/agent.env"
)

// FullUnit is the unit `chalupa agent systemd-unit` prints: ExecStart runs
// the full binary's `chalupa agent run`.
func FullUnit() string { return unitTemplate }

// StandaloneUnit is the unit `chalupa-agent systemd-unit` prints: the same
// unit with StandaloneExecStart and StandaloneEnvironmentFile.
func StandaloneUnit() string {
	return strings.NewReplacer(fullExecStart, StandaloneExecStart, fullEnvironmentFile, StandaloneEnvironmentFile).Replace(unitTemplate)
}

type agentSystemdUnitCmd struct{}

// Run prints the full binary's unit (FullUnit).
func (agentSystemdUnitCmd) Run(k *kong.Context) error {
	_, err := io.WriteString(k.Stdout, FullUnit())
	return err
}

type standaloneSystemdUnitCmd struct{}

// Run prints the standalone agent's unit (StandaloneUnit).
func (standaloneSystemdUnitCmd) Run(k *kong.Context) error {
	_, err := io.WriteString(k.Stdout, StandaloneUnit())
	return err
}
