package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/chalupa-run/chalupa/adminapi"
)

// adminLoopsCmd is `chalupa admin loops`: the loop switches
// (docs/operations.md, "Loop switches").
type adminLoopsCmd struct {
	List   adminLoopsListCmd   `cmd:"" default:"withargs" help:"Show the switchable loops, paused or running (the default)."`
	Pause  adminLoopsPauseCmd  `cmd:"" help:"Pause a loop (reaper, retention, costs, jobs) until resumed; persisted across restarts. Ingest is never paused."`
	Resume adminLoopsResumeCmd `cmd:"" help:"Resume a paused loop."`
}

type adminLoopsListCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminLoopsListCmd) operation() string { return adminapi.OpListLoops }

// Run lists the loop switches.
func (c *adminLoopsListCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).ListLoops, func(w io.Writer, l adminapi.LoopList) error {
		return printLoops(w, l.Loops)
	})
}

// printLoops prints one line per switchable loop.
func printLoops(w io.Writer, loops []adminapi.LoopSwitch) error {
	tw := table(w)
	fmt.Fprintln(tw, "LOOP\tSTATE\tSINCE\tCONFIGURED")
	for _, l := range loops {
		state := "running"
		if l.Paused {
			state = "PAUSED"
		}
		if !l.Configured {
			// Configured false: this daemon never starts the loop (its
			// token or setting is absent), so it is not running whatever
			// the switch says, and pausing it changes nothing
			// (docs/operations.md, "Loop switches").
			// A paused switch still reads PAUSED first: it is what the
			// operator set, and what a restart keeps.
			state = "not running: not started by this daemon, its token or setting is not configured"
			if l.Paused {
				state = "PAUSED, and not running: not started by this daemon, its token or setting is not configured"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", l.Name, state, timeOrDash(l.ChangedAt), l.Configured)
	}
	return tw.Flush()
}

type adminLoopsPauseCmd struct {
	Name string `arg:"" help:"reaper, retention, costs or jobs."`
	JSON bool   `help:"Print JSON."`
}

func (*adminLoopsPauseCmd) operation() string { return adminapi.OpPauseLoop }

// Run pauses a loop.
func (c *adminLoopsPauseCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.LoopSwitch, error) {
		return cl.PauseLoop(ctx, c.Name)
	}, printSwitched)
}

type adminLoopsResumeCmd struct {
	Name string `arg:"" help:"reaper, retention, costs or jobs."`
	JSON bool   `help:"Print JSON."`
}

func (*adminLoopsResumeCmd) operation() string { return adminapi.OpResumeLoop }

// Run resumes a loop.
func (c *adminLoopsResumeCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.LoopSwitch, error) {
		return cl.ResumeLoop(ctx, c.Name)
	}, printSwitched)
}

func printSwitched(w io.Writer, l adminapi.LoopSwitch) error {
	state := "resumed"
	if l.Paused {
		state = "paused"
	}
	if !l.Changed {
		state = "already " + state
	}
	_, err := fmt.Fprintf(w, "loop %s %s\n", l.Name, state)
	return err
}
