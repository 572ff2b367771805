package agentcli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/internal/strictjson"
	"github.com/chalupa-run/chalupa/protocol"
)

// agentReportRunCmd is `chalupa agent report-run`: a CI job's report of one
// finished suite run (docs/operations.md, "Lifecycle events and runs").
type agentReportRunCmd struct {
	URL        string    `env:"CHALUPA_AGENT_URL" required:"" help:"Control plane origin, https unless loopback."`
	KeyID      string    `name:"key-id" env:"CHALUPA_AGENT_KEY_ID" help:"Ingest key id (default: read from --key-id-file)."`
	KeyIDFile  string    `name:"key-id-file" env:"CHALUPA_AGENT_KEY_ID_FILE" help:"File holding the key id (default: key-id beside --key-file)."`
	KeyFile    string    `name:"key-file" env:"CHALUPA_AGENT_KEY_FILE" default:"/etc/chalupa-agent/ingest.key" help:"Key material, mode 0600."`
	Env        string    `env:"CHALUPA_AGENT_ENV" required:"" help:"Environment slug the key is bound to."`
	Deployment string    `env:"CHALUPA_AGENT_DEPLOYMENT" help:"Deployment id (default: the running agent's, from its state file)."`
	StateDir   string    `name:"state-dir" env:"CHALUPA_AGENT_STATE_DIR" default:"/var/lib/chalupa-agent" help:"State dir holding the report spool."`
	File       string    `name:"file" help:"A RunReportV1 JSON file (environmentSlug and deploymentId may be left out); replaces the run flags."`
	Suite      string    `help:"Suite name."`
	RunID      string    `name:"run-id" help:"Run id, stable across retries (e.g. the CI system's job id)."`
	Status     string    `help:"passed, failed, cancelled or errored."`
	StartedAt  time.Time `name:"started-at" help:"When the run started (RFC 3339)." format:"2006-01-02T15:04:05Z07:00"`
	FinishedAt time.Time `name:"finished-at" help:"When it finished (RFC 3339; default now)." format:"2006-01-02T15:04:05Z07:00"`
	Commit     string    `help:"Commit the run tested (40 or 64 hex digits)."`
	Artifact   []string  `name:"artifact" sep:"none" help:"One ArtifactRefV1 as JSON, e.g. '{\"v\":1,\"name\":\"report.xml\",\"mediaType\":\"application/xml\",\"sizeBytes\":1,\"sha256\":\"…\",\"locator\":{\"kind\":\"local\",\"id\":\"report-1\"}}'; repeatable."`
}

// Run spools the report and delivers the report spool (agent.ReportRun).
// Exit 0 when it was delivered or spooled for later (the message says
// which); 1 when it was refused or could not be spooled; 2 for flags
// breaking their rule on their face.
func (c *agentReportRunCmd) Run(k *kong.Context) error {
	var rep protocol.RunReportV1
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err != nil {
			return &ExitError{Code: 1, Err: fmt.Errorf("--file: %w", err)}
		}
		if err := strictjson.Decode(b, &rep); err != nil {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--file: %w", err)}
		}
	} else {
		if c.Suite == "" || c.RunID == "" || c.Status == "" || c.StartedAt.IsZero() {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--suite, --run-id, --status and --started-at are required without --file")}
		}
		rep = protocol.RunReportV1{Suite: c.Suite, RunID: c.RunID, Status: c.Status, StartedAt: c.StartedAt.UTC(),
			FinishedAt: c.FinishedAt.UTC(), Commit: c.Commit, Artifacts: []protocol.ArtifactRefV1{}}
		if c.FinishedAt.IsZero() {
			rep.FinishedAt = time.Now().UTC()
		}
		for i, raw := range c.Artifact {
			var a protocol.ArtifactRefV1
			if err := strictjson.Decode([]byte(raw), &a); err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--artifact %d: %w", i+1, err)}
			}
			rep.Artifacts = append(rep.Artifacts, a)
		}
	}
	cfg := agent.Config{URL: c.URL, KeyID: c.KeyID, KeyIDFile: c.KeyIDFile, KeyFile: c.KeyFile, Environment: c.Env,
		DeploymentID: c.Deployment, StateDir: c.StateDir, Log: zerolog.New(k.Stderr).With().Timestamp().Logger()}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	res, err := agent.ReportRun(context.Background(), cfg, creds, rep)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	switch {
	case res.Dropped > 0:
		return &ExitError{Code: 1, Err: fmt.Errorf("%d report(s) refused by the control plane (see the log); %d delivered", res.Dropped, res.Delivered)}
	case res.Refused != "":
		return &ExitError{Code: 1, Err: fmt.Errorf("the control plane refused a report (%s); %d report(s) stay in %s and are retried for at most %s; %d delivered",
			res.Refused, res.Spooled, cfg.StateDir, agent.MaxReportAge, res.Delivered)}
	case res.Spooled > 0:
		fmt.Fprintf(k.Stdout, "spooled: %d report(s) wait in %s for the control plane; %d delivered\n", res.Spooled, cfg.StateDir, res.Delivered)
	default:
		fmt.Fprintf(k.Stdout, "delivered: %d report(s)\n", res.Delivered)
	}
	return nil
}
