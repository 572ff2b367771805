package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

type adminDeploymentCmd struct {
	End adminDeploymentEndCmd `cmd:"" help:"End a deployment's record and its open telemetry sessions (the droplet is not touched)."`
}

type adminDeploymentEndCmd struct {
	Env        string `arg:"" name:"slug" help:"Environment slug."`
	Deployment string `arg:"" name:"deployment" help:"Deployment id."`
	JSON       bool   `help:"Print JSON."`
}

func (*adminDeploymentEndCmd) operation() string { return adminapi.OpEndDeployment }

// Run ends the deployment (docs/operations.md, "Ending a deployment").
func (c *adminDeploymentEndCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.EndedDeployment, error) {
		return cl.EndDeployment(ctx, c.Env, c.Deployment)
	}, printEndedDeployment)
}

// printEndedDeployment is deployment end's text, "sunk" defined where it
// appears.
func printEndedDeployment(w io.Writer, e adminapi.EndedDeployment) error {
	when := e.EndedAt.UTC().Format(time.RFC3339)
	if e.AlreadyEnded {
		_, err := fmt.Fprintf(w, "deployment %s had already ended at %s; nothing changed\n", e.DeploymentID, when)
		return err
	}
	fmt.Fprintf(w, "ended deployment %s of %s at %s (the droplet was not touched)\n", e.DeploymentID, e.EnvironmentSlug, when)
	if e.EnvironmentSunk {
		// Sunk: no deployment runs; the next one's first heartbeat
		// makes it active again (docs/operations.md, "Heartbeats and
		// deadlines").
		fmt.Fprintf(w, "environment %s has no active deployment left: marked sunk (nothing runs in it; the next deployment's first heartbeat makes it active again)\n", e.EnvironmentSlug)
	}
	return nil
}
