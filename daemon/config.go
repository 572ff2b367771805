package daemon

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/console"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/internal/datadir"
	"github.com/chalupa-run/chalupa/internal/origin"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// Configuration defaults (docs/operations.md, "Configuration").
const (
	// DefaultDataDir holds the SQLite file, restore points and, on the
	// embedded default, the generated secrets and the file replica.
	DefaultDataDir = datadir.DefaultDir
	// DefaultListen is loopback so that nothing is exposed before the
	// operator has set real secrets.
	DefaultListen = datadir.DefaultListen
	// DefaultSSHPort is the droplets' SSH port: DigitalOcean's images run
	// sshd on 22.
	DefaultSSHPort = 22
	// SecretsFileName is the generated-secrets file in the data dir (0600).
	SecretsFileName = datadir.SecretsFileName
	// DatabaseFileName is the SQLite file in the data dir.
	DatabaseFileName = datadir.DatabaseFileName
	// minTokenLen is the shortest bearer token accepted: 32 characters of a
	// generated token carry well over 128 bits.
	minTokenLen = 32
)

// Secret is a configuration value that must never be printed, logged or
// returned. Its String and MarshalText forms are redacted; Reveal returns it.
type Secret string

// String returns "[redacted]" (or "" when unset) so fmt and loggers never
// print the value.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalText redacts the value in JSON and text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret value for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

// Config is the validated configuration of a chalupa daemon.
type Config struct {
	DataDir         string `json:"CHALUPA_DATA_DIR"`
	Listen          string `json:"CHALUPA_LISTEN"`
	Origin          string `json:"CHALUPA_ORIGIN"`
	AdminToken      Secret `json:"CHALUPA_ADMIN_TOKEN"`
	ReadyToken      Secret `json:"CHALUPA_READY_TOKEN"`
	IngestMasterKey Secret `json:"CHALUPA_INGEST_MASTER_KEY"`
	IngestKey       Secret `json:"CHALUPA_INGEST_KEY"`
	ReplicaURL      string `json:"CHALUPA_REPLICA_URL"`
	SpacesKey       Secret `json:"CHALUPA_SPACES_KEY"`
	SpacesSecret    Secret `json:"CHALUPA_SPACES_SECRET"`
	DOReadToken     Secret `json:"DIGITALOCEAN_READ_TOKEN"`
	// LogsURL is the log broker's bucket and prefix (CHALUPA_LOGS_URL;
	// "" leaves the log routes off: docs/operations.md, "Logs"), with
	// its own credentials LogsKey and LogsSecret.
	LogsURL    string `json:"CHALUPA_LOGS_URL"`
	LogsKey    Secret `json:"CHALUPA_LOGS_KEY"`
	LogsSecret Secret `json:"CHALUPA_LOGS_SECRET"`
	// LogsLocation is LogsURL parsed (zero when unset).
	LogsLocation logs.Location `json:"-"`
	// LogsRetention is the age past which retention removes log chunks
	// (CHALUPA_LOGS_RETENTION; logs.DefaultRetention).
	LogsRetention time.Duration `json:"CHALUPA_LOGS_RETENTION"`
	// DOAPIURL is the DigitalOcean API base URL, normalised to
	// scheme://host/ (digitalocean.CheckBaseURL; docs/operations.md,
	// "DigitalOcean API").
	DOAPIURL        string  `json:"CHALUPA_DO_API_URL"`
	VolumeUSDPerGiB float64 `json:"DO_VOLUME_USD_PER_GIB_MONTH"`
	// BillingRule is the droplet billing rule cost estimates apply
	// (cost.DefaultRule unless DO_BILLING_* override a part of it:
	// docs/operations.md, "Cost reconciliation").
	BillingRule      cost.Rule `json:"-" env:"DO_BILLING_GRANULARITY_SECONDS DO_BILLING_MINIMUM_SECONDS DO_BILLING_MINIMUM_CHARGE_USD DO_BILLING_MONTHLY_CAP_HOURS"`
	PulumiBackendURL string    `json:"PULUMI_BACKEND_URL"`
	// PulumiCLI is the pulumi binary converge drives (CHALUPA_PULUMI_CLI,
	// else pulumi on PATH; "" when converge is off and none is found).
	PulumiCLI string `json:"CHALUPA_PULUMI_CLI"`
	// AgentRelease is the agent release converge installs on a box's
	// droplet and the agent upgrade installs on running ones
	// (CHALUPA_AGENT_VERSION, CHALUPA_AGENT_RELEASE_URL,
	// CHALUPA_AGENT_SHA256_AMD64/ARM64; docs/operations.md, "Agent install").
	// Read as given; AgentRelease.Check says what is missing or unsafe.
	AgentRelease agentrelease.Release `json:"-" env:"CHALUPA_AGENT_VERSION CHALUPA_AGENT_RELEASE_URL CHALUPA_AGENT_SHA256_AMD64 CHALUPA_AGENT_SHA256_ARM64"`
	// PulumiHome is PULUMI_HOME for Pulumi's child processes, where the
	// DigitalOcean provider plugin is installed (default $HOME/.pulumi).
	PulumiHome string `json:"PULUMI_HOME"`
	// SSHPort is the TCP port converge's key delivery dials on a droplet's
	// public IPv4 (CHALUPA_SSH_PORT, default DefaultSSHPort:
	// docs/operations.md, "SSH key delivery").
	SSHPort int `json:"CHALUPA_SSH_PORT"`

	// TrustedProxies are the proxies whose X-Forwarded-For the console's
	// login rate limit believes (CHALUPA_TRUSTED_PROXIES, comma-separated
	// addresses or CIDR prefixes; none by default: docs/operations.md,
	// "Console").
	TrustedProxies []netip.Prefix `json:"CHALUPA_TRUSTED_PROXIES"`

	// ReaperMode is the effective reaper mode, ReaperModeLive, ReaperModeDryRun or
	// ReaperModeOff (CHALUPA_REAPER; unset on a loopback listener it is live
	// with DIGITALOCEAN_WRITE_TOKEN and off without: docs/operations.md,
	// "Configuration").
	ReaperMode string `json:"CHALUPA_REAPER"`
	// ReaperDryRun is ReaperMode == ReaperModeDryRun: the reaper records
	// reaper-would-destroy events and destroys nothing (docs/operations.md,
	// "Reaper").
	ReaperDryRun bool `json:"-"`
	// Costs is whether cost reconciliation runs (CHALUPA_COSTS; unset on a
	// loopback listener it is on with DIGITALOCEAN_READ_TOKEN and off
	// without: docs/operations.md, "Configuration").
	Costs bool `json:"CHALUPA_COSTS"`
	// Warnings are what config check and serve say about a configuration
	// they accept: a deprecated variable and its replacement; an agent
	// release converge cannot install.
	Warnings []string `json:"-"`
	// ReaperCIFreshness is how long a heartbeat's CI report counts as live
	// (reaper.DefaultCIFreshness unless set).
	ReaperCIFreshness time.Duration `json:"CHALUPA_REAPER_CI_FRESHNESS"`
	// ReaperMaxDestroy is the destroy pace: at most this many DELETEs a
	// minute, so per tick (reaper.DefaultMaxDestroy unless set;
	// docs/operations.md, "Reaper").
	ReaperMaxDestroy int `json:"CHALUPA_REAPER_MAX_DESTROY"`

	// Ingest quotas (docs/operations.md, "Quotas"); 0 is unlimited.
	QuotaHeartbeatsPerMinute            int `json:"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE"`
	QuotaHeartbeatBurst                 int `json:"CHALUPA_QUOTA_HEARTBEAT_BURST"`
	QuotaOpenSessions                   int `json:"CHALUPA_QUOTA_OPEN_SESSIONS"`
	QuotaActiveDeployments              int `json:"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS"`
	QuotaEnvironmentHeartbeatsPerMinute int `json:"CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE"`
	// QuotaEnvironmentStorageBytes is an environment's storage budget
	// (bytes; 0 is unlimited, benchmarks only).
	QuotaEnvironmentStorageBytes int64 `json:"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES"`

	// MinFreeBytes is CHALUPA_MIN_FREE_BYTES: the free space in bytes the
	// data directory's filesystem keeps before signed ingest other than
	// heartbeats is refused 503 disk_low; storage.MinFreeAuto (unset) is
	// the larger of 1 GiB and 5 % of the filesystem, 0 turns the guard off
	// (docs/operations.md, "Quotas").
	MinFreeBytes int64 `json:"CHALUPA_MIN_FREE_BYTES"`
	// Rate quotas of the other signed write routes (docs/operations.md,
	// "Quotas"); 0 is unlimited.
	QuotaTelemetryPerMinute              int `json:"CHALUPA_QUOTA_TELEMETRY_PER_MINUTE"`
	QuotaTelemetryBurst                  int `json:"CHALUPA_QUOTA_TELEMETRY_BURST"`
	QuotaEnvironmentTelemetryPerMinute   int `json:"CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE"`
	QuotaLifecyclePerMinute              int `json:"CHALUPA_QUOTA_LIFECYCLE_PER_MINUTE"`
	QuotaLifecycleBurst                  int `json:"CHALUPA_QUOTA_LIFECYCLE_BURST"`
	QuotaEnvironmentLifecyclePerMinute   int `json:"CHALUPA_QUOTA_ENVIRONMENT_LIFECYCLE_PER_MINUTE"`
	QuotaRunsPerMinute                   int `json:"CHALUPA_QUOTA_RUNS_PER_MINUTE"`
	QuotaRunBurst                        int `json:"CHALUPA_QUOTA_RUN_BURST"`
	QuotaEnvironmentRunsPerMinute        int `json:"CHALUPA_QUOTA_ENVIRONMENT_RUNS_PER_MINUTE"`
	QuotaArtifactKiBPerMinute            int `json:"CHALUPA_QUOTA_ARTIFACT_KIB_PER_MINUTE"`
	QuotaArtifactKiBBurst                int `json:"CHALUPA_QUOTA_ARTIFACT_KIB_BURST"`
	QuotaEnvironmentArtifactKiBPerMinute int `json:"CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE"`
	QuotaLogRequestsPerMinute            int `json:"CHALUPA_QUOTA_LOG_REQUESTS_PER_MINUTE"`
	QuotaLogBurst                        int `json:"CHALUPA_QUOTA_LOG_BURST"`
	QuotaEnvironmentLogRequestsPerMinute int `json:"CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE"`

	// Generated lists the secrets taken from the generated-secrets file (the
	// embedded default) rather than the environment.
	Generated []string `json:"generated,omitempty"`
	// SecretsFile is the path of that file when it is (or will be) used.
	SecretsFile string `json:"secretsFile,omitempty"`
	// replicaKind is "s3" or "file".
	replicaKind string
	// doWriteToken is DIGITALOCEAN_WRITE_TOKEN, the only platform write
	// credential. It is unexported so that only this package, where the
	// daemon is wired together, can read it; the wiring hands it to the
	// reaper alone (docs/operations.md, "Configuration"). Nothing else, not
	// even the HTTP handlers, holds it. A pointer, because fmt prints an
	// unexported field's value without calling Secret.String, but prints a
	// nested pointer as its address: %+v of a Config shows no token.
	doWriteToken *Secret `env:"DIGITALOCEAN_WRITE_TOKEN"`
	// doProvisionToken is DIGITALOCEAN_PROVISION_TOKEN, Pulumi's
	// write-capable token: unexported like the write token, handed by the
	// wiring to the converge executor alone, which gives it only to
	// Pulumi's child processes (docs/operations.md, "Converge").
	doProvisionToken *Secret `env:"DIGITALOCEAN_PROVISION_TOKEN"`
}

// provisionToken is DIGITALOCEAN_PROVISION_TOKEN ("" when unset), for the
// wiring that hands it to the converge executor.
func (c *Config) provisionToken() Secret {
	if c.doProvisionToken == nil {
		return ""
	}
	return *c.doProvisionToken
}

// reaperOffMessage is what the log and a refused reaper tick say when
// CHALUPA_REAPER is off or, on loopback, DIGITALOCEAN_WRITE_TOKEN is not set
// (docs/operations.md, "Reaper"); the variables are named only here.
const reaperOffMessage = "the reaper is off (CHALUPA_REAPER=off, or DIGITALOCEAN_WRITE_TOKEN is not set): the reaper does not run"

// writeToken is DIGITALOCEAN_WRITE_TOKEN ("" when unset), for the wiring
// that hands it to the reaper.
func (c *Config) writeToken() Secret {
	if c.doWriteToken == nil {
		return ""
	}
	return *c.doWriteToken
}

// DatabasePath is the SQLite file's path.
func (c *Config) DatabasePath() string { return filepath.Join(c.DataDir, DatabaseFileName) }

// MasterKey returns the decoded 32-byte ingest master key.
func (c *Config) MasterKey() []byte {
	b, _ := decodeKey(c.IngestMasterKey.Reveal())
	return b
}

// ReplicaKind is "s3" or "file".
func (c *Config) ReplicaKind() string { return c.replicaKind }

// ConfigError lists every problem found; each names its variable, never its value.
type ConfigError struct {
	Problems []string
}

// Error lists every problem, one per line.
func (e *ConfigError) Error() string {
	return "invalid configuration:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// Getenv looks up one variable, like os.LookupEnv.
type Getenv func(string) (string, bool)

// generatedSecrets are the variables the embedded default may generate.
var generatedSecrets = []string{"CHALUPA_ADMIN_TOKEN", "CHALUPA_READY_TOKEN", "CHALUPA_INGEST_MASTER_KEY"}

// LoadConfig reads and validates the configuration from env. It does not
// touch the filesystem except to read an existing generated-secrets file; it
// never creates one (see EnsureSecrets). On a loopback listener, secrets
// missing from env are taken from that file, or marked to be generated.
//
// Errors: *ConfigError naming each offending variable.
func LoadConfig(env Getenv) (*Config, error) {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	get := func(k string) string {
		v, _ := env(k)
		return strings.TrimSpace(v)
	}

	c := &Config{}
	c.DataDir = get("CHALUPA_DATA_DIR")
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if abs, err := filepath.Abs(c.DataDir); err != nil {
		bad("CHALUPA_DATA_DIR is not a usable path")
	} else {
		c.DataDir = abs
	}

	c.Listen = get("CHALUPA_LISTEN")
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	loopback, listenOK := false, false
	if host, port, err := net.SplitHostPort(c.Listen); err != nil {
		bad("CHALUPA_LISTEN must be host:port")
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		bad("CHALUPA_LISTEN has an invalid port")
	} else {
		loopback, listenOK = origin.IsLoopbackHost(host), true
	}

	c.Origin = get("CHALUPA_ORIGIN")
	if c.Origin == "" && !loopback && len(problems) == 0 {
		bad("CHALUPA_ORIGIN is required when CHALUPA_LISTEN is not a loopback address (the public https origin)")
	} else if c.Origin == "" {
		c.Origin = "http://" + c.Listen
	} else if u, err := url.Parse(c.Origin); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		bad("CHALUPA_ORIGIN must be an absolute http(s) URL")
	} else if u.Scheme != "https" && !origin.IsLoopbackHost(u.Hostname()) {
		bad("CHALUPA_ORIGIN must use https unless its host is loopback")
	} else if u.Scheme != "https" && listenOK && !loopback {
		// A public listener behind a plain-http loopback origin: the
		// console's cookies and origin checks would name a host nobody
		// reaches it by (docs/operations.md, "Configuration").
		bad("CHALUPA_ORIGIN must use https when CHALUPA_LISTEN is not a loopback address (the public https origin)")
	} else if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		bad("CHALUPA_ORIGIN must be an origin (scheme and host only)")
	} else {
		c.Origin = u.Scheme + "://" + u.Host
	}

	if tp, err := console.ParseTrustedProxies(get("CHALUPA_TRUSTED_PROXIES")); err != nil {
		bad("CHALUPA_TRUSTED_PROXIES must be comma-separated IP addresses or CIDR prefixes")
	} else {
		c.TrustedProxies = tp
	}

	// Secrets: from the environment, or on loopback from the generated file.
	c.SecretsFile = filepath.Join(c.DataDir, SecretsFileName)
	fileSecrets, err := ReadSecretsFile(c.SecretsFile)
	if err != nil {
		bad("%s cannot be read (%s)", SecretsFileName, errKind(err))
	} else if fi, err := os.Stat(c.SecretsFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		// Like sshd with a private key: a secrets file others can read is
		// a leak already, not something to start on.
		bad("%s is readable by group or others (chmod 600 %s)", SecretsFileName, c.SecretsFile)
	}
	secret := func(k string) Secret {
		if v := get(k); v != "" {
			return Secret(v)
		}
		for _, g := range generatedSecrets {
			if g == k && loopback {
				c.Generated = append(c.Generated, k)
				return Secret(fileSecrets[k])
			}
		}
		return ""
	}
	c.AdminToken = secret("CHALUPA_ADMIN_TOKEN")
	c.ReadyToken = secret("CHALUPA_READY_TOKEN")
	c.IngestMasterKey = secret("CHALUPA_INGEST_MASTER_KEY")
	if len(c.Generated) == 0 {
		c.SecretsFile = ""
	}
	if !loopback && listenOK {
		for _, k := range generatedSecrets {
			if get(k) == "" {
				bad("%s is required when CHALUPA_LISTEN is not a loopback address", k)
			}
		}
	}
	checkToken := func(k string, v Secret) {
		if v != "" && len(v) < minTokenLen {
			bad("%s must be at least %d characters", k, minTokenLen)
		}
	}
	checkToken("CHALUPA_ADMIN_TOKEN", c.AdminToken)
	checkToken("CHALUPA_READY_TOKEN", c.ReadyToken)
	if c.AdminToken != "" && c.AdminToken == c.ReadyToken {
		bad("CHALUPA_READY_TOKEN must differ from CHALUPA_ADMIN_TOKEN (a leaked probe token must not grant admin)")
	}
	if c.IngestMasterKey != "" {
		if b, err := decodeKey(c.IngestMasterKey.Reveal()); err != nil || len(b) != 32 {
			bad("CHALUPA_INGEST_MASTER_KEY must be base64 of exactly 32 bytes")
		}
	}

	c.IngestKey = Secret(get("CHALUPA_INGEST_KEY"))
	checkToken("CHALUPA_INGEST_KEY", c.IngestKey)

	c.ReplicaURL = get("CHALUPA_REPLICA_URL")
	if c.ReplicaURL == "" {
		c.ReplicaURL = (&url.URL{Scheme: "file", Path: filepath.Join(c.DataDir, "replica")}).String()
	}
	if kind, err := storage.ParseReplicaURL(c.ReplicaURL); err != nil {
		bad("CHALUPA_REPLICA_URL: %v", err)
	} else {
		c.replicaKind = kind
	}
	c.SpacesKey = Secret(get("CHALUPA_SPACES_KEY"))
	c.SpacesSecret = Secret(get("CHALUPA_SPACES_SECRET"))
	if c.replicaKind == "s3" {
		if c.SpacesKey == "" {
			bad("CHALUPA_SPACES_KEY is required for an s3:// CHALUPA_REPLICA_URL")
		}
		if c.SpacesSecret == "" {
			bad("CHALUPA_SPACES_SECRET is required for an s3:// CHALUPA_REPLICA_URL")
		}
	}

	c.checkLogs(get, bad)

	c.DOReadToken = Secret(get("DIGITALOCEAN_READ_TOKEN"))
	write := Secret(get("DIGITALOCEAN_WRITE_TOKEN"))
	c.doWriteToken = &write
	if write != "" && write == c.DOReadToken {
		// The write token is dedicated to the reaper and never shared
		// with the read token (docs/operations.md, "Configuration").
		bad("DIGITALOCEAN_WRITE_TOKEN must differ from DIGITALOCEAN_READ_TOKEN")
	}
	provision := Secret(get("DIGITALOCEAN_PROVISION_TOKEN"))
	c.doProvisionToken = &provision
	if provision != "" && (provision == c.DOReadToken || provision == write) {
		// Pulumi's token is its own: neither inventory's read token nor
		// the reaper's write token (docs/operations.md, "Converge").
		bad("DIGITALOCEAN_PROVISION_TOKEN must differ from DIGITALOCEAN_READ_TOKEN and DIGITALOCEAN_WRITE_TOKEN")
	}
	if u, err := digitalocean.CheckBaseURL(get(digitalocean.EnvBaseURL)); err != nil {
		// Every DigitalOcean token travels to this URL.
		bad("%s %v", digitalocean.EnvBaseURL, err)
	} else {
		c.DOAPIURL = u
	}
	if v := get("DO_VOLUME_USD_PER_GIB_MONTH"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 100) { // also refuses NaN
			bad("DO_VOLUME_USD_PER_GIB_MONTH must be a number of USD between 0 and 100")
		} else {
			c.VolumeUSDPerGiB = f
		}
	}

	c.BillingRule = cost.DefaultRule
	for _, b := range []struct {
		name     string
		min, max float64
		set      func(float64)
	}{
		{"DO_BILLING_GRANULARITY_SECONDS", 1, 3600, func(f float64) { c.BillingRule.Granularity = time.Duration(f) * time.Second }},
		{"DO_BILLING_MINIMUM_SECONDS", 0, 86400, func(f float64) { c.BillingRule.MinimumBilled = time.Duration(f) * time.Second }},
		{"DO_BILLING_MINIMUM_CHARGE_USD", 0, 100, func(f float64) { c.BillingRule.MinimumChargeUSD = f }},
		{"DO_BILLING_MONTHLY_CAP_HOURS", 1, 744, func(f float64) { c.BillingRule.CapHours = f }},
	} {
		v := get(b.name)
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= b.min && f <= b.max) { // also refuses NaN
			bad("%s must be a number between %g and %g", b.name, b.min, b.max)
			continue
		}
		b.set(f)
	}

	c.checkModes(get, bad, loopback || !listenOK)
	c.ReaperCIFreshness = reaper.DefaultCIFreshness
	if v := get("CHALUPA_REAPER_CI_FRESHNESS"); v != "" {
		// At least a minute (two heartbeats' worth would still be too
		// tight to mean "fresh"), at most a day: beyond that a dead agent
		// with ciActive=true keeps its droplet far too long.
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > 24*time.Hour {
			bad("CHALUPA_REAPER_CI_FRESHNESS must be a duration between 1m and 24h (such as 10m)")
		} else {
			c.ReaperCIFreshness = d
		}
	}

	c.ReaperMaxDestroy = reaper.DefaultMaxDestroy
	if v := get("CHALUPA_REAPER_MAX_DESTROY"); v != "" {
		// At least one (0 would stop the reaper: pause it with `admin
		// loops` instead), at most 1000: beyond that there is no pace.
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			bad("CHALUPA_REAPER_MAX_DESTROY must be a whole number between 1 and 1000")
		} else {
			c.ReaperMaxDestroy = n
		}
	}

	c.PulumiBackendURL = get("PULUMI_BACKEND_URL")
	if c.PulumiBackendURL == "" {
		c.PulumiBackendURL = (&url.URL{Scheme: "file", Path: filepath.Join(c.DataDir, "pulumi")}).String()
	}
	if u, err := url.Parse(c.PulumiBackendURL); err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
		bad("PULUMI_BACKEND_URL must be a file:// or s3:// URL")
	} else if u.Scheme == "s3" && provision != "" && (c.SpacesKey == "" || c.SpacesSecret == "") {
		bad("CHALUPA_SPACES_KEY and CHALUPA_SPACES_SECRET are required for an s3:// PULUMI_BACKEND_URL")
	}
	c.AgentRelease = agentrelease.FromEnv(get)
	// An agent release converge cannot install is a warning, not a
	// refusal: serve starts, boxes that carry the agent answer 422
	// (docs/operations.md, "Converge").
	if w := agentReleaseWarning(c.AgentRelease, provision != ""); w != "" {
		c.Warnings = append(c.Warnings, w)
	}
	c.Warnings = append(c.Warnings, agentReachWarnings(c.AgentRelease, c.Origin, provision != "")...)
	c.PulumiCLI = get("CHALUPA_PULUMI_CLI")
	if c.PulumiCLI == "" {
		c.PulumiCLI, _ = exec.LookPath("pulumi")
	}
	if provision != "" {
		if c.PulumiCLI == "" {
			bad("DIGITALOCEAN_PROVISION_TOKEN is set but no pulumi CLI was found: put pulumi on PATH or set CHALUPA_PULUMI_CLI")
		} else if fi, err := os.Stat(c.PulumiCLI); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			bad("CHALUPA_PULUMI_CLI is not an executable file")
		}
	}
	c.SSHPort = DefaultSSHPort
	if v := get("CHALUPA_SSH_PORT"); v != "" {
		if p, err := strconv.Atoi(v); err != nil || p < 1 || p > 65535 {
			bad("CHALUPA_SSH_PORT must be a port number in 1–65535")
		} else {
			c.SSHPort = p
		}
	}
	c.PulumiHome = get("PULUMI_HOME")
	if c.PulumiHome == "" {
		if home, err := os.UserHomeDir(); err == nil {
			c.PulumiHome = filepath.Join(home, ".pulumi")
		}
	}

	// Ingest quotas: a whole number in 0–ingest.MaxQuota, default as
	// documented; 0 is unlimited (docs/operations.md, "Quotas").
	for _, q := range c.quotaFields() {
		*q.value = q.def
		v := get(q.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > ingest.MaxQuota {
			bad("%s must be a whole number between 0 (unlimited, for benchmarks only) and %d", q.name, ingest.MaxQuota)
			continue
		}
		*q.value = n
	}
	// A bucket smaller than the largest run report's artifacts would hold
	// such a report back for good.
	for _, q := range []quotaField{
		{"CHALUPA_QUOTA_ARTIFACT_KIB_BURST", &c.QuotaArtifactKiBBurst, 0},
		{"CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE", &c.QuotaEnvironmentArtifactKiBPerMinute, 0},
	} {
		if n := *q.value; n != 0 && n*1024 < ingest.MaxRunArtifactBytes {
			bad("%s must be 0 (unlimited) or at least %d: the artifacts of the largest run report (KiB)", q.name, minArtifactKiB)
		}
	}

	// The storage budget is bytes, beyond MaxQuota: its own bound.
	c.QuotaEnvironmentStorageBytes = ingest.DefaultEnvironmentStorageBytes
	if v := get("CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > ingest.MaxEnvironmentStorageBytes {
			bad("CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES must be a whole number of bytes between 0 (unlimited, for benchmarks only) and %d", ingest.MaxEnvironmentStorageBytes)
		} else {
			c.QuotaEnvironmentStorageBytes = n
		}
	}

	c.MinFreeBytes = storage.MinFreeAuto
	if v := get("CHALUPA_MIN_FREE_BYTES"); v != "" {
		// Whole bytes up to 1 PiB: a typo must not silently turn the
		// guard off or make it refuse forever.
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxMinFreeBytes {
			bad("CHALUPA_MIN_FREE_BYTES must be a whole number of bytes between 0 (guard off, for tests only) and %d", int64(maxMinFreeBytes))
		} else {
			c.MinFreeBytes = n
		}
	}

	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	return c, nil
}

// maxMinFreeBytes bounds CHALUPA_MIN_FREE_BYTES: 1 PiB, beyond any disk a
// control plane runs on.
const maxMinFreeBytes = 1 << 50

// minFreeText prints CHALUPA_MIN_FREE_BYTES as configured.
func minFreeText(n int64) string {
	switch n {
	case storage.MinFreeAuto:
		return "(default: the larger of 1 GiB and 5 % of the filesystem)"
	case 0:
		return "0 (free-space guard off: tests only)"
	}
	return strconv.FormatInt(n, 10)
}

// ReplicaSharesDataDisk reports whether the replica is a file:// replica on
// the data directory's filesystem (the embedded default is): it then fills
// the same disk as the database and is lost with it, so it is no backup
// against the disk's loss (docs/operations.md, "Replication"). Paths that
// do not exist yet are judged by their nearest existing parent.
func (c *Config) ReplicaSharesDataDisk() bool {
	if c.replicaKind != "file" {
		return false
	}
	u, err := url.Parse(c.ReplicaURL)
	if err != nil {
		return false
	}
	a, aok := deviceOf(c.DataDir)
	b, bok := deviceOf(u.Path)
	return aok && bok && a == b
}

// checkLogs reads CHALUPA_LOGS_* (docs/operations.md, "Logs"). The log
// broker deletes objects (retention, erase), so it must never hold the
// replica's credentials nor write where the replica does: a mistake there
// could delete the database's only off-site copy.
func (c *Config) checkLogs(get func(string) string, bad func(string, ...any)) {
	c.LogsURL = get("CHALUPA_LOGS_URL")
	c.LogsKey = Secret(get("CHALUPA_LOGS_KEY"))
	c.LogsSecret = Secret(get("CHALUPA_LOGS_SECRET"))
	c.LogsRetention = logs.DefaultRetention
	if v := get("CHALUPA_LOGS_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Hour || d > logs.MaxRetention {
			bad("CHALUPA_LOGS_RETENTION must be a duration between 1h and %s (such as 336h)", logs.MaxRetention)
		} else {
			c.LogsRetention = d
		}
	}
	if c.LogsURL == "" {
		if c.LogsKey != "" || c.LogsSecret != "" {
			bad("CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET are set but CHALUPA_LOGS_URL is not")
		}
		return
	}
	loc, err := logs.ParseLocation(c.LogsURL)
	if err != nil {
		bad("CHALUPA_LOGS_URL: %v", err)
		return
	}
	c.LogsLocation = loc
	if c.LogsKey == "" || c.LogsSecret == "" {
		bad("CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET are required with CHALUPA_LOGS_URL")
		return
	}
	if (c.SpacesKey != "" && c.LogsKey == c.SpacesKey) || (c.SpacesSecret != "" && c.LogsSecret == c.SpacesSecret) {
		bad("CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET must differ from CHALUPA_SPACES_KEY and CHALUPA_SPACES_SECRET: log retention and erase delete objects and must never hold credentials that can delete the database replica")
	}
	if bucket, p, ok := storage.ReplicaBucketPath(c.ReplicaURL); ok && loc.Overlaps(bucket, p) {
		bad("CHALUPA_LOGS_URL overlaps CHALUPA_REPLICA_URL (same bucket, one path within the other): log retention and erase delete objects and must never reach the database replica")
	}
}

// quotaField is one CHALUPA_QUOTA_* variable: its name, its field in
// Config and its default.
type quotaField struct {
	name  string
	value *int
	def   int
}

// quotaFields lists the CHALUPA_QUOTA_* variables in documentation order.
func (c *Config) quotaFields() []quotaField {
	return []quotaField{
		{"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE", &c.QuotaHeartbeatsPerMinute, ingest.DefaultHeartbeatsPerMinute},
		{"CHALUPA_QUOTA_HEARTBEAT_BURST", &c.QuotaHeartbeatBurst, ingest.DefaultHeartbeatBurst},
		{"CHALUPA_QUOTA_OPEN_SESSIONS", &c.QuotaOpenSessions, ingest.DefaultOpenSessions},
		{"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS", &c.QuotaActiveDeployments, ingest.DefaultActiveDeployments},
		{"CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE", &c.QuotaEnvironmentHeartbeatsPerMinute, ingest.DefaultEnvironmentHeartbeatsPerMinute},
		{"CHALUPA_QUOTA_TELEMETRY_PER_MINUTE", &c.QuotaTelemetryPerMinute, ingest.DefaultTelemetryPerMinute},
		{"CHALUPA_QUOTA_TELEMETRY_BURST", &c.QuotaTelemetryBurst, ingest.DefaultTelemetryBurst},
		{"CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE", &c.QuotaEnvironmentTelemetryPerMinute, ingest.DefaultEnvironmentTelemetryPerMinute},
		{"CHALUPA_QUOTA_LIFECYCLE_PER_MINUTE", &c.QuotaLifecyclePerMinute, ingest.DefaultLifecyclePerMinute},
		{"CHALUPA_QUOTA_LIFECYCLE_BURST", &c.QuotaLifecycleBurst, ingest.DefaultLifecycleBurst},
		{"CHALUPA_QUOTA_ENVIRONMENT_LIFECYCLE_PER_MINUTE", &c.QuotaEnvironmentLifecyclePerMinute, ingest.DefaultEnvironmentLifecyclePerMinute},
		{"CHALUPA_QUOTA_RUNS_PER_MINUTE", &c.QuotaRunsPerMinute, ingest.DefaultRunsPerMinute},
		{"CHALUPA_QUOTA_RUN_BURST", &c.QuotaRunBurst, ingest.DefaultRunBurst},
		{"CHALUPA_QUOTA_ENVIRONMENT_RUNS_PER_MINUTE", &c.QuotaEnvironmentRunsPerMinute, ingest.DefaultEnvironmentRunsPerMinute},
		{"CHALUPA_QUOTA_ARTIFACT_KIB_PER_MINUTE", &c.QuotaArtifactKiBPerMinute, ingest.DefaultArtifactKiBPerMinute},
		{"CHALUPA_QUOTA_ARTIFACT_KIB_BURST", &c.QuotaArtifactKiBBurst, ingest.DefaultArtifactKiBBurst},
		{"CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE", &c.QuotaEnvironmentArtifactKiBPerMinute, ingest.DefaultEnvironmentArtifactKiBPerMinute},
		{"CHALUPA_QUOTA_LOG_REQUESTS_PER_MINUTE", &c.QuotaLogRequestsPerMinute, ingest.DefaultLogRequestsPerMinute},
		{"CHALUPA_QUOTA_LOG_BURST", &c.QuotaLogBurst, ingest.DefaultLogBurst},
		{"CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE", &c.QuotaEnvironmentLogRequestsPerMinute, ingest.DefaultEnvironmentLogRequestsPerMinute},
	}
}

// minArtifactKiB is the smallest non-zero artifact bucket (KiB): the
// artifacts of the largest run report, rounded up.
const minArtifactKiB = (ingest.MaxRunArtifactBytes + 1023) / 1024

// IngestQuotas returns the configured quotas for the ingest service.
func (c *Config) IngestQuotas() ingest.Quotas {
	return ingest.Quotas{
		HeartbeatsPerMinute:             c.QuotaHeartbeatsPerMinute,
		HeartbeatBurst:                  c.QuotaHeartbeatBurst,
		OpenSessions:                    c.QuotaOpenSessions,
		ActiveDeployments:               c.QuotaActiveDeployments,
		EnvironmentHeartbeatsPerMinute:  c.QuotaEnvironmentHeartbeatsPerMinute,
		EnvironmentStorageBytes:         c.QuotaEnvironmentStorageBytes,
		TelemetryPerMinute:              c.QuotaTelemetryPerMinute,
		TelemetryBurst:                  c.QuotaTelemetryBurst,
		EnvironmentTelemetryPerMinute:   c.QuotaEnvironmentTelemetryPerMinute,
		LifecyclePerMinute:              c.QuotaLifecyclePerMinute,
		LifecycleBurst:                  c.QuotaLifecycleBurst,
		EnvironmentLifecyclePerMinute:   c.QuotaEnvironmentLifecyclePerMinute,
		RunsPerMinute:                   c.QuotaRunsPerMinute,
		RunBurst:                        c.QuotaRunBurst,
		EnvironmentRunsPerMinute:        c.QuotaEnvironmentRunsPerMinute,
		ArtifactKiBPerMinute:            c.QuotaArtifactKiBPerMinute,
		ArtifactKiBBurst:                c.QuotaArtifactKiBBurst,
		EnvironmentArtifactKiBPerMinute: c.QuotaEnvironmentArtifactKiBPerMinute,
		LogRequestsPerMinute:            c.QuotaLogRequestsPerMinute,
		LogBurst:                        c.QuotaLogBurst,
		EnvironmentLogRequestsPerMinute: c.QuotaEnvironmentLogRequestsPerMinute,
	}
}

// UnlimitedQuotas names the CHALUPA_QUOTA_* variables set to 0 (unlimited,
// for benchmarks only); serve warns about each at start.
func (c *Config) UnlimitedQuotas() []string {
	var off []string
	for _, q := range c.quotaFields() {
		if *q.value == 0 {
			off = append(off, q.name)
		}
	}
	if c.QuotaEnvironmentStorageBytes == 0 {
		off = append(off, "CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES")
	}
	return off
}

// decodeKey accepts standard or URL base64, padded or not.
func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// errKind reduces a filesystem error to its cause without the path.
func errKind(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return "error"
}

// Redacted returns the effective configuration as ordered name/value pairs
// with every secret shown as "[redacted]", "(generated: PATH)" or "(unset)".
func (c *Config) Redacted() [][2]string {
	gen := map[string]bool{}
	for _, k := range c.Generated {
		gen[k] = true
	}
	sec := func(k string, s Secret) string {
		switch {
		case gen[k] && s == "":
			return "(generated on first serve into " + c.SecretsFile + ")"
		case gen[k]:
			return "[redacted] (from " + c.SecretsFile + ")"
		case s == "":
			return "(unset)"
		}
		return "[redacted]"
	}
	str := func(s string) string {
		if s == "" {
			return "(unset)"
		}
		return s
	}
	vol := "(unset)"
	if c.VolumeUSDPerGiB > 0 {
		vol = strconv.FormatFloat(c.VolumeUSDPerGiB, 'f', -1, 64)
	}
	out := [][2]string{
		{"CHALUPA_DATA_DIR", c.DataDir},
		{"CHALUPA_LISTEN", c.Listen},
		{"CHALUPA_ORIGIN", c.Origin},
		{"CHALUPA_ADMIN_TOKEN", sec("CHALUPA_ADMIN_TOKEN", c.AdminToken)},
		{"CHALUPA_READY_TOKEN", sec("CHALUPA_READY_TOKEN", c.ReadyToken)},
		{"CHALUPA_INGEST_MASTER_KEY", sec("CHALUPA_INGEST_MASTER_KEY", c.IngestMasterKey)},
		{"CHALUPA_INGEST_KEY", sec("CHALUPA_INGEST_KEY", c.IngestKey)},
		{"CHALUPA_REPLICA_URL", redactURL(c.ReplicaURL)},
		{"CHALUPA_SPACES_KEY", sec("CHALUPA_SPACES_KEY", c.SpacesKey)},
		{"CHALUPA_SPACES_SECRET", sec("CHALUPA_SPACES_SECRET", c.SpacesSecret)},
		{"CHALUPA_LOGS_URL", logsURLText(c.LogsURL)},
		{"CHALUPA_LOGS_KEY", sec("CHALUPA_LOGS_KEY", c.LogsKey)},
		{"CHALUPA_LOGS_SECRET", sec("CHALUPA_LOGS_SECRET", c.LogsSecret)},
		{"CHALUPA_LOGS_RETENTION", c.LogsRetention.String()},
		{"DIGITALOCEAN_READ_TOKEN", sec("DIGITALOCEAN_READ_TOKEN", c.DOReadToken)},
		{"DIGITALOCEAN_WRITE_TOKEN", sec("DIGITALOCEAN_WRITE_TOKEN", c.writeToken())},
		{"CHALUPA_DO_API_URL", c.DOAPIURL},
		{"DO_VOLUME_USD_PER_GIB_MONTH", vol},
		{"DO_BILLING_GRANULARITY_SECONDS", strconv.FormatFloat(c.BillingRule.Granularity.Seconds(), 'f', -1, 64)},
		{"DO_BILLING_MINIMUM_SECONDS", strconv.FormatFloat(c.BillingRule.MinimumBilled.Seconds(), 'f', -1, 64)},
		{"DO_BILLING_MINIMUM_CHARGE_USD", strconv.FormatFloat(c.BillingRule.MinimumChargeUSD, 'f', -1, 64)},
		{"DO_BILLING_MONTHLY_CAP_HOURS", strconv.FormatFloat(c.BillingRule.CapHours, 'f', -1, 64)},
		{"PULUMI_BACKEND_URL", str(redactURL(c.PulumiBackendURL))},
		{"DIGITALOCEAN_PROVISION_TOKEN", sec("DIGITALOCEAN_PROVISION_TOKEN", c.provisionToken())},
		{"CHALUPA_PULUMI_CLI", str(c.PulumiCLI)},
		{"CHALUPA_AGENT_VERSION", str(c.AgentRelease.Version)},
		{"CHALUPA_AGENT_RELEASE_URL", str(redactURL(c.AgentRelease.URL))},
		{"CHALUPA_AGENT_SHA256_AMD64", str(c.AgentRelease.SHA256["amd64"])},
		{"CHALUPA_AGENT_SHA256_ARM64", str(c.AgentRelease.SHA256["arm64"])},
		{"PULUMI_HOME", str(c.PulumiHome)},
		{"CHALUPA_SSH_PORT", strconv.Itoa(c.SSHPort)},
		{"CHALUPA_TRUSTED_PROXIES", trustedProxiesText(c.TrustedProxies)},
		{"CHALUPA_REAPER", c.ReaperMode},
		{"CHALUPA_COSTS", onOff(c.Costs)},
		{"CHALUPA_REAPER_CI_FRESHNESS", c.ReaperCIFreshness.String()},
		{"CHALUPA_MIN_FREE_BYTES", minFreeText(c.MinFreeBytes)},
		{"CHALUPA_REAPER_MAX_DESTROY", strconv.Itoa(c.ReaperMaxDestroy) + " a minute"},
	}
	for _, q := range c.quotaFields() {
		v := strconv.Itoa(*q.value)
		if *q.value == 0 {
			v = "0 (unlimited: benchmarks only)"
		}
		out = append(out, [2]string{q.name, v})
	}
	storageBudget := strconv.FormatInt(c.QuotaEnvironmentStorageBytes, 10)
	if c.QuotaEnvironmentStorageBytes == 0 {
		storageBudget = "0 (unlimited: benchmarks only)"
	}
	out = append(out, [2]string{"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES", storageBudget})
	return out
}

// redactURL drops user info from a URL (credentials never belong there, but
// an operator may have put them there anyway).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "[unparseable]"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	return u.String()
}

// logsURLText prints CHALUPA_LOGS_URL, or says the log routes are off.
func logsURLText(s string) string {
	if s == "" {
		return "(unset: log routes answer 503 logs_not_configured)"
	}
	return redactURL(s)
}

// ListensOnLoopback reports whether CHALUPA_LISTEN is a loopback address
// (the embedded default; docs/operations.md, "Configuration").
func (c *Config) ListensOnLoopback() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	return err == nil && origin.IsLoopbackHost(host)
}

// trustedProxiesText prints CHALUPA_TRUSTED_PROXIES as parsed.
func trustedProxiesText(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "(none: X-Forwarded-For is ignored)"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}
