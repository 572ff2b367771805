package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/chalupa-run/chalupa/adminapi"
)

type adminRunsCmd struct {
	Env  string `arg:"" name:"slug" help:"Environment slug."`
	JSON bool   `help:"Print JSON."`
}

func (*adminRunsCmd) operation() string { return adminapi.OpListRuns }

// Run lists the environment's CI suite runs with their artifacts, most
// recently started first (docs/operations.md, "Lifecycle events and
// runs"). Names and locators were validated as printable ASCII at ingest,
// so they are printed as they are.
func (c *adminRunsCmd) Run(a *adminCmd) error {
	list := func(cl *adminapi.Client, ctx context.Context) (adminapi.RunList, error) {
		return cl.ListRuns(ctx, c.Env)
	}
	return runOp(a, c.JSON, list, func(w io.Writer, l adminapi.RunList) error {
		if len(l.Runs) == 0 {
			fmt.Fprintf(w, "no runs reported in %s\n", l.EnvironmentSlug)
			return nil
		}
		tw := table(w)
		fmt.Fprintln(tw, "STARTED\tFINISHED\tSUITE\tRUN\tSTATUS\tDEPLOYMENT\tCOMMIT\tARTIFACTS")
		for _, r := range l.Runs {
			commit := r.Commit
			if len(commit) > 12 {
				commit = commit[:12]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", timeOrDash(r.StartedAt), timeOrDash(r.FinishedAt), r.Suite, r.RunID,
				r.Status, r.Deployment, dash(commit), len(r.Artifacts))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, r := range l.Runs {
			for _, art := range r.Artifacts {
				where := art.Locator.URL
				if art.Locator.Kind == "local" {
					where = "local:" + art.Locator.ID
				}
				fmt.Fprintf(w, "  %s  %s  %s  %d bytes  sha256:%s  %s\n", r.RunID, art.Name, art.MediaType, art.SizeBytes, art.SHA256, where)
			}
		}
		return nil
	})
}
