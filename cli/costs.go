package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// adminCostsCmd shows month-to-date cost estimates (the default) and runs
// reconciliation on demand (docs/operations.md, "Cost reconciliation").
type adminCostsCmd struct {
	Show      adminCostsShowCmd      `cmd:"" default:"withargs" help:"Show the month-to-date estimate by organization, environment and deployment (the default)."`
	Reconcile adminCostsReconcileCmd `cmd:"" help:"Run inventory and cost reconciliation now and print what it did."`
}

type adminCostsShowCmd struct {
	Month string `help:"Month to show, YYYY-MM (UTC); default this month."`
	JSON  bool   `help:"Print JSON."`
}

func (*adminCostsShowCmd) operation() string { return adminapi.OpGetCosts }

var monthFlag = lazyre.New(`^[0-9]{4}-(0[1-9]|1[0-2])$`)

// Run prints the estimate.
func (c *adminCostsShowCmd) Run(a *adminCmd) error {
	if c.Month != "" && !monthFlag.MatchString(c.Month) {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--month must be YYYY-MM, e.g. 2026-07")}
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Costs, error) {
		return cl.GetCosts(ctx, c.Month)
	}, func(w io.Writer, r adminapi.Costs) error {
		fmt.Fprintf(w, "Cost estimate for %s as of %s (USD) — %s.\nRule: %s.\n\n", r.Month, timeOrDash(r.At), r.Note, r.Rule)
		tw := table(w)
		fmt.Fprintln(tw, "ORGANIZATION\tENVIRONMENT\tDEPLOYMENTS\tUNPRICED\tCOMPUTE\tSTORAGE\tTOTAL")
		for _, e := range r.Environments {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", e.Organization, e.Slug, e.Deployments, e.Unpriced,
				usd(e.ComputeUSD), usd(e.StorageUSD), usd(e.TotalUSD))
		}
		for _, o := range r.Organizations {
			fmt.Fprintf(tw, "%s\t(all)\t\t\t%s\t%s\t%s\n", o.Slug, usd(o.ComputeUSD), usd(o.StorageUSD), usd(o.TotalUSD))
		}
		fmt.Fprintf(tw, "(all)\t(all)\t\t%d\t%s\t%s\t%s\n", r.Unpriced, usd(r.ComputeUSD), usd(r.StorageUSD), usd(r.TotalUSD))
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(r.Deployments) > 0 {
			fmt.Fprintln(w)
			tw = table(w)
			fmt.Fprintln(tw, "ENVIRONMENT\tDEPLOYMENT\tSOURCE\tDROPLET\tSIZE\tSTATE\tBILLED FROM\tENDED\tUSD/H\tCOMPUTE")
			for _, d := range r.Deployments {
				rate := "unpriced"
				if d.Priced {
					rate = fmt.Sprintf("%.5f", d.HourlyUSD)
				}
				drop := "-"
				if d.DropletID != 0 {
					drop = fmt.Sprint(d.DropletID)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Environment, displayText(d.ID), d.Source, drop,
					orDash(d.Size), d.Status, timeOrDash(d.BilledFrom), timeOrDash(d.EndedAt), rate, usd(d.ComputeUSD))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if s := r.LastReconciliation; s != nil {
			fmt.Fprintf(w, "\nLast reconciliation: %s (%s), %d droplets seen, %d adopted, %d ended.\n",
				timeOrDash(s.StartedAt), s.Trigger, s.DropletsSeen, s.Adopted, s.Ended)
		} else {
			fmt.Fprintln(w, "\nNo reconciliation has run yet.")
		}
		return nil
	})
}

type adminCostsReconcileCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminCostsReconcileCmd) operation() string { return adminapi.OpReconcileCosts }

// Run runs a pass and prints its report.
func (c *adminCostsReconcileCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).ReconcileCosts, func(w io.Writer, r adminapi.CostReconciliation) error {
		s := r.Snapshot
		fmt.Fprintf(w, "Reconciled at %s in %d ms: %d droplets and %d volumes seen, %d adopted, %d ended, %d rates captured, %d lookups, %d deferred.\n",
			timeOrDash(s.StartedAt), s.DurationMs, s.DropletsSeen, s.VolumesSeen, s.Adopted, s.Ended, s.RatesCaptured, r.Lookups, r.Deferred)
		for _, e := range r.AccountErrors {
			fmt.Fprintf(w, "provider refused: %s\n", displayText(e))
		}
		fmt.Fprintf(w, "Month-to-date %s (USD) — %s.\n", s.Month, r.Note)
		tw := table(w)
		fmt.Fprintln(tw, "ENVIRONMENT\tCOMPUTE\tSTORAGE\tTOTAL")
		for _, e := range r.Environments {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Slug, usd(e.ComputeUSD), usd(e.StorageUSD), usd(e.TotalUSD))
		}
		fmt.Fprintf(tw, "(all)\t\t\t%s\n", usd(s.TotalUSD))
		return tw.Flush()
	})
}

// usd formats an estimate to the cent.
func usd(v float64) string { return fmt.Sprintf("%.2f", v) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
