// Package servercmd holds the commands that run or maintain the server on
// its host: `serve`, `migrate`, `config check` and `rewrap`. They import
// daemon and storage; main wires Commands into cli.Run, so the operator's
// commands in cli do not (docs/architecture.md, "Dependency direction").
package servercmd

import (
	"io"
	"text/tabwriter"
)

// Commands are the server's top-level commands, for cli.Wiring.Commands.
type Commands struct {
	Serve   serveCmd   `cmd:"" help:"Run the daemon (HTTP API, background loops, replication)."`
	Migrate migrateCmd `cmd:"" help:"Inspect schema migrations (serve applies them)."`
	Config  configCmd  `cmd:"" help:"Check the configuration read from the environment."`
	Rewrap  rewrapCmd  `cmd:"" help:"Re-encrypt every envelope from CHALUPA_INGEST_MASTER_KEY to CHALUPA_INGEST_MASTER_KEY_NEW (daemon stopped)."`
}

// table is a tab-aligned writer for command output (cli's layout).
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }
