package agent

import (
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chalupa-run/chalupa/internal/origin"
	"github.com/chalupa-run/chalupa/internal/slug"
	"github.com/chalupa-run/chalupa/protocol"
)

// Config is the agent's configuration (docs/operations.md, "Agent": flags
// and their CHALUPA_AGENT_* variables). Zero values take the defaults
// WithDefaults fills in.
type Config struct {
	// URL is the control plane's origin (https unless loopback).
	URL string
	// KeyID is the ingest key id; empty reads KeyIDFile.
	KeyID string
	// KeyIDFile holds the key id; empty means "key-id" beside KeyFile.
	KeyIDFile string
	// KeyFile holds the key material (mode 0600).
	KeyFile string
	// Environment is the environment slug the key is bound to.
	Environment string
	// DeploymentID, DropletID and Region override the metadata service.
	DeploymentID string
	DropletID    int64
	Region       string
	// Size is the droplet's size slug (the metadata service has none).
	Size string
	// LimitMinutes is the idle limit (1..protocol.MaxLimitMinutes).
	LimitMinutes int64
	// SessionExpiresAt is the optional absolute session expiry.
	SessionExpiresAt time.Time
	// StateDir holds the spool and the state file.
	StateDir string
	// MetadataURL is the metadata service's base URL.
	MetadataURL string
	// ProcRoot, DevRoot and RunRoot are /proc, /dev and /run.
	ProcRoot, DevRoot, RunRoot string
	// DiskPath is the filesystem whose use is reported (/).
	DiskPath string
	// NvidiaSMI is the nvidia-smi executable, looked up on PATH when it
	// has no slash; empty or "none" disables GPU metrics.
	NvidiaSMI string
	// CIProcessPattern, when set, is a regular expression over process
	// names (/proc/<pid>/comm): a match means a CI job runs.
	CIProcessPattern string

	// Logs are the services whose logs are shipped to the log broker
	// (docs/operations.md, "Logs"): each a file or a journald unit.
	Logs []LogConfig

	// Clock is the clock (real when nil).
	Clock clockwork.Clock
	// HTTP is the client for signed requests (nil: RequestTimeout).
	HTTP *http.Client
	// MetadataHTTP is the metadata service's client (nil: MetadataTimeout).
	MetadataHTTP *http.Client
	// Log receives the agent's log (zerolog JSON).
	Log zerolog.Logger
	// ReplayRate overrides the delivery pace in requests a second (0:
	// the package's ReplayRate; tests use rate.Inf).
	ReplayRate rate.Limit
	// SpoolMaxRecords and SpoolMaxBytes override the spool caps (tests).
	SpoolMaxRecords int
	SpoolMaxBytes   int64
}

// LogConfig is one shipped service: Path (a file tailed) or Unit (a
// journald unit read with journalctl), under the name Service, which must
// be on the environment's log allowlist.
type LogConfig struct {
	Service string
	Path    string
	Unit    string
}

// WithDefaults returns c with every empty setting at its default.
func (c Config) WithDefaults() Config {
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.MetadataURL == "" {
		c.MetadataURL = DefaultMetadataURL
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.DevRoot == "" {
		c.DevRoot = "/dev"
	}
	if c.RunRoot == "" {
		c.RunRoot = "/run"
	}
	if c.DiskPath == "" {
		c.DiskPath = "/"
	}
	if c.LimitMinutes == 0 {
		c.LimitMinutes = DefaultLimitMinutes
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return c
}

// Validate checks the values on their face (no file or network access).
// Errors wrap ErrBadConfig and name the setting, never a secret.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, a...))
	}
	if err := origin.CheckDaemonURL("--url", "fleet data", c.URL); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	switch {
	case c.KeyFile == "":
		return bad("--key-file is required")
	case !slug.Valid(c.Environment):
		return bad("--env must match %s", slug.Pattern)
	case c.DeploymentID != "" && !slug.ValidID(c.DeploymentID):
		return bad("--deployment must be 1-128 characters of [A-Za-z0-9._:-]")
	case c.DropletID < 0:
		return bad("--droplet-id must not be negative")
	case c.LimitMinutes < 1 || c.LimitMinutes > protocol.MaxLimitMinutes:
		return bad("--limit-minutes must be 1..%d", protocol.MaxLimitMinutes)
	}
	seen := map[string]bool{}
	for _, l := range c.Logs {
		switch {
		case !protocol.ValidService(l.Service):
			return bad("log service %q must be 1-128 characters of [A-Za-z0-9@._:-]", l.Service)
		case seen[l.Service]:
			return bad("log service %q is named twice", l.Service)
		case (l.Path == "") == (l.Unit == ""):
			return bad("log service %q needs a file or a unit", l.Service)
		}
		seen[l.Service] = true
	}
	if c.CIProcessPattern != "" {
		if _, err := regexp.Compile(c.CIProcessPattern); err != nil {
			return bad("--ci-process is not a regular expression")
		}
	}
	return nil
}

// ciProbe builds the CI probe of the configuration.
func (c *Config) ciProbe() *CIProbe {
	p := &CIProbe{RunRoot: c.RunRoot, ProcRoot: c.ProcRoot}
	if c.CIProcessPattern != "" {
		p.Pattern = regexp.MustCompile(c.CIProcessPattern)
	}
	return p
}

// sources are the activity sources of the configuration.
func (c *Config) sources() []ActivitySource {
	return []ActivitySource{SSHSessions{ProcRoot: c.ProcRoot}, TerminalInput{DevRoot: c.DevRoot}}
}
