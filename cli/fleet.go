package cli

import (
	"fmt"
	"io"

	"github.com/chalupa-run/chalupa/adminapi"
)

type adminFleetCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminFleetCmd) operation() string { return adminapi.OpListFleet }

// Run prints the fleet.
func (c *adminFleetCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).ListFleet, printFleet)
}

// printFleet is admin fleet's table, with "sunk" defined under it when an
// environment is.
func printFleet(w io.Writer, f adminapi.Fleet) error {
	tw := table(w)
	sunk := false
	fmt.Fprintln(tw, "ENVIRONMENT\tSTATUS\tKEYS ACTIVE/ROTATING/REVOKED\tDEPLOYMENT\tDROPLET\tSTATE\tLAST HEARTBEAT\tIDLE DEADLINE\tSESSION EXPIRES\tCI")
	for _, e := range f.Environments {
		keys := fmt.Sprintf("%d/%d/%d", e.Keys["active"], e.Keys["rotating"], e.Keys["revoked"])
		sunk = sunk || e.Status == "sunk"
		if len(e.Deployments) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", e.Slug, e.Status, keys)
		}
		for _, d := range e.Deployments {
			drop := "-"
			if d.DropletID != 0 {
				drop = fmt.Sprint(d.DropletID)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", e.Slug, e.Status, keys, d.ID, drop, d.Status,
				timeOrDash(d.LastHeartbeatAt), timeOrDash(d.IdleDeadlineAt), timeOrDash(d.SessionExpiresAt), d.CIActive)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return sunkNote(w, sunk)
}
