package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
)

type adminEnvironmentCmd struct {
	Create adminEnvironmentCreateCmd `cmd:"" help:"Create an environment."`
	List   adminEnvironmentListCmd   `cmd:"" help:"List environments."`
}

type adminEnvironmentCreateCmd struct {
	Slug string `arg:"" help:"Environment slug (^[a-z0-9][a-z0-9-]{1,62}$)."`
	Name string `help:"Display name (default: the slug)."`
	Org  string `help:"Customer organization slug (default: the platform organization)."`
	JSON bool   `help:"Print JSON."`
}

func (*adminEnvironmentCreateCmd) operation() string { return adminapi.OpCreateEnvironment }

// Run creates the environment.
func (c *adminEnvironmentCreateCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Environment, error) {
		return cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: c.Slug, Name: c.Name, Organization: c.Org})
	}, func(w io.Writer, e adminapi.Environment) error {
		_, err := fmt.Fprintf(w, "created environment %s\n", e.Slug)
		return err
	})
}

type adminEnvironmentListCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminEnvironmentListCmd) operation() string { return adminapi.OpListEnvironments }

// Run lists environments.
func (c *adminEnvironmentListCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).ListEnvironments, func(w io.Writer, l adminapi.EnvironmentList) error {
		tw := table(w)
		fmt.Fprintln(tw, "SLUG\tORGANIZATION\tNAME\tSTATUS\tCREATED")
		for _, e := range l.Environments {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Slug, e.Organization, displayText(e.Name), e.Status, e.CreatedAt.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	})
}
