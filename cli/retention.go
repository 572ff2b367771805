package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

type adminRetentionCmd struct {
	Run  adminRetentionRunCmd  `cmd:"" help:"Run one retention pass now (fold detail older than 7 days, finalize sessions, prune heartbeats) and print its report."`
	Runs adminRetentionRunsCmd `cmd:"" help:"List recent retention passes, newest first."`
}

type adminRetentionRunCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminRetentionRunCmd) operation() string { return adminapi.OpRunRetention }

// Run runs a pass and prints its report.
func (c *adminRetentionRunCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).RunRetention, func(w io.Writer, r adminapi.RetentionRun) error {
		return printRetentionRuns(w, []adminapi.RetentionRun{r})
	})
}

type adminRetentionRunsCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminRetentionRunsCmd) operation() string { return adminapi.OpListRetentionRuns }

// Run lists recent passes.
func (c *adminRetentionRunsCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).ListRetentionRuns, func(w io.Writer, l adminapi.RetentionRunList) error {
		if len(l.Runs) == 0 {
			_, err := fmt.Fprintln(w, "no retention runs yet")
			return err
		}
		return printRetentionRuns(w, l.Runs)
	})
}

// printRetentionRuns prints passes as a table; BACKLOG "yes" marks an
// incomplete pass (docs/operations.md, "Retention").
func printRetentionRuns(w io.Writer, runs []adminapi.RetentionRun) error {
	tw := table(w)
	fmt.Fprintln(tw, "STARTED\tTRIGGER\tDURATION\tMINUTE ROLLUPS\tHOURLY ROLLUPS\tBATCHES\tBACKLOG\tSTOP\tHEARTBEATS PRUNED\tFINALIZED\tCHECKPOINTS PRUNED\tERROR")
	for _, r := range runs {
		backlog := "no"
		if r.TelemetryBacklogPending {
			backlog = "yes"
		}
		errText := "-"
		if r.Error != "" {
			errText = displayText(r.Error)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%s\n", timeOrDash(r.StartedAt), r.Trigger,
			time.Duration(r.DurationMs)*time.Millisecond, r.TelemetryMinuteRollups, r.TelemetryHourlyRollups,
			r.TelemetryBatches, backlog, r.TelemetryDrainStopReason, r.HeartbeatsPruned, r.SessionsFinalized,
			r.StackStatesPruned, errText)
	}
	return tw.Flush()
}
