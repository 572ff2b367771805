package daemon

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/datadir"
	"github.com/chalupa-run/chalupa/internal/origin"
	"github.com/chalupa-run/chalupa/reaper/cost"
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

// Config is the validated configuration of a chalupa daemon: one section per
// domain, each filled from its rows of the variable table (config_vars.go)
// and checked by its own validate (docs/operations.md, "Configuration").
type Config struct {
	// DataDir is CHALUPA_DATA_DIR, made absolute. It stays at the top
	// level: every section derives a default from it (the file replica,
	// the Pulumi backend, the secrets file, the disk guard's filesystem),
	// so it belongs to none of them.
	DataDir string
	// HTTP is the listener and the origin the daemon is reached by.
	HTTP HTTPConfig
	// Secrets are the bearer tokens and the master key.
	Secrets SecretsConfig
	// Replica is Litestream's replica and its credentials.
	Replica ReplicaConfig
	// Logs is the log broker's bucket and credentials.
	Logs LogsConfig
	// DigitalOcean is the API every DigitalOcean token travels to.
	DigitalOcean DigitalOceanConfig
	// Costs is inventory and cost reconciliation, with the read token.
	Costs CostsConfig
	// Reaper is the reaper's mode and pace, with the write token.
	Reaper ReaperConfig
	// Converge is the Pulumi engine, the provision token and the agent
	// release.
	Converge ConvergeConfig
	// Quotas are the ingest quotas (docs/operations.md, "Quotas"); 0 is
	// unlimited.
	Quotas ingest.Quotas
	// Disk is the free-space guard.
	Disk DiskConfig
	// Alerts is where alerts go: the email and webhook sinks.
	Alerts AlertsConfig
	// Notify is the budget alert and the daily digest.
	Notify NotifyConfig
	// Warnings are what config check and serve say about a configuration
	// they accept: a deprecated variable and its replacement; an agent
	// release converge cannot install.
	Warnings []string
}

// DatabasePath is the SQLite file's path.
func (c *Config) DatabasePath() string { return filepath.Join(c.DataDir, DatabaseFileName) }

// MasterKey returns the decoded 32-byte ingest master key.
func (c *Config) MasterKey() []byte {
	b, _ := decodeKey(c.Secrets.IngestMasterKey.Reveal())
	return b
}

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

// loader is one LoadConfig run: the environment, the problems found so far
// and what the listener's rows found that other sections' rules depend on.
type loader struct {
	env      Getenv
	problems []string
	// dataDirOK and listenOK are whether CHALUPA_DATA_DIR and
	// CHALUPA_LISTEN were usable; loopback whether the listener is a
	// loopback address.
	dataDirOK, listenOK, loopback bool
}

// get is a variable's trimmed value, "" when unset.
func (l *loader) get(k string) string {
	v, _ := l.env(k)
	return strings.TrimSpace(v)
}

// bad records one problem.
func (l *loader) bad(format string, a ...any) {
	l.problems = append(l.problems, fmt.Sprintf(format, a...))
}

// LoadConfig reads and validates the configuration from env: each row of
// the variable table parses its variable into its section, then each
// section checks the rules across its variables. It does not touch the
// filesystem except to read an existing generated-secrets file and the
// alert sinks' secret files (CHALUPA_ALERT_*_FILE); it never
// creates one (see EnsureSecrets). On a loopback listener, secrets missing
// from env are taken from that file, or marked to be generated.
//
// Errors: *ConfigError naming each offending variable.
func LoadConfig(env Getenv) (*Config, error) {
	c := newConfig()
	l := &loader{env: env}
	for _, v := range c.variables() {
		v.load(l, l.get(v.name))
	}
	for _, validate := range c.validators() {
		validate(l)
	}
	if len(l.problems) > 0 {
		return nil, &ConfigError{Problems: l.problems}
	}
	return c, nil
}

// newConfig is a Config holding the defaults that live in their domain
// packages (the quotas', the billing rule), before the table's rows are
// loaded into it. Building the table (variables) changes nothing.
func newConfig() *Config {
	c := &Config{Quotas: ingest.DefaultQuotas()}
	c.Costs.BillingRule = cost.DefaultRule
	c.Converge.AgentRelease.SHA256 = map[string]string{}
	return c
}

// validators are the sections' cross-variable rules in the order they run:
// a section's rule may read the sections before it (the modes read the
// tokens, converge's warnings the origin).
func (c *Config) validators() []func(*loader) {
	return []func(*loader){c.HTTP.validate, c.validateSecrets, c.Replica.validate, c.validateLogs,
		c.validateReaper, c.validateCosts, c.validateConverge, c.validateAlerts, c.validateNotify}
}

// Redacted returns the effective configuration as ordered name/value pairs
// with every secret shown as "[redacted]", "(generated: PATH)" or "(unset)":
// the variable table's rows in order, each as its own text.
func (c *Config) Redacted() [][2]string {
	var out [][2]string
	for _, v := range c.variables() {
		if v.show != nil {
			out = append(out, [2]string{v.name, v.show()})
		}
	}
	return out
}

// UnlimitedQuotas names the CHALUPA_QUOTA_* variables set to 0 (unlimited,
// for benchmarks only), in the table's order; serve warns about each at
// start.
func (c *Config) UnlimitedQuotas() []string {
	var off []string
	for _, v := range c.variables() {
		if v.quota && v.isZero() {
			off = append(off, v.name)
		}
	}
	return off
}

// ListensOnLoopback reports whether CHALUPA_LISTEN is a loopback address
// (the embedded default; docs/operations.md, "Configuration").
func (c *Config) ListensOnLoopback() bool {
	host, _, err := net.SplitHostPort(c.HTTP.Listen)
	return err == nil && origin.IsLoopbackHost(host)
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
