package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/chalupa-run/chalupa/adminapi"
)

type adminTelemetryCmd struct {
	Erase adminTelemetryEraseCmd `cmd:"" help:"Erase an environment's telemetry (sessions, windows, hourly rollups, receipts, anomalies), or every environment's with --all."`
	Audit adminTelemetryAuditCmd `cmd:"" help:"Count the rows the five telemetry tables hold (every environment)."`
}

// eraseAllPhrase is what `admin telemetry erase --all` asks for.
const eraseAllPhrase = "erase all telemetry"

type adminTelemetryEraseCmd struct {
	Env     string `arg:"" optional:"" name:"slug" help:"Environment slug."`
	All     bool   `help:"Erase every environment's telemetry in turn, verify each receipt, then audit that the telemetry tables are empty."`
	Confirm string `help:"The confirmation phrase, for use without a terminal: 'erase telemetry SLUG' (with --all: 'erase all telemetry')."`
	JSON    bool   `help:"Print JSON."`
}

func (*adminTelemetryEraseCmd) operation() string { return adminapi.OpEraseTelemetry }

// Run erases one environment's telemetry (or every one's with --all).
func (c *adminTelemetryEraseCmd) Run(a *adminCmd) error {
	if (c.Env == "") == !c.All {
		return &exitError{code: ExitUsage, err: errors.New("give an environment slug or --all (not both)")}
	}
	want := adminapi.EraseTelemetryPhrase(c.Env)
	if c.All {
		want = eraseAllPhrase
	}
	phrase, err := confirmation(a.env, c.Confirm, want)
	if err != nil {
		return err
	}
	if c.All {
		if phrase != want {
			return &exitError{code: 1, err: fmt.Errorf("the confirmation is not %q; nothing was erased", want)}
		}
		return c.eraseAll(a)
	}
	// The daemon judges the phrase (422 confirmation_mismatch), so the
	// rule has one owner.
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.TelemetryErasure, error) {
		return cl.EraseTelemetry(ctx, adminapi.EraseTelemetryRequest{EnvironmentSlug: c.Env, Confirmation: phrase})
	}, func(w io.Writer, r adminapi.TelemetryErasure) error {
		return printErasure(w, r)
	})
}

// confirmation returns the phrase given with --confirm, or asks for want on
// the terminal. Without a terminal and without --confirm it is a usage
// error: a script must state the phrase.
func confirmation(env *Env, given, want string) (string, error) {
	if given != "" {
		return given, nil
	}
	if !isTerminal(env.Stdin) {
		return "", &exitError{code: ExitUsage, err: fmt.Errorf("stdin is not a terminal: pass --confirm '%s'", want)}
	}
	fmt.Fprintf(env.Stderr, "This cannot be undone. Type %q to go on: ", want)
	line, err := promptLine(env.Stdin, 4096)
	var ee *exitError
	if errors.As(err, &ee) {
		return "", err // interrupted: 130, nothing was done
	}
	if err != nil && line == "" {
		return "", &exitError{code: 1, err: errors.New("no confirmation read; nothing was erased")}
	}
	return line, nil
}

// eraseAllReport is `admin telemetry erase --all --json`'s output.
type eraseAllReport struct {
	Erasures []adminapi.TelemetryErasure `json:"erasures"`
	Audit    adminapi.TelemetryAudit     `json:"audit"`
}

// eraseAll erases every environment in turn (one request each, within
// --timeout each), verifies each receipt, then asks the daemon to audit
// the telemetry tables. Any failed check exits 1 after printing what was
// done.
func (c *adminTelemetryEraseCmd) eraseAll(a *adminCmd) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	callCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), a.Timeout)
	}
	ctx, cancel := callCtx()
	envs, err := cl.ListEnvironments(ctx)
	cancel()
	if err != nil {
		return apiFailure(err)
	}
	var rep eraseAllReport
	var problems []string
	out := io.Writer(a.env.Stdout)
	if c.JSON {
		out = io.Discard
	}
	for _, e := range envs.Environments {
		ctx, cancel := callCtx()
		r, err := cl.EraseTelemetry(ctx, adminapi.EraseTelemetryRequest{EnvironmentSlug: e.Slug, Confirmation: adminapi.EraseTelemetryPhrase(e.Slug)})
		cancel()
		if err != nil {
			return apiFailure(fmt.Errorf("erase %s: %w", displayText(e.Slug), err))
		}
		rep.Erasures = append(rep.Erasures, r)
		if err := printErasure(out, r); err != nil {
			return err
		}
		if p := verifyErasure(e.Slug, r); p != "" {
			problems = append(problems, p)
		}
	}
	ctx, cancel = callCtx()
	rep.Audit, err = cl.GetTelemetryAudit(ctx)
	cancel()
	if err != nil {
		return apiFailure(err)
	}
	if rep.Audit.Total != 0 {
		problems = append(problems, fmt.Sprintf("audit: the telemetry tables still hold %d rows", rep.Audit.Total))
	}
	if c.JSON {
		if err := printJSON(a.env.Stdout, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "audit at %s (every environment):\n", rep.Audit.CheckedAt.UTC().Format("2006-01-02T15:04:05Z"))
		if err := printCounts(out, rep.Audit.Tables); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return &exitError{code: 1, err: errors.New(strings.Join(problems, "; "))}
	}
	return nil
}

// verifyErasure checks a receipt: it is the environment's, finished, and
// left nothing behind. It returns the problem, "" when none.
func verifyErasure(slug string, r adminapi.TelemetryErasure) string {
	switch {
	case r.EnvironmentSlug != slug:
		return fmt.Sprintf("erase %s: the receipt names another environment", displayText(slug))
	case r.FinishedAt.IsZero():
		return fmt.Sprintf("erase %s: the erasure did not finish", displayText(slug))
	case r.Remaining.Total() != 0:
		return fmt.Sprintf("erase %s: %d rows remain (did agents send telemetry meanwhile? revoke the environment's keys and erase again)", displayText(slug), r.Remaining.Total())
	}
	return ""
}

// printErasure prints one receipt.
func printErasure(w io.Writer, r adminapi.TelemetryErasure) error {
	resumed := ""
	if r.Resumed {
		resumed = " (resumed an interrupted erasure; the counts include its earlier batches)"
	}
	// A batch is one write transaction of at most 5,000 rows
	// (docs/operations.md, "Erasing telemetry").
	fmt.Fprintf(w, "erased telemetry of %s: erasure %s, in %d %s of at most 5,000 rows%s\n", displayText(r.EnvironmentSlug), r.ErasureID, r.Batches, plural(r.Batches, "batch", "batches"), resumed)
	if err := printCounts(w, r.Removed); err != nil {
		return err
	}
	if n := r.Remaining.Total(); n != 0 {
		fmt.Fprintf(w, "  remaining rows: %d (agents sent telemetry during the erase)\n", n)
	}
	return nil
}

// printCounts prints per-table counts and their total.
func printCounts(w io.Writer, c adminapi.TelemetryTableCounts) error {
	tw := table(w)
	fmt.Fprintf(tw, "  telemetry_sessions\t%d\n", c.Sessions)
	fmt.Fprintf(tw, "  telemetry_windows\t%d\n", c.Windows)
	fmt.Fprintf(tw, "  telemetry_hourly\t%d\n", c.Hourly)
	fmt.Fprintf(tw, "  telemetry_receipts\t%d\n", c.Receipts)
	fmt.Fprintf(tw, "  telemetry_anomalies\t%d\n", c.Anomalies)
	fmt.Fprintf(tw, "  total\t%d\n", c.Total())
	return tw.Flush()
}

type adminTelemetryAuditCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminTelemetryAuditCmd) operation() string { return adminapi.OpGetTelemetryAudit }

// Run prints the telemetry tables' row counts.
func (c *adminTelemetryAuditCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).GetTelemetryAudit, func(w io.Writer, au adminapi.TelemetryAudit) error {
		fmt.Fprintf(w, "telemetry rows at %s (every environment):\n", au.CheckedAt.UTC().Format("2006-01-02T15:04:05Z"))
		return printCounts(w, au.Tables)
	})
}
