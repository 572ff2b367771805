package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// rollout starts an agent rollout in the daemon over the command's scope
// (adminStartAgentRollout) and follows it, printing each box as it
// settles, then the summary (docs/operations.md, "Agent install", under
// Upgrade). The rollout runs in the daemon: an interrupt ends the
// following, not the rollout. It exits 1 unless the rollout succeeded.
func (c *adminRerollCmd) rollout(a *adminCmd) error {
	if c.KeepGoing {
		return &exitError{code: 2, err: errors.New("reroll: --keep-going does not apply to upgrade-agent: a rollout stops at the first box whose agent does not report, leaving the rest on their version")}
	}
	if c.Batch < 1 || c.Batch > adminapi.MaxRolloutBatch {
		return &exitError{code: 2, err: fmt.Errorf("reroll: --batch must be between 1 and %d", adminapi.MaxRolloutBatch)}
	}
	cl, err := a.client()
	if err != nil {
		return err
	}
	in := onInterrupt()
	defer in.stop()
	var out io.Writer = a.env.Stdout
	if c.JSON {
		out = io.Discard
	}
	r, err := followRollout(in.ctx, cl, adminapi.StartAgentRolloutRequest{Environment: c.Env, All: c.All, Batch: c.Batch}, a.Timeout, jobPoll, out)
	if err != nil {
		if in.ctx.Err() != nil && r.ID != "" {
			fmt.Fprintf(a.env.Stderr, "rollout %s goes on in the daemon: follow it with chalupa admin jobs\n", r.ID)
		}
		return in.err(apiFailure(err))
	}
	if c.JSON {
		if err := printJSON(a.env.Stdout, r); err != nil {
			return err
		}
	} else if err := printRollout(a.env.Stdout, r); err != nil {
		return err
	}
	if r.Status != "succeeded" {
		return &exitError{code: 1, err: errors.New("reroll: the rollout stopped at a box that failed")}
	}
	return nil
}

// followRollout starts the rollout and polls it every poll until it ends,
// printing each box as it settles. Errors: the start's or a poll's, or
// ctx's (the rollout returned so far names it).
func followRollout(ctx context.Context, cl *adminapi.Client, req adminapi.StartAgentRolloutRequest, timeout, poll time.Duration, w io.Writer) (adminapi.AgentRollout, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	r, err := cl.StartAgentRollout(rctx, req)
	cancel()
	var ae *adminapi.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code == "not_found" {
		// A server before rollouts answers the unknown route 404.
		return r, fmt.Errorf("the server has no agent rollouts (a chalupad older than this chalupa): upgrade chalupad, or upgrade box by box with chalupa admin box upgrade-agent (%s: %s)", ae.Code, ae.Message)
	}
	if err != nil {
		return r, err
	}
	fmt.Fprintf(w, "rollout %s of %s started (batch %d)\n", r.ID, displayText(r.Version), r.Batch)
	seen := map[string]bool{}
	for {
		for _, o := range settled(r.Summary) {
			if !seen[o.Box] {
				seen[o.Box] = true
				fmt.Fprintf(w, "%s: %s\n", o.Box, outcomeText(o))
			}
		}
		if r.Status != "running" {
			return r, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, ctx.Err()
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		next, err := cl.GetAgentRollout(rctx, r.ID)
		cancel()
		if err != nil {
			return r, err
		}
		r = next
	}
}

// settled is every box with an outcome, in the summary's order.
func settled(s adminapi.AgentRolloutSummary) []adminapi.AgentUpgradeOutcome {
	var out []adminapi.AgentUpgradeOutcome
	out = append(out, s.Upgraded...)
	out = append(out, s.Skipped...)
	return append(out, s.Failed...)
}

// outcomeText is one box's outcome in a line.
func outcomeText(o adminapi.AgentUpgradeOutcome) string {
	switch o.Status {
	case "upgraded":
		return fmt.Sprintf("upgraded %s -> %s", displayText(o.Before), displayText(o.After))
	case "skipped":
		return "skipped: " + displayText(o.Reason)
	}
	return fmt.Sprintf("failed (%s; previous agent: %s): %s", displayText(o.Reason), displayText(o.Restore), displayText(o.Detail))
}

// printRollout prints a rollout's summary: one row per box.
func printRollout(w io.Writer, r adminapi.AgentRollout) error {
	fmt.Fprintf(w, "rollout %s of %s: %s", r.ID, displayText(r.Version), r.Status)
	if r.Error != "" {
		fmt.Fprintf(w, " (%s)", displayText(r.Error))
	}
	fmt.Fprintln(w)
	tw := table(w)
	fmt.Fprintln(tw, "BOX\tOUTCOME\tREASON\tPREVIOUS AGENT")
	row := func(box, outcome, reason, restore string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", box, outcome, dashIfEmpty(displayText(reason)), dashIfEmpty(displayText(restore)))
	}
	for _, o := range r.Summary.Upgraded {
		row(o.Box, "upgraded", o.After, "")
	}
	for _, o := range r.Summary.Skipped {
		row(o.Box, "skipped", o.Reason, "")
	}
	for _, o := range r.Summary.Failed {
		row(o.Box, "failed", o.Reason, o.Restore)
	}
	for _, b := range r.Summary.Running {
		row(b, "running", "", "")
	}
	for _, b := range r.Summary.NotTried {
		row(b, "not tried", "a box failed before it: it keeps its version", "")
	}
	return tw.Flush()
}

// dashIfEmpty is s, or "-".
func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printRollouts lists rollouts under `admin jobs`.
func printRollouts(w io.Writer, rs []adminapi.AgentRollout) error {
	if len(rs) == 0 {
		return nil
	}
	tw := table(w)
	fmt.Fprintln(tw, "ROLLOUT\tVERSION\tSCOPE\tSTATUS\tUPGRADED\tSKIPPED\tFAILED\tNOT TRIED\tCREATED\tFINISHED")
	for _, r := range rs {
		scope := r.Environment
		if scope == "" {
			scope = "all"
		}
		fin := "-"
		if r.FinishedAt != nil {
			fin = timeOrDash(*r.FinishedAt)
		}
		s := r.Summary
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.ID, displayText(r.Version), scope, r.Status,
			len(s.Upgraded), len(s.Skipped), len(s.Failed), len(s.NotTried), timeOrDash(r.CreatedAt), fin)
	}
	return tw.Flush()
}

// adminRolloutCmd groups the agent rollout commands.
type adminRolloutCmd struct {
	Show adminRolloutShowCmd `cmd:"" help:"Show one agent rollout: its status and each box upgraded, skipped, failed (and its previous agent restored or not) or not tried."`
}

type adminRolloutShowCmd struct {
	ID   string `arg:"" help:"Rollout id."`
	JSON bool   `help:"Print JSON."`
}

func (*adminRolloutShowCmd) operation() string { return adminapi.OpGetAgentRollout }

// Run shows one rollout (docs/operations.md, "Agent install", under
// Upgrade).
func (c *adminRolloutShowCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.AgentRollout, error) {
		return cl.GetAgentRollout(ctx, c.ID)
	}, printRollout)
}
