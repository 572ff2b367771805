package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/bytesize"
)

type adminEnvironmentCmd struct {
	Create adminEnvironmentCreateCmd `cmd:"" help:"Create an environment."`
	List   adminEnvironmentListCmd   `cmd:"" help:"List environments."`
	Policy adminEnvironmentPolicyCmd `cmd:"" help:"Set (--kind, --max) or clear (--clear) an environment's session policy."`
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
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (environmentListAnswer, error) {
		return adminapi.CallAs[environmentListAnswer](ctx, cl, adminapi.OpListEnvironments, nil)
	}, printEnvironments)
}

// printEnvironments is environment list's table, with "sunk" defined under
// it when an environment is.
func printEnvironments(w io.Writer, l environmentListAnswer) error {
	tw := table(w)
	sunk := false
	fmt.Fprintln(tw, "SLUG\tORGANIZATION\tNAME\tSTATUS\tCREATED\tSESSION POLICY\tSTORAGE")
	for _, e := range l.Environments {
		// A column the daemon did not answer is "unknown", the
		// table's short form of unknownText.
		org, storage := "unknown", "unknown"
		if e.Organization != nil {
			org = *e.Organization
		}
		if e.StorageBytes != nil && e.StorageBudgetBytes != nil {
			storage = bytesize.Budget(*e.StorageBytes, *e.StorageBudgetBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Slug, org, displayText(e.Name), e.Status, e.CreatedAt.UTC().Format(time.RFC3339),
			policyText(e.SessionPolicy), storage)
		sunk = sunk || e.Status == "sunk"
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return sunkNote(w, sunk)
}

// sunkNote defines the status "sunk" under a table that shows it
// (docs/operations.md, "Glossary"); nothing when none is.
func sunkNote(w io.Writer, shown bool) error {
	if !shown {
		return nil
	}
	_, err := fmt.Fprintln(w, "sunk: no deployment of the environment is active; its next deployment's first heartbeat makes it active again.")
	return err
}

// policyText is a session policy as the CLI prints it ("-": none).
func policyText(p *adminapi.SessionPolicy) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%s, at most %s", p.Kind, time.Duration(p.MaxSessionSeconds)*time.Second)
}

// adminEnvironmentPolicyCmd sets or clears an environment's session policy
// (docs/operations.md, "Session policies"). It calls adminSetSessionPolicy;
// with --clear, adminClearSessionPolicy (exempt from the one-command rule
// for that reason, see cliExempt).
type adminEnvironmentPolicyCmd struct {
	Slug  string        `arg:"" help:"Environment slug."`
	Kind  string        `help:"Session kind: demo or test."`
	Max   time.Duration `help:"Maximum session length from a deployment's launch, whole seconds, 1m..720h (e.g. 2h)."`
	Clear bool          `help:"Remove the policy instead (expiries it already gave stay)."`
	JSON  bool          `help:"Print JSON."`
}

func (*adminEnvironmentPolicyCmd) operation() string { return adminapi.OpSetSessionPolicy }

// Run sets or clears the policy. Contradictory or missing flags are a
// usage error (exit 2) and send nothing.
func (c *adminEnvironmentPolicyCmd) Run(a *adminCmd) error {
	if c.Clear {
		if c.Kind != "" || c.Max != 0 {
			return &exitError{code: ExitUsage, err: errors.New("--clear takes no --kind or --max")}
		}
		return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.SessionPolicyResult, error) {
			return cl.ClearSessionPolicy(ctx, adminapi.ClearSessionPolicyRequest{EnvironmentSlug: c.Slug})
		}, func(w io.Writer, r adminapi.SessionPolicyResult) error {
			if !r.Cleared {
				_, err := fmt.Fprintf(w, "environment %s had no session policy\n", r.Environment)
				return err
			}
			_, err := fmt.Fprintf(w, "cleared the session policy of %s (expiries already given stay)\n", r.Environment)
			return err
		})
	}
	if c.Kind == "" || c.Max == 0 {
		return &exitError{code: ExitUsage, err: errors.New("give --kind and --max, or --clear")}
	}
	if c.Max%time.Second != 0 {
		return &exitError{code: ExitUsage, err: errors.New("--max must be whole seconds")}
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.SessionPolicyResult, error) {
		return cl.SetSessionPolicy(ctx, adminapi.SetSessionPolicyRequest{EnvironmentSlug: c.Slug, Kind: c.Kind, MaxSessionSeconds: int64(c.Max / time.Second)})
	}, func(w io.Writer, r adminapi.SessionPolicyResult) error {
		_, err := fmt.Fprintf(w, "session policy of %s: %s; %d active deployment(s) given an earlier expiry\n",
			r.Environment, policyText(r.Policy), r.Applied)
		return err
	})
}
