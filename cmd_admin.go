package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/adminapi"
)

// adminCmd talks to a running daemon through its admin API; it never opens
// the database file.
type adminCmd struct {
	URL     string        `name:"url" env:"CHALUPA_URL" default:"http://127.0.0.1:8080" help:"Daemon to talk to."`
	DataDir string        `name:"data-dir" env:"CHALUPA_DATA_DIR" default:"${default_data_dir}" help:"Where to find the generated secrets file when CHALUPA_ADMIN_TOKEN is unset."`
	Timeout time.Duration `default:"60s" help:"Per-request timeout."`

	Status adminStatusCmd `cmd:"" help:"Show version, uptime, schema, database size and replication health."`
	Env    adminEnvCmd    `cmd:"" help:"Manage environments."`
	Keys   adminKeysCmd   `cmd:"" help:"Issue, rotate and revoke per-environment ingest keys."`
	Fleet  adminFleetCmd  `cmd:"" help:"Show environments, deployments, deadlines and key counts."`
	API    adminAPICmd    `cmd:"" name:"api" help:"Call any admin operation by its operationId."`
}

// client builds the typed admin client. The token comes from
// CHALUPA_ADMIN_TOKEN, else from the embedded default's secrets file.
func (a *adminCmd) client() (*adminapi.Client, error) {
	if err := checkAdminURL(a.URL); err != nil {
		return nil, &exitError{code: 1, err: err}
	}
	tok := strings.TrimSpace(os.Getenv("CHALUPA_ADMIN_TOKEN"))
	if tok == "" {
		dir := a.DataDir
		if dir == "" {
			dir = daemon.DefaultDataDir
		}
		m, err := daemon.ReadSecretsFile(filepath.Join(dir, daemon.SecretsFileName))
		if err != nil {
			return nil, &exitError{code: 1, err: errors.New("CHALUPA_ADMIN_TOKEN is unset and the secrets file cannot be read")}
		}
		tok = m["CHALUPA_ADMIN_TOKEN"]
	}
	if tok == "" {
		return nil, &exitError{code: 1, err: errors.New("CHALUPA_ADMIN_TOKEN is unset and no generated secrets file was found (set it, or --data-dir)")}
	}
	return &adminapi.Client{BaseURL: a.URL, Token: tok}, nil
}

// checkAdminURL refuses a daemon URL the admin bearer must not be sent to:
// plain http to a host that is not loopback (the token would cross the
// network in clear text), and anything beyond scheme://host[:port] — user
// info (a second credential the daemon ignores, and one that would end up
// in error messages) or a path, query or fragment (the client appends the
// operation's path to the origin). The messages never repeat the URL, which
// may hold a password.
func checkAdminURL(raw string) error {
	return checkOriginURL("--url (CHALUPA_URL)", "the admin token", raw)
}

// checkOriginURL holds a daemon URL given as flag to the rules above: an
// origin, no user info, and https unless the host is loopback, since what is
// sent (carries) must not cross a network in clear text.
func checkOriginURL(flag, carries, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%s must be http://HOST[:PORT] or https://HOST[:PORT]", flag)
	}
	if u.User != nil {
		return fmt.Errorf("%s must not hold user info (user:password@)", flag)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return fmt.Errorf("%s must be the daemon's origin, scheme://HOST[:PORT], with no path, query or fragment", flag)
	}
	if u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
		return fmt.Errorf("refusing to send %s over plain http to %s: use https, or http only to a loopback address (127.0.0.0/8, ::1, localhost)", carries, u.Hostname())
	}
	return nil
}

// isLoopbackHost reports whether host (no port, no brackets) is localhost or
// a loopback IP address (127.0.0.0/8, ::1, or 127/8 mapped into IPv6); the
// same rule the daemon applies to CHALUPA_LISTEN.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (a *adminCmd) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), a.Timeout)
}

// apiFailure turns a daemon error into an exit status with its code printed.
func apiFailure(err error) error {
	var ae *adminapi.APIError
	if errors.As(err, &ae) {
		return &exitError{code: 1, err: fmt.Errorf("%s: %s", ae.Code, ae.Message)}
	}
	return &exitError{code: 1, err: err}
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type adminStatusCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run prints the daemon's status.
func (c *adminStatusCmd) Run(a *adminCmd) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return apiFailure(err)
	}
	if c.JSON {
		return printJSON(st)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	r := st.Replication
	fmt.Fprintf(tw, "version\t%s\n", st.Version)
	fmt.Fprintf(tw, "uptime\t%s\n", time.Duration(st.UptimeSeconds*float64(time.Second)).Round(time.Second))
	fmt.Fprintf(tw, "schema version\t%d\n", st.SchemaVersion)
	fmt.Fprintf(tw, "database size\t%d bytes\n", st.DBSizeBytes)
	fmt.Fprintf(tw, "replica\t%s, local txid %d, remote txid %d, lag %.1fs (limit %.0fs)\n", r.Kind, r.LocalTXID, r.RemoteTXID, r.LagSeconds, r.LagLimitSeconds)
	if !r.LastSyncAt.IsZero() {
		fmt.Fprintf(tw, "last sync\t%s\n", r.LastSyncAt.UTC().Format(time.RFC3339))
	}
	if r.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s at %s (%d errors)\n", r.LastError, r.LastErrorAt.UTC().Format(time.RFC3339), r.SyncErrors)
	}
	if r.Failing {
		fmt.Fprintf(tw, "replication\tFAILING\n")
	}
	return tw.Flush()
}

type adminEnvCmd struct {
	Create adminEnvCreateCmd `cmd:"" help:"Create an environment."`
	List   adminEnvListCmd   `cmd:"" help:"List environments."`
}

type adminEnvCreateCmd struct {
	Slug string `arg:"" help:"Environment slug (^[a-z0-9][a-z0-9-]{1,62}$)."`
	Name string `help:"Display name (default: the slug)."`
	JSON bool   `help:"Print JSON."`
}

// Run creates the environment.
func (c *adminEnvCreateCmd) Run(a *adminCmd) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	e, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: c.Slug, Name: c.Name})
	if err != nil {
		return apiFailure(err)
	}
	if c.JSON {
		return printJSON(e)
	}
	fmt.Printf("created environment %s\n", e.Slug)
	return nil
}

type adminEnvListCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run lists environments.
func (c *adminEnvListCmd) Run(a *adminCmd) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	envs, err := cl.ListEnvironments(ctx)
	if err != nil {
		return apiFailure(err)
	}
	if c.JSON {
		return printJSON(adminapi.EnvironmentList{Environments: envs})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLUG\tNAME\tSTATUS\tCREATED")
	for _, e := range envs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Slug, displayText(e.Name), e.Status, e.CreatedAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// displayText is s for a terminal: as it is when it is valid UTF-8 without
// control characters, else Go-quoted so escape sequences and NUL bytes (a
// name stored before the daemon refused them) show as text and cannot drive
// the terminal.
func displayText(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

type adminAPICmd struct {
	OperationID string `arg:"" optional:"" name:"operationId" help:"Operation to call, e.g. adminGetStatus."`
	Body        string `help:"JSON request body."`
	List        bool   `help:"List every operation."`
}

// Run calls one operation and prints the raw JSON answer.
func (c *adminAPICmd) Run(a *adminCmd) error {
	if c.List || c.OperationID == "" {
		if !c.List {
			return &exitError{code: exitUsage, err: errors.New("missing operationId (see --list)")}
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		for _, op := range adminapi.Operations {
			fmt.Fprintf(tw, "%s\t%s %s\t%s\n", op.ID, op.Method, op.Path, op.Summary)
		}
		return tw.Flush()
	}
	op, ok := adminapi.Lookup(c.OperationID)
	if !ok {
		return &exitError{code: exitUsage, err: fmt.Errorf("unknown operation %q (see --list)", c.OperationID)}
	}
	var body []byte
	if c.Body != "" {
		if !json.Valid([]byte(c.Body)) {
			return &exitError{code: exitUsage, err: errors.New("--body is not valid JSON")}
		}
		body = []byte(c.Body)
	}
	body, err := adminapi.BodyFor(op.ID, body)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	out, err := cl.Call(ctx, op.ID, body)
	if err != nil {
		return apiFailure(err)
	}
	_, err = os.Stdout.Write(out)
	return err
}
