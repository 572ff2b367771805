package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/pulumiexec/checkpoint"
	"github.com/chalupa-run/chalupa/storage"
)

// ConvergeConfig is the Pulumi engine converge drives and the agent release
// it installs (docs/operations.md, "Converge").
type ConvergeConfig struct {
	// PulumiBackendURL is PULUMI_BACKEND_URL (file://DataDir/pulumi when
	// unset).
	PulumiBackendURL string
	// PulumiCLI is the pulumi binary converge drives (CHALUPA_PULUMI_CLI,
	// else pulumi on PATH; "" when converge is off and none is found).
	PulumiCLI string
	// PulumiHome is PULUMI_HOME for Pulumi's child processes, where the
	// DigitalOcean provider plugin is installed (default $HOME/.pulumi).
	PulumiHome string
	// SSHPort is the TCP port converge's key delivery dials on a droplet's
	// public IPv4 (CHALUPA_SSH_PORT, default DefaultSSHPort:
	// docs/operations.md, "SSH key delivery").
	SSHPort int
	// AgentUpgradeReport bounds how long an upgraded agent, and after a
	// restore the previous one, has to heartbeat
	// (CHALUPA_AGENT_UPGRADE_REPORT_SECONDS, default
	// agentrollout.DefaultReport; docs/operations.md, "Agent install",
	// under Upgrade).
	AgentUpgradeReport time.Duration
	// AgentRelease is the agent release converge installs on a box's
	// droplet and the agent upgrade installs on running ones
	// (CHALUPA_AGENT_*; docs/operations.md, "Agent install"). Read as
	// given; AgentRelease.Check says what is missing or unsafe.
	AgentRelease agentrelease.Release `json:"-"`
	// provisionToken is DIGITALOCEAN_PROVISION_TOKEN, Pulumi's
	// write-capable token: unexported like the reaper's write token, handed
	// by the wiring to the converge executor alone, which gives it only to
	// Pulumi's child processes.
	provisionToken *Secret
}

// token is DIGITALOCEAN_PROVISION_TOKEN ("" when unset), for the wiring
// that hands it to the converge executor.
func (v *ConvergeConfig) token() Secret { return deref(v.provisionToken) }

// loadPulumiBackend reads PULUMI_BACKEND_URL, defaulting under the data dir.
func (c *Config) loadPulumiBackend(_ *loader, v string) {
	c.Converge.PulumiBackendURL = v
	if v == "" {
		c.Converge.PulumiBackendURL = fileURL(c.DataDir, "pulumi")
	}
}

// loadPulumiCLI reads CHALUPA_PULUMI_CLI, else finds pulumi on PATH.
func (v *ConvergeConfig) loadPulumiCLI(_ *loader, s string) {
	v.PulumiCLI = s
	if s == "" {
		v.PulumiCLI, _ = exec.LookPath("pulumi")
	}
}

// loadPulumiHome reads PULUMI_HOME, else $HOME/.pulumi.
func (v *ConvergeConfig) loadPulumiHome(_ *loader, s string) {
	v.PulumiHome = s
	if s == "" {
		if home, err := os.UserHomeDir(); err == nil {
			v.PulumiHome = filepath.Join(home, ".pulumi")
		}
	}
}

// agentReleaseVariables are the four CHALUPA_AGENT_* rows.
func (v *ConvergeConfig) agentReleaseVariables() []variable {
	r := &v.AgentRelease
	group := "`CHALUPA_AGENT_VERSION`, `CHALUPA_AGENT_RELEASE_URL`, `CHALUPA_AGENT_SHA256_AMD64`, `CHALUPA_AGENT_SHA256_ARM64`"
	sha := func(name, arch, help string) variable {
		return variable{name: name, ptr: r, help: help, doc: docRow{group: group},
			load: func(_ *loader, s string) { r.SHA256[arch] = s },
			show: func() string { return orUnset(r.SHA256[arch]) }}
	}
	return []variable{
		{name: agentrelease.EnvVersion, ptr: &r.Version, load: func(_ *loader, s string) { r.Version = s }, show: func() string { return orUnset(r.Version) },
			help: "agent release converge installs (v1.2.3)",
			doc: docRow{group: group, def: "unset: converge answers 422 `agent_release_invalid` for `up` and `preview` of a box that carries the agent",
				refusedWhen: "never refused (serve starts); `config check` and serve warn, naming the variables (never values), when converge is on and the release is missing or unsafe — a version that is not `v1.2.3`/`v1.2.3-rc.1` (`latest`, a branch), a URL that is not `https` or carries a query, fragment, credentials, spaces or quotes, a digest that is not 64 lowercase hex digits — or when it is set but unsafe with converge off; also when both digests are the same (one archive cannot match both architectures) and, with converge on, when `CHALUPA_ORIGIN` is loopback (converge writes it into every box's `agent.env`: an agent on a real droplet would report to itself, and the reaper would end its box at the idle deadline)",
				why:         "the agent release every converged droplet installs (see \"Agent install\"); an immutable version and both archives' digests from the release's `checksums.txt`, so a droplet runs exactly what the operator checked"}},
		{name: agentrelease.EnvReleaseURL, ptr: &r.URL, load: func(_ *loader, s string) { r.URL = strings.TrimRight(s, "/") }, show: func() string { return orUnset(redactURL(r.URL)) },
			help: "https URL of the agent release's directory", doc: docRow{group: group}},
		sha(agentrelease.EnvSHA256AMD64, "amd64", "sha256 of the release's linux/amd64 archive"),
		sha(agentrelease.EnvSHA256ARM64, "arm64", "sha256 of the release's linux/arm64 archive"),
	}
}

// validateConverge keeps the provision token apart from the others, checks
// the backend and the CLI converge needs, and warns about an agent release
// converge cannot install (a warning, not a refusal: serve starts, boxes
// that carry the agent answer 422; docs/operations.md, "Converge").
func (c *Config) validateConverge(l *loader) {
	v := &c.Converge
	provision := v.token()
	if provision != "" && (provision == c.Costs.ReadToken || provision == c.Reaper.token()) {
		// Pulumi's token is its own: neither inventory's read token nor
		// the reaper's write token (docs/operations.md, "Converge").
		l.bad("DIGITALOCEAN_PROVISION_TOKEN must differ from DIGITALOCEAN_READ_TOKEN and DIGITALOCEAN_WRITE_TOKEN")
	}
	if u, err := url.Parse(v.PulumiBackendURL); err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
		l.bad("PULUMI_BACKEND_URL must be a file:// or s3:// URL")
	} else if u.Scheme == "s3" && provision != "" && (c.Replica.SpacesKey == "" || c.Replica.SpacesSecret == "") {
		l.bad("CHALUPA_SPACES_KEY and CHALUPA_SPACES_SECRET are required for an s3:// PULUMI_BACKEND_URL")
	}
	if w := agentReleaseWarning(v.AgentRelease, provision != ""); w != "" {
		c.Warnings = append(c.Warnings, w)
	}
	c.Warnings = append(c.Warnings, agentReachWarnings(v.AgentRelease, c.HTTP.Origin, provision != "")...)
	if provision != "" {
		if v.PulumiCLI == "" {
			l.bad("DIGITALOCEAN_PROVISION_TOKEN is set but no pulumi CLI was found: put pulumi on PATH or set CHALUPA_PULUMI_CLI")
		} else if fi, err := os.Stat(v.PulumiCLI); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			l.bad("CHALUPA_PULUMI_CLI is not an executable file")
		}
	}
}

// newConvergeExecutor builds the converge executor from the configuration
// (docs/operations.md, "Converge"): the engine under CHALUPA_DATA_DIR with
// PULUMI_BACKEND_URL (an s3:// backend gets CHALUPA_SPACES_KEY/SECRET as
// the AWS variables of Pulumi's child processes only), a digitalocean
// client for the provision token, checkpoints in db, and key delivery with
// keys and sealer (chalupa's SSH identity) to CHALUPA_SSH_PORT.
func newConvergeExecutor(cfg *Config, db *storage.DB, keys *ingest.Keyring, sealer *envelope.Sealer, clock clockwork.Clock, log zerolog.Logger) (*pulumiexec.Executor, error) {
	token := cfg.Converge.token().Reveal()
	eng := &pulumiexec.Engine{
		WorkDir: filepath.Join(cfg.DataDir, pulumiexec.WorkDirName), BackendURL: cfg.Converge.PulumiBackendURL,
		PulumiHome: cfg.Converge.PulumiHome, CLIPath: cfg.Converge.PulumiCLI, ProvisionToken: token, APIURL: cfg.DigitalOcean.APIURL,
	}
	if u, err := url.Parse(cfg.Converge.PulumiBackendURL); err == nil && u.Scheme == "s3" {
		eng.ExtraEnv = map[string]string{
			"AWS_ACCESS_KEY_ID":     cfg.Replica.SpacesKey.Reveal(),
			"AWS_SECRET_ACCESS_KEY": cfg.Replica.SpacesSecret.Reveal(),
		}
	}
	api, err := digitalocean.New(digitalocean.Config{BaseURL: cfg.DigitalOcean.APIURL, Token: digitalocean.Token(token), Label: pulumiexec.ProvisionLabel,
		Version: buildinfo.Version, Clock: clock, Logger: log})
	if err != nil {
		return nil, err
	}
	log = log.With().Str("component", "converge").Logger()
	kd := &pulumiexec.KeyDelivery{DB: db, Keys: keys, Sealer: sealer, Clock: clock, Port: cfg.Converge.SSHPort, Log: log}
	return &pulumiexec.Executor{Engine: eng, API: api, Log: log, DeliverKey: kd.Deliver,
		Checkpoints: checkpoint.New(db, clock), AgentRelease: cfg.Converge.AgentRelease, ControlPlaneURL: cfg.HTTP.Origin, DB: db}, nil
}

// agentAdmission is the job service's admission check while converge is
// configured: up and preview of a box that carries the agent are refused
// 422 agent_release_invalid, nothing enqueued, while release fails its
// checks (docs/operations.md, "Converge"). serve still starts; config
// check warns (agentReleaseWarning).
func agentAdmission(release agentrelease.Release) func(storage.Box, string) error {
	problems := release.Check()
	return func(box storage.Box, action string) error {
		if len(problems) == 0 || !box.Config.Agent || !pulumiexec.RendersUserData(action) {
			return nil
		}
		return &jobs.AdmitError{Code: codeAgentReleaseInvalid, Message: fmt.Sprintf(
			"box %s carries the agent, but the agent release cannot be installed: %s (chalupa config check says the same); or opt the box out with chalupa admin box update %s --agent=false. Nothing was enqueued",
			box.Name, agentReleaseText(problems), box.Name)}
	}
}

// newJobLane is the converge job lane over d.Executor (no runner without
// one: converge answers 503 converge_not_configured), the offline watch,
// and the service the admin API calls, admitting up and preview only with
// an installable agent release (agentAdmission). The runner reports
// job-failed and the watch worker-offline to al (nil: none), and the
// runner calls afterJob with a box after each of its jobs ends
// (docs/operations.md, "Alerts").
func newJobLane(d serverDeps, al *alerter.Alerter, afterJob func(context.Context, storage.Box)) (*jobs.Runner, *jobs.Watch, *jobs.Service) {
	watch := jobs.NewWatch(d.DB, d.Clock, d.Log)
	var set alerts.Setter
	if al != nil {
		set = al
		watch.SetAlerts(al)
	}
	var runner *jobs.Runner
	if d.Executor != nil {
		// The instance id locks this process's jobs: serve holds the data
		// dir lock, so a job locked by another id is provably dead
		// (docs/operations.md, "Jobs").
		runner = jobs.NewRunner(jobs.RunnerConfig{DB: d.DB, Clock: d.Clock, Log: d.Log, Executor: d.Executor,
			InstanceID: ulid.Make().String(), Version: buildinfo.Version, Alerts: set, AfterJob: afterJob})
	} else {
		d.Log.Warn().Msg(convergeOffMessage)
	}
	svc := jobs.NewService(d.DB, d.Clock, runner, watch)
	if runner != nil {
		svc.SetAdmit(agentAdmission(d.Config.Converge.AgentRelease))
	}
	return runner, watch, svc
}

// newRolloutManager builds the agent rollout manager over remote (the
// deliverer) and settles what a stopped process left (docs/operations.md,
// "Agent install", under Upgrade); its upgrades report
// agent-upgrade-failed to al (nil: none; "Alerts"). Errors: database
// faults.
func newRolloutManager(ctx context.Context, d serverDeps, remote agentrollout.Remote, instance string, al *alerter.Alerter) (*agentrollout.Manager, error) {
	cfg := d.Config.Converge
	m := &agentrollout.Manager{Instance: instance, Upgrader: &agentrollout.Upgrader{DB: d.DB, Clock: d.Clock, Remote: remote,
		Release: cfg.AgentRelease, Port: cmp.Or(cfg.SSHPort, DefaultSSHPort), Report: cfg.AgentUpgradeReport, Log: d.Log}}
	if al != nil {
		m.Upgrader.Alerts = al
	}
	return m, m.Recover(ctx)
}
