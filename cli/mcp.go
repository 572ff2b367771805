package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// mcpCmd is `chalupa mcp`: the MCP server over standard input and output,
// one tool per exposed admin operation (docs/operations.md, "MCP server").
// It reaches the daemon like `chalupa admin` does: the same --url origin
// rule (https unless loopback) and the same admin token.
type mcpCmd struct {
	URL     string        `name:"url" env:"CHALUPA_URL" help:"Daemon to talk to (default: the address serve recorded in --data-dir; http://127.0.0.1:8080 only when --data-dir does not exist)."`
	DataDir string        `name:"data-dir" env:"CHALUPA_DATA_DIR" default:"${default_data_dir}" help:"Where to find the generated secrets file when CHALUPA_ADMIN_TOKEN is unset."`
	Timeout time.Duration `default:"60s" help:"Per-request timeout."`
}

// Run serves until standard input ends (every request read by then is
// answered first) or a signal arrives.
func (c *mcpCmd) Run(env *Env) error {
	a := &adminCmd{env: env, URL: c.URL, DataDir: c.DataDir, Timeout: c.Timeout}
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = mcpserver.Run(ctx, cl, buildinfo.Version, env.Stdin, env.Stdout)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Stopped by a signal: a clean stop exits 0, as every
		// long-running command's does (docs/operations.md, "Exit codes").
		return nil
	}
	return err
}
