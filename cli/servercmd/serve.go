package servercmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/internal/datadir"
	"github.com/chalupa-run/chalupa/internal/schedule"
	"github.com/chalupa-run/chalupa/internal/servehelp"
	"github.com/chalupa-run/chalupa/storage"
)

type serveCmd struct {
	LagLimit       time.Duration `help:"How long replication may lag or fail before /api/ready answers 503." default:"2m"`
	MaxConnections int           `help:"Most client connections open at once; more are answered 503 and closed at once." default:"4096"`
	PauseLoops     string        `name:"pause-loops" placeholder:"LOOP,…" help:"Pause these background loops (reaper, retention, costs, jobs) until resumed with 'chalupa admin loops resume'; persisted across restarts. Ingest is never paused."`
	// ClockOffset runs the daemon's clock ahead (tests of the built binary
	// only; refused unless CHALUPA_LISTEN is loopback).
	ClockOffset time.Duration `hidden:"" help:"Tests only: run the daemon's clock this far ahead (loopback listen only)."`
}

// Help is serve's detailed help: its examples, then the environment it
// reads, one line a variable, as the daemon's variable table writes it
// (internal/servehelp).
func (s *serveCmd) Help() string { return serveExamples + "\n" + servehelp.Environment }

// Run starts the daemon. The first SIGTERM/SIGINT starts a graceful shutdown;
// a second one exits at once with status 1.
func (s *serveCmd) Run(env *cli.Env) error {
	// daemon.RunOptions reads zero as "the default"; a 0s or negative limit
	// typed here is a mistake, not a request for 2m.
	if s.LagLimit < time.Second {
		return cli.Exit(cli.ExitUsage, errors.New("--lag-limit must be positive and at least 1s (lag is measured in seconds)"))
	}
	if s.MaxConnections < 1 {
		return cli.Exit(cli.ExitUsage, errors.New("--max-connections must be at least 1"))
	}
	pause, err := daemon.ParseLoopNames(s.PauseLoops)
	if err != nil {
		return cli.Exit(cli.ExitUsage, fmt.Errorf("--pause-loops: %w", err))
	}
	cfg, err := daemon.LoadConfig(env.LookupEnv)
	if err != nil {
		return cli.Exit(1, err)
	}
	var clock clockwork.Clock
	if s.ClockOffset != 0 {
		if !cfg.ListensOnLoopback() {
			return cli.Exit(1, errors.New("--clock-offset is for tests and needs a loopback CHALUPA_LISTEN"))
		}
		clock = schedule.Shifted(s.ClockOffset)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(env.Stderr, "chalupa: second signal, exiting now")
		os.Exit(1)
	}()
	var recorded string
	listening := func(addr string) {
		// Once, at start: where the console is and how to give it a
		// password (docs/operations.md, "Console").
		fmt.Fprintf(env.Stderr, "chalupa: console at %s/app; set its password with: chalupa admin password\n", cfg.HTTP.Origin)
		// The CLI finds this daemon by the address it records, with
		// CHALUPA_LISTEN alone (docs/operations.md, "Embedded default").
		if err := datadir.WriteAddress(cfg.DataDir, addr); err != nil {
			fmt.Fprintf(env.Stderr, "chalupa: warning: %s not written (%v): set CHALUPA_URL for the CLI\n", datadir.AddressFileName, err)
			return
		}
		recorded = addr
	}
	err = daemon.Run(ctx, cfg, daemon.RunOptions{LagLimit: s.LagLimit, MaxConnections: s.MaxConnections, Clock: clock, PauseLoops: pause, Listening: listening})
	if recorded != "" {
		_ = datadir.RemoveAddress(cfg.DataDir, recorded)
	}
	if errors.Is(err, storage.ErrReplicaBehind) {
		return cli.Exit(exitReplicaBehind, err)
	}
	return err
}

// exitReplicaBehind is serve's exit status when it stopped with
// acknowledged commits missing from the replica (docs/operations.md, "Exit
// codes"): not a success, so systemd restarts it and replication resumes.
const exitReplicaBehind = 3
