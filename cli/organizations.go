package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// maxTokenInput bounds what `org token set` reads (bytes): a DigitalOcean
// token is 71 bytes, the API takes at most 512.
const maxTokenInput = 4096

type adminOrgCmd struct {
	Create adminOrgCreateCmd `cmd:"" help:"Create a customer organization."`
	List   adminOrgListCmd   `cmd:"" help:"List organizations and their provider token's status (never the token)."`
	Token  adminOrgTokenCmd  `cmd:"" help:"Store, rotate or revoke a customer organization's DigitalOcean token."`
}

type adminOrgCreateCmd struct {
	Slug string `arg:"" help:"Organization slug (^[a-z0-9][a-z0-9-]{1,62}$)."`
	Name string `help:"Display name (default: the slug)."`
	JSON bool   `help:"Print JSON."`
}

func (*adminOrgCreateCmd) operation() string { return adminapi.OpCreateOrganization }

// Run creates the organization.
func (c *adminOrgCreateCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Organization, error) {
		return cl.CreateOrganization(ctx, adminapi.CreateOrganizationRequest{Slug: c.Slug, Name: c.Name})
	}, func(w io.Writer, o adminapi.Organization) error {
		_, err := fmt.Fprintf(w, "created customer organization %s\n", o.Slug)
		return err
	})
}

type adminOrgListCmd struct {
	JSON bool `help:"Print JSON."`
}

func (*adminOrgListCmd) operation() string { return adminapi.OpListOrganizations }

// Run lists organizations.
func (c *adminOrgListCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, (*adminapi.Client).ListOrganizations, func(w io.Writer, l adminapi.OrganizationList) error {
		tw := table(w)
		fmt.Fprintln(tw, "SLUG\tNAME\tKIND\tTOKEN\tGENERATION\tROTATED")
		for _, o := range l.Organizations {
			status, gen, rotated := "-", "-", "-"
			if o.Kind == "platform" {
				status = "platform write token"
			}
			if t := o.ProviderToken; t != nil {
				status, gen, rotated = t.Status, fmt.Sprint(t.Generation), t.RotatedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Slug, displayText(o.Name), o.Kind, status, gen, rotated)
		}
		return tw.Flush()
	})
}

type adminOrgTokenCmd struct {
	Set    adminOrgTokenSetCmd    `cmd:"" help:"Store or rotate the organization's token (droplet:read + droplet:delete), read from stdin or --file; never echoed."`
	Revoke adminOrgTokenRevokeCmd `cmd:"" help:"Revoke the organization's stored token."`
}

type adminOrgTokenSetCmd struct {
	Slug string `arg:"" help:"Customer organization slug."`
	File string `help:"Read the token from this file instead of stdin." type:"path"`
	JSON bool   `help:"Print JSON."`
}

func (*adminOrgTokenSetCmd) operation() string { return adminapi.OpSetProviderToken }

// Run stores the token. It is read from stdin or --file, never from the
// command line (argv is visible to every user of the machine), and is
// never printed.
func (c *adminOrgTokenSetCmd) Run(a *adminCmd) error {
	token, err := readToken(c.File, a.env.Stdin)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.ProviderTokenStatus, error) {
		return cl.SetProviderToken(ctx, c.Slug, token)
	}, func(w io.Writer, s adminapi.ProviderTokenStatus) error {
		verb := "stored"
		if s.Generation > 1 {
			verb = "rotated"
		}
		_, err := fmt.Fprintf(w, "%s the provider token of %s (generation %d, %s); the customer sweep reaps its droplets with it\n", verb, s.Organization, s.Generation, s.Status)
		return err
	})
}

// readToken reads one token from path, or from stdin when path is empty:
// surrounding whitespace (a trailing newline) is dropped. Errors name the
// source, never the content.
func readToken(path string, stdin io.Reader) (string, error) {
	src, name := stdin, "stdin"
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("read the token file: %w", errors.Unwrap(err))
		}
		defer f.Close()
		src, name = f, "the token file"
	}
	b, err := io.ReadAll(io.LimitReader(src, maxTokenInput+1))
	if err != nil {
		return "", fmt.Errorf("read the token from %s failed", name)
	}
	if len(b) > maxTokenInput {
		return "", fmt.Errorf("the token from %s is longer than %d bytes", name, maxTokenInput)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "", fmt.Errorf("no token on %s (pipe it in, or use --file)", name)
	}
	return string(b), nil
}

type adminOrgTokenRevokeCmd struct {
	Slug string `arg:"" help:"Customer organization slug."`
	JSON bool   `help:"Print JSON."`
}

func (*adminOrgTokenRevokeCmd) operation() string { return adminapi.OpRevokeProviderToken }

// Run revokes the token.
func (c *adminOrgTokenRevokeCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.ProviderTokenStatus, error) {
		return cl.RevokeProviderToken(ctx, c.Slug)
	}, func(w io.Writer, s adminapi.ProviderTokenStatus) error {
		_, err := fmt.Fprintf(w, "revoked the provider token of %s (generation %d); its deployments are not reaped until a new token is set\n", s.Organization, s.Generation)
		return err
	})
}
