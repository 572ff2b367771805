// Command chalupa is the whole control plane for a solo operator's short-lived
// developer and GPU environments on DigitalOcean: one daemon (`chalupa serve`)
// over one SQLite file replicated by embedded Litestream, plus the operator's
// commands (`chalupa admin …`) and a reference agent (`chalupa agent …`).
// See README.md and docs/architecture.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kong"

	"github.com/chalupa-run/chalupa/agent/agentcli"
	"github.com/chalupa-run/chalupa/daemon"
)

// cli is the command tree. Each command is a struct with a Run method.
type cli struct {
	Serve   serveCmd     `cmd:"" help:"Run the daemon (HTTP API, background loops, replication)."`
	Migrate migrateCmd   `cmd:"" help:"Inspect schema migrations (serve applies them)."`
	Config  configCmd    `cmd:"" help:"Check the configuration read from the environment."`
	Admin   adminCmd     `cmd:"" help:"Operate a running daemon through its admin API."`
	Agent   agentcli.Cmd `cmd:"" help:"The reference fleet agent."`
	Rewrap  rewrapCmd    `cmd:"" help:"Re-encrypt every envelope from CHALUPA_INGEST_MASTER_KEY to CHALUPA_INGEST_MASTER_KEY_NEW (daemon stopped)."`
	Smoke   smokeCmd     `cmd:"" help:"Run the private smoke test against a running chalupa (synthetic environment, no droplets)."`
	MCP     mcpCmd       `cmd:"" name:"mcp" help:"Serve the admin operations as MCP tools over standard input and output (destructive tools need a confirmation phrase; secrets are never exposed)."`
	Version versionCmd   `cmd:"" help:"Print the version."`
}

// exitUsage is the exit status for unknown flags, missing arguments and other
// command-line mistakes (the sysexits/BSD convention most CLIs follow),
// including a flag value that breaks the command's own rules on its face
// (--lag-limit below 1s, a --url that is not an https origin off loopback).
// A refusal that depends on anything beyond the command line (a file, the
// configuration serve reads, the daemon's answer) exits 1
// (docs/operations.md, "Exit codes").
const exitUsage = 2

// exitError carries an exit status out of a command's Run.
type exitError struct {
	code int
	err  error
}

// Error is the wrapped error's message.
func (e *exitError) Error() string { return e.err.Error() }

func main() {
	var c cli
	parser, err := newParser(&c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chalupa:", err)
		os.Exit(1)
	}
	ctx, err := parser.Parse(os.Args[1:])
	if err != nil {
		var pe *kong.ParseError
		if errors.As(err, &pe) {
			fmt.Fprintf(os.Stderr, "chalupa: %v\n", err)
			printUsage(os.Stderr, pe.Context)
			os.Exit(exitUsage)
		}
		fmt.Fprintln(os.Stderr, "chalupa:", err)
		os.Exit(exitUsage)
	}
	if err := ctx.Run(); err != nil {
		// The agent's commands (agent/agentcli) carry their own exit
		// status; it means the same as exitError's.
		if ae := (*agentcli.ExitError)(nil); errors.As(err, &ae) {
			err = &exitError{code: ae.Code, err: ae.Err}
		}
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(os.Stderr, "chalupa:", ee.err)
			}
			// A command-line mistake found by a command itself (a bad
			// --body, a missing operationId) reads like one kong found.
			if ee.code == exitUsage {
				printUsage(os.Stderr, ctx)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "chalupa:", err)
		os.Exit(1)
	}
}

// newParser builds the command-line parser over c (the accounting test
// walks the same tree).
func newParser(c *cli) (*kong.Kong, error) {
	return kong.New(c,
		kong.Name("chalupa"),
		kong.Description("chalupa: control plane for short-lived DigitalOcean environments."),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Vars{"default_data_dir": daemon.DefaultDataDir},
	)
}

// printUsage writes the usage line and the pointer to --help that follow
// every command-line mistake, whether kong or a command's Run found it.
func printUsage(w io.Writer, ctx *kong.Context) {
	fmt.Fprintf(w, "usage: %s\nrun '%s --help' for details\n", usageLine(ctx), commandPath(ctx))
}

// commandPath is "chalupa admin env create" for the command being parsed.
func commandPath(ctx *kong.Context) string {
	if ctx == nil {
		return "chalupa"
	}
	p := "chalupa"
	if s := ctx.Command(); s != "" {
		for _, n := range ctx.Path {
			if n.Command != nil {
				p += " " + n.Command.Name
			}
		}
	}
	return p
}

// usageLine is the one-line synopsis of the command being parsed.
func usageLine(ctx *kong.Context) string {
	if ctx == nil || ctx.Selected() == nil {
		return "chalupa <command> [flags]"
	}
	return "chalupa " + ctx.Selected().Summary()
}
