// Package agentcli is the fleet agent's command line: `chalupa agent …` in
// the full binary and the same commands at the top of the standalone
// `chalupa-agent` (cmd/chalupa-agent), so both take exactly the same flags
// and CHALUPA_AGENT_* variables (docs/operations.md, "Agent"). It imports
// the agent and the leaves it needs (protocol,
// internal/…), never a server package: cmd/chalupa-agent's dependency test
// holds it to that.
package agentcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/agent/logship"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/internal/origin"
	"github.com/chalupa-run/chalupa/protocol"
)

// Cmd is `chalupa agent`: the agent's commands under the full binary. The
// standalone chalupa-agent lists the same command types at its top
// (Standalone), so a flag added to one is in both.
type Cmd struct {
	Run         agentRunCmd         `cmd:"" help:"Run the fleet agent: heartbeats with idle detection, Monitor windows, a durable spool (docs/operations.md, \"Agent\")."`
	Status      agentStatusCmd      `cmd:"" help:"Print what the agent would send now, and its spool, without sending."`
	Heartbeat   agentHeartbeatCmd   `cmd:"" help:"Send signed heartbeats whose idle state you give (the reference command)."`
	ReportRun   agentReportRunCmd   `cmd:"" name:"report-run" help:"Report a finished CI suite run (spooled, so it survives the control plane being down)."`
	SystemdUnit agentSystemdUnitCmd `cmd:"" name:"systemd-unit" help:"Print the agent's systemd unit (the cloud-init install writes it)."`
}

// ExitUsage is the exit status for command-line mistakes, including a flag
// value that breaks its rule on its face (a --url that is not an https
// origin off loopback); a refusal that depends on anything beyond the
// command line (a file, the control plane's answer) exits 1
// (docs/operations.md, "Exit codes").
const ExitUsage = 2

// ExitError carries an exit status out of a command's Run: the full
// binary's main and Main print Err (when set) and exit with Code.
type ExitError struct {
	// Code is the process exit status (1, or ExitUsage).
	Code int
	// Err is what to print; nil prints nothing (the command printed it).
	Err error
}

// Error is Err's message, or the exit status when Err is nil.
func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

// Unwrap is Err.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is Code: the full binary's cli.Run reads the status through it.
func (e *ExitError) ExitCode() int { return e.Code }

// ExitMessage is what to print before exiting: Err's message, or "" when
// the command printed its own (cli.Run prints nothing then).
func (e *ExitError) ExitMessage() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

// agentFlags are the settings `agent run` and `agent status` share, each
// also read from its CHALUPA_AGENT_* variable (an EnvironmentFile under
// systemd; docs/operations.md, "Agent").
type agentFlags struct {
	LimitMinutes int64  `name:"limit-minutes" env:"CHALUPA_AGENT_LIMIT_MINUTES" default:"30" help:"Idle limit in minutes (1..10080)."`
	StateDir     string `name:"state-dir" env:"CHALUPA_AGENT_STATE_DIR" default:"/var/lib/chalupa-agent" help:"Spool and state file."`
	ProcRoot     string `name:"proc-root" env:"CHALUPA_AGENT_PROC_ROOT" default:"/proc" help:"Where /proc is (tests)."`
	DevRoot      string `name:"dev-root" env:"CHALUPA_AGENT_DEV_ROOT" default:"/dev" help:"Where /dev is (terminal input: pts/*)."`
	RunRoot      string `name:"run-root" env:"CHALUPA_AGENT_RUN_ROOT" default:"/run" help:"Where /run is (CI marker: chalupa/ci-active)."`
	// SSHPort is accepted and ignored for one release: SSH sessions are
	// authenticated sshd session processes now, not connections to a port
	// (docs/operations.md, "Agent"); set, it logs a warning.
	SSHPort          int    `name:"ssh-port" env:"CHALUPA_AGENT_SSH_PORT" hidden:"" help:"Deprecated and ignored: SSH sessions are seen as sshd session processes."`
	CIProcessPattern string `name:"ci-process" env:"CHALUPA_AGENT_CI_PROCESS" help:"Regular expression over process names: a match means a CI job runs."`
}

func (f *agentFlags) config() agent.Config {
	return agent.Config{LimitMinutes: f.LimitMinutes, StateDir: f.StateDir, ProcRoot: f.ProcRoot, DevRoot: f.DevRoot,
		RunRoot: f.RunRoot, CIProcessPattern: f.CIProcessPattern}
}

type agentRunCmd struct {
	agentFlags       `embed:""`
	URL              string    `env:"CHALUPA_AGENT_URL" required:"" help:"Control plane origin, https unless loopback."`
	KeyID            string    `name:"key-id" env:"CHALUPA_AGENT_KEY_ID" help:"Ingest key id (default: read from --key-id-file)."`
	KeyIDFile        string    `name:"key-id-file" env:"CHALUPA_AGENT_KEY_ID_FILE" help:"File holding the key id (default: key-id beside --key-file)."`
	KeyFile          string    `name:"key-file" env:"CHALUPA_AGENT_KEY_FILE" default:"/etc/chalupa-agent/ingest.key" help:"Key material, mode 0600; the agent waits until it exists."`
	Env              string    `env:"CHALUPA_AGENT_ENV" required:"" help:"Environment slug the key is bound to."`
	Deployment       string    `env:"CHALUPA_AGENT_DEPLOYMENT" help:"Deployment id (default: droplet-<droplet id>)."`
	DropletID        int64     `name:"droplet-id" env:"CHALUPA_AGENT_DROPLET_ID" help:"Droplet id (default: the metadata service)."`
	Region           string    `env:"CHALUPA_AGENT_REGION" help:"Region slug (default: the metadata service)."`
	Size             string    `env:"CHALUPA_AGENT_SIZE" help:"Droplet size slug."`
	SessionExpiresAt time.Time `name:"session-expires-at" env:"CHALUPA_AGENT_SESSION_EXPIRES_AT" help:"Absolute session expiry (RFC 3339)." format:"2006-01-02T15:04:05Z07:00"`
	MetadataURL      string    `name:"metadata-url" env:"CHALUPA_AGENT_METADATA_URL" default:"http://169.254.169.254/metadata/v1" help:"DigitalOcean metadata service."`
	DiskPath         string    `name:"disk-path" env:"CHALUPA_AGENT_DISK_PATH" default:"/" help:"Filesystem whose use is reported."`
	NvidiaSMI        string    `name:"nvidia-smi" env:"CHALUPA_AGENT_NVIDIA_SMI" default:"nvidia-smi" help:"nvidia-smi executable (looked up on PATH; 'none' disables GPU metrics)."`
	LogFile          []string  `name:"log-file" env:"CHALUPA_AGENT_LOG_FILES" sep:"," help:"Ship this file's lines as PATH[=SERVICE] (SERVICE: the file's base name by default; it must be on the environment's log allowlist). Repeatable."`
	LogUnit          []string  `name:"log-unit" env:"CHALUPA_AGENT_LOG_UNITS" sep:"," help:"Ship this systemd unit's journal (through journalctl). Repeatable."`
}

// logConfigs turns --log-file and --log-unit into the agent's log services.
func (c *agentRunCmd) logConfigs() []agent.LogConfig {
	var out []agent.LogConfig
	for _, f := range c.LogFile {
		path, service, ok := strings.Cut(f, "=")
		if !ok {
			service = filepath.Base(path)
		}
		out = append(out, agent.LogConfig{Service: service, Path: path})
	}
	for _, u := range c.LogUnit {
		out = append(out, agent.LogConfig{Service: u, Unit: u})
	}
	return out
}

// Run runs the agent until SIGTERM or SIGINT, then sends the final window
// within agent.ShutdownDeadline. A --url or other value breaking its rule on
// its face exits 2; an exposed key file exits 1 (docs/operations.md, "Exit
// codes"); missing key files are waited for.
func (c *agentRunCmd) Run(k *kong.Context) error {
	cfg := c.config()
	cfg.URL, cfg.KeyID, cfg.KeyIDFile, cfg.KeyFile, cfg.Environment = c.URL, c.KeyID, c.KeyIDFile, c.KeyFile, c.Env
	cfg.DeploymentID, cfg.DropletID, cfg.Region, cfg.Size = c.Deployment, c.DropletID, c.Region, c.Size
	cfg.SessionExpiresAt, cfg.MetadataURL, cfg.DiskPath, cfg.NvidiaSMI = c.SessionExpiresAt, c.MetadataURL, c.DiskPath, c.NvidiaSMI
	cfg.Logs = c.logConfigs()
	cfg.Log = zerolog.New(k.Stderr).With().Timestamp().Logger()
	if c.SSHPort != 0 {
		cfg.Log.Warn().Msg("--ssh-port / CHALUPA_AGENT_SSH_PORT is ignored and will be removed: SSH sessions are seen as authenticated sshd session processes, whatever the port")
	}
	if d := cfg.WithDefaults(); d.Validate() != nil {
		err := d.Validate()
		return &ExitError{Code: ExitUsage, Err: err}
	}
	agent.Version = buildinfo.Version
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the key or the metadata
		}
		return &ExitError{Code: 1, Err: err}
	}
	return a.Run(ctx)
}

type agentStatusCmd struct {
	agentFlags `embed:""`
	JSON       bool `name:"json" help:"Print JSON."`
}

// Run prints the status report (agent.Status): nothing is sent and the
// state dir is not changed.
func (c *agentStatusCmd) Run(k *kong.Context) error {
	rep, err := agent.Status(c.config())
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	if c.JSON {
		enc := json.NewEncoder(k.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printAgentStatus(k.Stdout, rep)
	return nil
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printAgentStatus(w io.Writer, r agent.StatusReport) {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "deployment       %s (environment %s)\n", orDash(r.DeploymentID), orDash(r.EnvironmentSlug))
	idle := "active"
	if r.Reaper.Idle {
		idle = "IDLE (limit passed)"
	}
	fmt.Fprintf(w, "idle state       %s; limit %d min, deadline %s\n", idle, r.Reaper.LimitMinutes, ts(r.Reaper.IdleDeadlineAt))
	fmt.Fprintf(w, "lastActivityAt   %s (idleChecks %d)\n", ts(r.Reaper.LastActivityAt), r.Reaper.IdleChecks)
	for _, s := range r.Sources {
		if s.Error != "" {
			fmt.Fprintf(w, "  %-14s error: %s\n", s.Name, s.Error)
		} else {
			fmt.Fprintf(w, "  %-14s %s\n", s.Name, ts(s.LastActivityAt))
		}
	}
	fmt.Fprintf(w, "ciActive         %v (%s)\n", r.Reaper.CIActive, r.CI)
	fmt.Fprintf(w, "last heartbeat   %s (status %d)\n", ts(r.LastHeartbeatAt), r.LastHeartbeatStatus)
	fmt.Fprintf(w, "last delivery    %s (%d delivered)\n", ts(r.LastDeliveryAt), r.Delivered)
	fmt.Fprintf(w, "spool            %d records, %d bytes, oldest %s\n", r.Spool.Records, r.Spool.Bytes, ts(r.Spool.Oldest))
	fmt.Fprintf(w, "report spool     %d records, %d bytes, oldest %s\n", r.Reports.Records, r.Reports.Bytes, ts(r.Reports.Oldest))
	if len(r.Logs) == 0 {
		fmt.Fprintln(w, "log spools       none")
	}
	for _, l := range r.Logs {
		fmt.Fprintf(w, "log spool        %s: %d chunks (%d numbered), %d bytes", l.Service, l.Chunks, l.Numbered, l.Bytes)
		if l.Chunks > 0 {
			fmt.Fprintf(w, ", oldest %s ago", time.Duration(l.OldestAgeSeconds)*time.Second)
		}
		fmt.Fprintf(w, ", dropped %d", l.Dropped)
		if l.Mismatched > 0 {
			fmt.Fprintf(w, " (%d stored as other bytes %d times)", l.Mismatched, logship.MaxUploads)
		}
		fmt.Fprintf(w, "; session %s", l.SessionState)
		if l.Session != "" {
			fmt.Fprintf(w, " (%s)", l.Session)
		}
		if l.Refusal != "" {
			fmt.Fprintf(w, "; paused: %s", l.Refusal)
		}
		if l.Finishes > 0 {
			fmt.Fprintf(w, "; %d final payloads waiting", l.Finishes)
		}
		if l.Error != "" {
			fmt.Fprintf(w, "; error: %s", l.Error)
		}
		fmt.Fprintln(w)
	}
	keys := make([]string, 0, len(r.Dropped))
	for k := range r.Dropped {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	fmt.Fprint(w, "dropped         ")
	if len(keys) == 0 {
		fmt.Fprint(w, " none")
	}
	for _, k := range keys {
		fmt.Fprintf(w, " %s=%d", k, r.Dropped[agent.DropReason(k)])
	}
	fmt.Fprintln(w)
}

type agentHeartbeatCmd struct {
	URL              string        `required:"" help:"Daemon origin, e.g. https://chalupa.example.com."`
	KeyID            string        `name:"key-id" required:"" help:"Ingest key id (the key-id file written by 'admin keys issue --out')."`
	KeyFile          string        `name:"key-file" required:"" help:"File holding the key material (ingest.key)."`
	Env              string        `required:"" help:"Environment slug the key is bound to."`
	Deployment       string        `required:"" help:"Deployment id (one droplet's life)."`
	DropletID        int64         `name:"droplet-id" help:"DigitalOcean droplet id."`
	Region           string        `help:"Droplet region slug."`
	Size             string        `help:"Droplet size slug."`
	LimitMinutes     int64         `name:"limit-minutes" default:"30" help:"Idle limit in minutes."`
	ActivityFile     string        `name:"activity-file" help:"Existing file whose modification time is the last user activity (default: agent start time)."`
	CIActive         bool          `name:"ci-active" help:"Report a live CI suite (defers idle shutdown)."`
	SessionExpiresAt time.Time     `name:"session-expires-at" help:"Absolute session expiry (RFC 3339)." format:"2006-01-02T15:04:05Z07:00"`
	Every            time.Duration `help:"Send every interval until interrupted (0: send once)." default:"0s"`
	Count            int           `help:"Stop after this many heartbeats (0: no limit)."`
	Retries          int           `default:"3" help:"Retries of a 5xx answer, each with a fresh nonce."`

	// lastActivity is the activity time last read from --activity-file;
	// activityGone is set once its disappearance has been reported.
	lastActivity time.Time
	activityGone bool
	// stdout and stderr are the injected standard streams (kong's
	// writers), set by Run.
	stdout, stderr io.Writer
}

// Run sends heartbeats and prints each answer's status. It exits non-zero
// when the last answer was not 2xx.
func (c *agentHeartbeatCmd) Run(k *kong.Context) error {
	c.stdout, c.stderr = k.Stdout, k.Stderr
	// The URL's rule is checked on the value alone: breaking it is a usage
	// mistake (2). The files are checked against the disk: a missing,
	// unreadable or exposed file is a refusal (1), the same for --key-file
	// and --activity-file (docs/operations.md, "Exit codes").
	if err := origin.CheckDaemonURL("--url", "fleet heartbeats", c.URL); err != nil {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	if fi, err := os.Stat(c.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("--key-file is readable by group or others (chmod 600 %s)", c.KeyFile)}
	}
	b, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("read --key-file: %w", err)}
	}
	key, err := protocol.DecodeKeyMaterial(string(b))
	if err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("--key-file: %w", err)}
	}
	started := time.Now().UTC()
	c.lastActivity = started
	if c.ActivityFile != "" {
		// Named explicitly, so a typo must not quietly turn into "active
		// since the agent started" (which defers the reaper).
		fi, err := os.Stat(c.ActivityFile)
		if err != nil {
			return &ExitError{Code: 1, Err: fmt.Errorf("--activity-file: %w (it must exist: its modification time is the last user activity)", err)}
		}
		c.lastActivity = fi.ModTime().UTC()
	}
	cl := &protocol.Client{BaseURL: c.URL, KeyID: strings.TrimSpace(c.KeyID), Key: key, Retries: c.Retries}
	// A signal ends the finite command with 128 + its number (Ctrl-C:
	// 130), not 0: a script must not read an interrupted run as done
	// (docs/operations.md, "Exit codes").
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var interrupted atomic.Int32
	go func() {
		select {
		case sig := <-sigs:
			interrupted.Store(int32(128 + sig.(syscall.Signal)))
			cancel()
		case <-ctx.Done():
		}
	}()
	sent, ok := 0, false
	for {
		ok, err = c.send(ctx, cl)
		if code := interrupted.Load(); code != 0 {
			return &ExitError{Code: int(code)}
		}
		if err != nil {
			fmt.Fprintln(c.stderr, "heartbeat:", err)
		}
		sent++
		if c.Every <= 0 || (c.Count > 0 && sent >= c.Count) {
			break
		}
		select {
		case <-ctx.Done():
			return &ExitError{Code: int(interrupted.Load())}
		case <-time.After(c.Every):
		}
	}
	if !ok {
		return &ExitError{Code: 1}
	}
	return nil
}

// activity returns the last user activity: --activity-file's mtime, else
// (no file given) the agent's start. A file that disappears after start is
// reported once on stderr and the last mtime read stays the answer: the
// start time could be later than it and defer the reaper.
func (c *agentHeartbeatCmd) activity() time.Time {
	if c.ActivityFile == "" {
		return c.lastActivity
	}
	fi, err := os.Stat(c.ActivityFile)
	if err != nil {
		if !c.activityGone {
			c.activityGone = true
			fmt.Fprintf(c.stderr, "heartbeat: --activity-file: %v; reporting the last activity seen (%s) until it is back\n", err, c.lastActivity.Format(time.RFC3339))
		}
		return c.lastActivity
	}
	c.activityGone = false
	c.lastActivity = fi.ModTime().UTC()
	return c.lastActivity
}

func (c *agentHeartbeatCmd) send(ctx context.Context, cl *protocol.Client) (bool, error) {
	last := c.activity()
	// An mtime ahead of this clock is no activity later than now (and
	// would make idleChecks negative, which the daemon refuses).
	if now := time.Now().UTC(); last.After(now) {
		last = now
	}
	hb := protocol.HeartbeatV1{
		EnvironmentSlug: c.Env,
		Deployment:      protocol.HeartbeatDeploy{ID: c.Deployment, DropletID: c.DropletID, Region: c.Region, Size: c.Size},
		AgentVersion:    "chalupa-agent/" + buildinfo.Version,
		SentAt:          time.Now().UTC(),
		Reaper: protocol.ReaperObservation{
			IdleChecks:     int64(time.Since(last) / time.Minute),
			LimitMinutes:   c.LimitMinutes,
			LastActivityAt: last,
			CIActive:       c.CIActive,
		},
	}
	if !c.SessionExpiresAt.IsZero() {
		t := c.SessionExpiresAt.UTC()
		hb.SessionExpiresAt = &t
	}
	body, err := json.Marshal(hb)
	if err != nil {
		return false, err
	}
	resp, err := cl.Post(ctx, "/api/ingest/heartbeat", body)
	if resp != nil {
		fmt.Fprintf(c.stdout, "%s %d %s\n", time.Now().UTC().Format(time.RFC3339), resp.Status, strings.TrimSpace(string(resp.Body)))
	}
	if err != nil {
		return false, err
	}
	if resp.Status/100 != 2 {
		return false, errors.New("refused")
	}
	return true, nil
}
