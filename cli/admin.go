package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/internal/bytesize"
	"github.com/chalupa-run/chalupa/internal/datadir"
	"github.com/chalupa-run/chalupa/internal/origin"
)

// adminCmd talks to a running daemon through its admin API; it never opens
// the database file. Each subcommand that calls one operation implements
// opCommand and runs through runOp.
type adminCmd struct {
	env     *Env                                 // the process, set by newParser
	openAPI func(version string) ([]byte, error) // Wiring.OpenAPI, set by newParser

	URL     string        `name:"url" env:"CHALUPA_URL" help:"Daemon to talk to (default: the address serve recorded in --data-dir; http://127.0.0.1:8080 only when --data-dir does not exist)."`
	DataDir string        `name:"data-dir" env:"CHALUPA_DATA_DIR" default:"${default_data_dir}" help:"Where to find the generated secrets file when CHALUPA_ADMIN_TOKEN is unset."`
	Timeout time.Duration `default:"60s" help:"Per-request timeout."`

	Status      adminStatusCmd      `cmd:"" help:"Show version, uptime, schema, database size, replication and storage health."`
	Environment adminEnvironmentCmd `cmd:"" name:"environment" aliases:"env" help:"Manage environments (alias: env)."`
	Org         adminOrgCmd         `cmd:"" name:"org" help:"Manage customer organizations and their DigitalOcean tokens."`
	Deployment  adminDeploymentCmd  `cmd:"" name:"deployment" help:"Manage deployment records."`
	Keys        adminKeysCmd        `cmd:"" help:"Issue, rotate and revoke per-environment ingest keys."`
	Fleet       adminFleetCmd       `cmd:"" help:"Show environments, deployments, deadlines and key counts."`
	Telemetry   adminTelemetryCmd   `cmd:"" help:"Erase and audit telemetry."`
	Performance adminPerformanceCmd `cmd:"" help:"Show one deployment's telemetry as a table, with its sessions and anomalies."`
	Retention   adminRetentionCmd   `cmd:"" help:"Run and list retention passes (telemetry folding, summaries, heartbeat pruning)."`
	Costs       adminCostsCmd       `cmd:"" help:"Month-to-date cost estimates, and inventory and cost reconciliation on demand (estimates: the DigitalOcean invoice is authoritative)."`
	Reaper      adminReaperCmd      `cmd:"" help:"Run a reaper tick now, or show the reaper's status."`
	Events      adminEventsCmd      `cmd:"" help:"List lifecycle events, newest first (reaper, quotas, agents)."`
	Runs        adminRunsCmd        `cmd:"" help:"List an environment's CI suite runs with their artifacts."`
	Logs        adminLogsCmd        `cmd:"" help:"List, fetch (through short-lived grants) and erase deployments' service logs."`
	Box         adminBoxCmd         `cmd:"" help:"Declare and show boxes (converge intent)."`
	Converge    adminConvergeCmd    `cmd:"" help:"Enqueue preview, up, refresh or destroy for a box (--wait follows it)."`
	State       adminStateCmd       `cmd:"" help:"Converge state: cancel a held lock."`
	Jobs        adminJobsCmd        `cmd:"" help:"List converge jobs and the job runners seen (--watch follows changes)."`
	Job         adminJobCmd         `cmd:"" help:"Show one converge job."`
	Reroll      adminRerollCmd      `cmd:"" help:"Fleet reroll: one job per box, in order, each waited for; a summary at the end (upgrade-agent: a rollout in the daemon)."`
	Rollout     adminRolloutCmd     `cmd:"" help:"Show an agent rollout (reroll --action upgrade-agent starts one; admin jobs lists them)."`
	SSHKey      adminSSHKeyCmd      `cmd:"" name:"ssh-key" help:"Print the public key converge delivers agent keys with (generated once; add it to the boxes' SSH keys)."`
	Password    adminPasswordCmd    `cmd:"" help:"Set the web console's password (read from the terminal twice, one line of standard input, or --password-file)."`
	Loops       adminLoopsCmd       `cmd:"" help:"Pause and resume background loops (reaper, retention, costs, jobs); ingest is never paused."`
	Alerts      adminAlertsCmd      `cmd:"" help:"Open and recent alerts and their sinks; send a test message, acknowledge an alert, mute a kind for at most 24h."`
	Report      adminReportCmd      `cmd:"" help:"Operations report from stored evidence: requests and p50/p99 by route group, active time, database and WAL growth, loop runs, quota refusals."`
	API         adminAPICmd         `cmd:"" name:"api" help:"Call any admin operation by its operationId."`
}

// opCommand is an admin subcommand that calls one admin operation; the
// accounting test walks the command tree for them, so every operation has
// a command (or an explicit exemption).
type opCommand interface {
	// operation is the operationId the command calls.
	operation() string
}

// client builds the typed admin client. The token comes from
// CHALUPA_ADMIN_TOKEN, else from the embedded default's secrets file.
func (a *adminCmd) client() (*adminapi.Client, error) {
	// A URL that breaks the rule is a mistake in what was typed (CHALUPA_URL
	// is --url's value), like the agent's --url: exit 2 with the usage line
	// (docs/operations.md, "Exit codes").
	base, from, err := resolveDaemon(a.URL, a.DataDir)
	if err != nil {
		return nil, err
	}
	tok := strings.TrimSpace(a.env.Getenv("CHALUPA_ADMIN_TOKEN"))
	if tok == "" {
		dir := a.DataDir
		if dir == "" {
			dir = datadir.DefaultDir
		}
		path := filepath.Join(dir, datadir.SecretsFileName)
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
			// serve refuses such a file; so does its client.
			return nil, &exitError{code: 1, err: fmt.Errorf("%s is readable by group or others (chmod 600 %s)", datadir.SecretsFileName, path)}
		}
		m, err := datadir.ReadSecrets(path)
		if err != nil {
			return nil, &exitError{code: 1, err: errors.New("CHALUPA_ADMIN_TOKEN is unset and the secrets file cannot be read")}
		}
		tok = m["CHALUPA_ADMIN_TOKEN"]
	}
	if tok == "" {
		return nil, &exitError{code: 1, err: errors.New("CHALUPA_ADMIN_TOKEN is unset and no generated secrets file was found (set it, or --data-dir)")}
	}
	// The per-request bound is --timeout (runOp's context); the transport
	// gets the same, not adminapi's 60 s default.
	return &adminapi.Client{BaseURL: base, BaseURLFrom: from, Token: tok, HTTP: &http.Client{Timeout: a.Timeout}}, nil
}

// flagSource is how a daemon URL given on the command line was chosen, as
// connection errors say it.
const flagSource = "--url or CHALUPA_URL"

// resolveDaemon is the daemon a client command talks to and how the URL
// was chosen, for the client's connection errors
// (adminapi.Client.BaseURLFrom): --url (CHALUPA_URL) when set, else the
// address a running serve recorded in dataDir, else datadir.DefaultURL
// when dataDir does not exist. A flag that breaks the origin rule is a
// command-line mistake (exit 2); an unreadable or unusable recorded
// address exits 1. A data dir that exists but records no address is
// refused (exit 1) rather than read as the default: the daemon on
// 127.0.0.1:8080 may be another one, which would answer unauthorized or,
// worse, answer (docs/operations.md, "Embedded default").
func resolveDaemon(flag, dataDir string) (base, from string, err error) {
	if flag != "" {
		// A URL that breaks the rule is a mistake in what was typed
		// (CHALUPA_URL is --url's value), like the agent's --url: exit 2
		// with the usage line (docs/operations.md, "Exit codes").
		if err := origin.CheckDaemonURL("--url (CHALUPA_URL)", "the admin token", flag); err != nil {
			return "", "", &exitError{code: ExitUsage, err: err}
		}
		return flag, flagSource, nil
	}
	if dataDir == "" {
		dataDir = datadir.DefaultDir
	}
	addrFile := filepath.Join(dataDir, datadir.AddressFileName)
	u, err := datadir.DaemonURL(dataDir)
	switch {
	case errors.Is(err, datadir.ErrNoAddress):
		if fi, serr := os.Stat(dataDir); serr == nil && fi.IsDir() {
			return "", "", &exitError{code: 1, err: fmt.Errorf("no daemon address in %s: no serve is running on this data directory (serve records its address there while it runs); "+
				"start chalupa serve, or name the daemon with --url or CHALUPA_URL (not falling back to %s, which may be another daemon)", addrFile, datadir.DefaultURL)}
		}
		return datadir.DefaultURL, fmt.Sprintf("the default: no data directory at %s", dataDir), nil
	case err != nil:
		return "", "", &exitError{code: 1, err: err}
	}
	return u, "recorded in " + addrFile, nil
}

// runOp is every admin subcommand's body: build the client, call the
// daemon within --timeout, and print the answer as JSON (asJSON) or with
// text. A daemon error exits 1 with its code and message.
func runOp[Resp any](a *adminCmd, asJSON bool, call func(*adminapi.Client, context.Context) (Resp, error), text func(io.Writer, Resp) error) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.Timeout)
	defer cancel()
	resp, err := call(cl, ctx)
	if err != nil {
		return apiFailure(err)
	}
	if asJSON {
		return printJSON(a.env.Stdout, resp)
	}
	return text(a.env.Stdout, resp)
}

// apiFailure turns a daemon error into an exit status with its code printed.
func apiFailure(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	var te *adminapi.TransportError
	if errors.As(err, &te) {
		// The origin tried and how it was chosen are in te's message
		// (docs/operations.md, "Embedded default").
		return &exitError{code: 1, err: fmt.Errorf("%w; is chalupa serve running there? --url or CHALUPA_URL names another daemon", err)}
	}
	var ae *adminapi.APIError
	if errors.As(err, &ae) && ae.Code == "unauthorized" && ae.Where() != "" {
		// Another daemon than the one meant refuses this token the same way.
		return &exitError{code: 1, err: fmt.Errorf("%s: %s, from %s: is it the daemon you meant? (--url or CHALUPA_URL names another; the token is CHALUPA_ADMIN_TOKEN, else secrets.env in --data-dir)", ae.Code, ae.Message, ae.Where())}
	}
	if errors.As(err, &ae) && ae.Code != "" {
		hint := ""
		if (ae.Code == "bad_body" && strings.Contains(ae.Message, "unknown field")) ||
			(ae.Code == "bad_param" && strings.Contains(ae.Message, "unknown query parameter")) {
			hint = olderDaemonHint
		}
		return &exitError{code: 1, err: fmt.Errorf("%s: %s%s", ae.Code, ae.Message, hint)}
	}
	// Not a chalupa error body (a proxy's page, another server): the
	// client's error names the HTTP status.
	return &exitError{code: 1, err: err}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table is a tab-aligned writer for command output.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

type adminStatusCmd struct {
	JSON        bool `help:"Print JSON."`
	CheckTokens bool `help:"Check each DigitalOcean token now with a read-only call (GET /v2/account) and show per variable whether it works; a refused token opens the do-token-refused alert."`
}

func (*adminStatusCmd) operation() string { return adminapi.OpGetStatus }

// Run prints the daemon's status; what the daemon did not answer shows as
// unknown (statusAnswer).
func (c *adminStatusCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (statusAnswer, error) {
		var checked []adminapi.TokenCheck
		if c.CheckTokens {
			// First, so the status read after shows the alert it opened
			// or lifted (docs/operations.md, "Alerts").
			tc, err := cl.CheckTokens(ctx)
			if err != nil {
				return statusAnswer{}, err
			}
			checked = tc.Tokens
		}
		st, err := adminapi.CallAs[statusAnswer](ctx, cl, adminapi.OpGetStatus, nil)
		if c.CheckTokens {
			st.Tokens = checked
		}
		return st, err
	}, func(w io.Writer, st statusAnswer) error { return printStatus(w, st, c.CheckTokens) })
}

// printStatus is admin status's text: sizes in the units the console and
// environment list use (bytesize), what the daemon did not answer as
// unknown; checked says whether --check-tokens ran.
func printStatus(w io.Writer, st statusAnswer, checked bool) error {
	tw := table(w)
	r := st.Replication
	fmt.Fprintf(tw, "version\t%s\n", st.Version)
	fmt.Fprintf(tw, "uptime\t%s\n", time.Duration(st.UptimeSeconds*float64(time.Second)).Round(time.Second))
	fmt.Fprintf(tw, "schema version\t%d\n", st.SchemaVersion)
	fmt.Fprintf(tw, "database size\t%s\n", bytesize.Format(st.DBSizeBytes))
	fmt.Fprintf(tw, "replica\t%s, local txid %d, remote txid %d, lag %.1fs (limit %.0fs)\n", r.Kind, r.LocalTXID, r.RemoteTXID, r.LagSeconds, r.LagLimitSeconds)
	if r.Generation != "" {
		fmt.Fprintf(tw, "replica generation\t%s (a rollback started it: restore from the replica URL with /%s appended)\n", r.Generation, r.Generation)
	}
	if !r.LastSyncAt.IsZero() {
		fmt.Fprintf(tw, "last sync\t%s\n", r.LastSyncAt.UTC().Format(time.RFC3339))
	}
	if r.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s at %s (%d errors)\n", r.LastError, r.LastErrorAt.UTC().Format(time.RFC3339), r.SyncErrors)
	}
	if r.Failing {
		fmt.Fprintf(tw, "replication\tFAILING\n")
	}
	var sh adminapi.StorageHealth
	if st.Storage == nil {
		fmt.Fprintf(tw, "disk\t%s\n", unknownText)
	} else {
		sh = *st.Storage
		fmt.Fprintf(tw, "disk\t%s free of %s, floor %s\n", bytesize.Format(clampInt64(sh.FreeBytes)), bytesize.Format(clampInt64(sh.TotalBytes)), bytesize.Format(clampInt64(sh.MinFreeBytes)))
	}
	if sh.DiskLow {
		fmt.Fprintf(tw, "disk low\tsince %s: signed ingest other than heartbeats is refused 503 disk_low; make room (retention, erase, a larger disk)\n", timeOrDash(sh.DiskLowSince))
	}
	if sh.DiskError != "" {
		fmt.Fprintf(tw, "disk\tfree space not measured (%s): the guard refuses nothing\n", sh.DiskError)
	}
	if sh.Failing {
		fmt.Fprintf(tw, "storage\tFAILING since %s (%s): writes are answered 503 storage_unavailable\n", timeOrDash(sh.FailingSince), sh.LastFault)
	} else if sh.LastFault != "" {
		fmt.Fprintf(tw, "storage\tok; last fault %s at %s (%d faults)\n", sh.LastFault, timeOrDash(sh.LastFaultAt), sh.Faults)
	}
	// Every time the reaper or costs are not fully on
	// (docs/operations.md, "Configuration").
	fmt.Fprintf(tw, "reaper\t%s\n", orUnknown(st.ReaperMode))
	fmt.Fprintf(tw, "costs\t%s\n", orUnknown(st.Costs))
	for _, n := range st.ModeNotes {
		fmt.Fprintf(tw, "warning\t%s\n", n)
	}
	for _, l := range offsetLines(st.ClockOffset) {
		fmt.Fprintf(tw, "%s\n", l)
	}
	if c := st.ReaperClock; c.Suspect {
		for _, l := range clockLines(c) {
			fmt.Fprintf(tw, "reaper %s\n", l)
		}
	}
	for _, t := range st.Tokens {
		fmt.Fprintf(tw, "token %s\t%s\n", t.Variable, tokenText(t))
	}
	if checked && len(st.Tokens) == 0 {
		// Say the check had nothing to do, not nothing at all.
		fmt.Fprintf(tw, "tokens\tno DigitalOcean token is configured: none to check\n")
	}
	for _, l := range st.Loops {
		if l.Paused {
			fmt.Fprintf(tw, "loop %s\tPAUSED since %s\n", l.Name, timeOrDash(l.ChangedAt))
		}
	}
	if st.AlertSinks == nil {
		fmt.Fprintf(tw, "alert sinks\t%s\n", unknownText)
	} else {
		printSinks(tw, *st.AlertSinks)
	}
	return tw.Flush()
}

// offsetLines are admin status's lines for the fleet's clock offset
// (docs/operations.md, "Heartbeats and deadlines"), tab-separated.
func offsetLines(o adminapi.ClockOffset) []string {
	if !o.Measured {
		return []string{"clock offset\tnot measured (fewer than 5 deployments heard in 10 min)"}
	}
	fleet := fmt.Sprintf("clock offset\t%+.1f s (median of %d deployments' signed heartbeats; positive: the server is ahead)", o.Seconds, o.Deployments)
	if o.Off {
		fleet += ": more than 30 s, fix the server's clock (nothing is held)"
	}
	out := []string{fleet}
	for _, e := range o.Environments {
		out = append(out, fmt.Sprintf("clock offset %s\t%+.1f s (%d deployments)", displayText(e.Environment), e.Seconds, e.Deployments))
	}
	return out
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

// timeOrDash formats t as RFC 3339 UTC, "-" when zero.
func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

type adminAPICmd struct {
	OperationID string            `arg:"" optional:"" name:"operationId" help:"Operation to call, e.g. adminGetStatus."`
	Body        string            `help:"JSON request body."`
	Param       map[string]string `help:"A path or query parameter, name=value (repeatable), e.g. --param slug=demo-harbor --param step=5m."`
	List        bool              `help:"List every operation."`
	OpenAPI     bool              `name:"openapi" help:"Print the OpenAPI 3.1 document of this build's admin, ingest and health APIs (the one GET /api/admin/openapi.json serves); needs no daemon."`
}

// Run calls one operation and prints the raw JSON answer, lists the
// operation table, or prints the OpenAPI document.
func (c *adminAPICmd) Run(a *adminCmd) error {
	if c.OpenAPI {
		if c.List || c.OperationID != "" {
			return &exitError{code: ExitUsage, err: errors.New("--openapi takes no operationId and no --list")}
		}
		if a.openAPI == nil {
			return &exitError{code: 1, err: errors.New("this build has no OpenAPI document")}
		}
		doc, err := a.openAPI(buildinfo.Version)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.env.Stdout, "%s\n", doc)
		return err
	}
	if c.List || c.OperationID == "" {
		if !c.List {
			return &exitError{code: ExitUsage, err: errors.New("missing operationId (see --list)")}
		}
		tw := table(a.env.Stdout)
		for _, op := range adminapi.Operations {
			kind := "read"
			if op.Mutates {
				kind = "write"
			}
			path := op.Path
			if _, query := op.Parameters(); len(query) > 0 {
				path += "?" + strings.Join(query, "=&") + "="
			}
			fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\n", op.ID, op.Method, path, kind, op.Summary)
		}
		return tw.Flush()
	}
	op, ok := adminapi.Lookup(c.OperationID)
	if !ok {
		return &exitError{code: ExitUsage, err: fmt.Errorf("unknown operation %q (see --list)", c.OperationID)}
	}
	var body []byte
	if c.Body != "" {
		if !json.Valid([]byte(c.Body)) {
			return &exitError{code: ExitUsage, err: errors.New("--body is not valid JSON")}
		}
		body = []byte(c.Body)
	}
	body, err := adminapi.BodyFor(op.ID, body)
	if err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	params := adminapi.Params(c.Param)
	if err := adminapi.CheckParams(op.ID, params); err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	return runOp(a, false, func(cl *adminapi.Client, ctx context.Context) ([]byte, error) {
		return cl.Call(ctx, op.ID, params, body)
	}, func(w io.Writer, out []byte) error {
		_, err := w.Write(out)
		return err
	})
}

// tokenText is admin status's words for one token's check: its state, when
// it ran and why it failed; never the token (docs/operations.md, "Alerts").
func tokenText(t adminapi.TokenCheck) string {
	out := t.State
	if t.CheckedAt != nil {
		out += ", checked " + t.CheckedAt.UTC().Format(time.RFC3339)
	}
	if t.Detail != "" {
		out += ": " + t.Detail
	}
	return out
}

// clampInt64 is n as an int64, at most math.MaxInt64 (a file system's
// sizes are far below it).
func clampInt64(n uint64) int64 { return int64(min(n, math.MaxInt64)) }
