package main

import "github.com/chalupa-run/chalupa/cli"

// agentCommands wires the agent's commands (cmd_agent*.go, package main
// until they have a package of their own) into cli.Run.
type agentCommands struct {
	Agent agentCmd `cmd:"" help:"The reference fleet agent."`
}

// exitUsage is cli.ExitUsage, under the name the agent's commands use.
const exitUsage = cli.ExitUsage

// exitError carries an exit status out of an agent command's Run; cli.Run
// reads it through ExitCode.
type exitError struct {
	code int
	err  error
}

// Error is the wrapped error's message ("" for none: nothing is printed).
func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

// ExitCode is the process's exit status.
func (e *exitError) ExitCode() int { return e.code }

// orDash is s, or "-" when s is empty (cli's table rule).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
