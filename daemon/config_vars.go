package daemon

import (
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
)

// variable is one row of the configuration table: an environment variable,
// where it lands, how it is read and shown, and what serve --help and
// docs/operations.md ("Configuration") say about it.
type variable struct {
	name string
	// ptr points at the section field the variable sets (for the tests
	// that hold each quota and reaper setting to exactly one row).
	ptr any
	// load parses v (trimmed, "" when unset) into *ptr, default
	// included; a refusal is recorded with l.bad and leaves the default.
	load func(l *loader, v string)
	// show is the variable's text in the preview (Config.Redacted, config
	// check); nil leaves it out of the preview.
	show func() string
	// help is its line in serve --help's environment list.
	help string
	// doc is its row of the docs' table.
	doc docRow
	// quota marks an ingest quota: 0 is unlimited and serve warns about
	// it (Config.UnlimitedQuotas).
	quota bool
}

// docRow is a variable's row of docs/operations.md's "Configuration"
// table. Consecutive variables with the same group share one row, written
// from the first of them.
type docRow struct {
	// group is the row's first column when several variables share it;
	// "" names the variable alone.
	group                 string
	def, refusedWhen, why string
}

// isZero reports whether the field the variable sets holds its zero value.
func (v variable) isZero() bool { return reflect.ValueOf(v.ptr).Elem().IsZero() }

// variables is the configuration table of c, in the order config check
// prints it: one row per environment variable, each pointing into its
// section of c. Building it changes nothing in c.
func (c *Config) variables() []variable {
	return slices.Concat(c.serverVariables(), c.logsVariables(), c.digitalOceanVariables(), c.Costs.billingVariables(),
		c.convergeVariables(), c.Converge.agentReleaseVariables(), c.hostVariables(), c.policyVariables(), c.alertVariables(), c.notifyVariables(), c.quotaVariables())
}

// serverVariables are the table's rows of the data dir, the listener, the
// secrets and the replica.
func (c *Config) serverVariables() []variable {
	return []variable{
		{name: "CHALUPA_DATA_DIR", ptr: &c.DataDir, load: c.loadDataDir, show: func() string { return c.DataDir },
			help: "data directory: database, restore points, generated secrets",
			doc:  docRow{def: "`./chalupa-data`, made absolute", refusedWhen: "not a usable path; not a directory; locked by a running chalupa", why: "one process owns one database"}},
		{name: "CHALUPA_LISTEN", ptr: &c.HTTP.Listen, load: c.HTTP.loadListen, show: func() string { return c.HTTP.Listen },
			help: "address to listen on (host:port)",
			doc:  docRow{def: "`127.0.0.1:8080`", refusedWhen: "not `host:port`, or port outside 0–65535", why: "loopback by default: nothing is exposed before real secrets exist"}},
		{name: "CHALUPA_ORIGIN", ptr: &c.HTTP.Origin, load: func(_ *loader, v string) { c.HTTP.Origin = v }, show: func() string { return c.HTTP.Origin },
			help: "the public https origin the daemon is reached by",
			doc:  docRow{def: "`http://$CHALUPA_LISTEN` (loopback only)", refusedWhen: "missing on a non-loopback listener; not absolute http(s); `http` to a non-loopback host; `http` at all on a non-loopback listener (a loopback origin behind a public listener); has a path, query or user info", why: "plain http only where no network is crossed"}},
		c.secretVar("CHALUPA_ADMIN_TOKEN", &c.Secrets.AdminToken, "admin API bearer token (32+ characters)",
			docRow{def: "generated on loopback", refusedWhen: "shorter than 32 characters; missing on a non-loopback listener", why: "32 characters of a generated token carry well over 128 bits"}),
		c.secretVar("CHALUPA_READY_TOKEN", &c.Secrets.ReadyToken, "bearer token of /api/ready and /metrics",
			docRow{def: "generated on loopback", refusedWhen: "shorter than 32 characters; equal to the admin token; missing off loopback", why: "a leaked probe token must never grant admin"}),
		c.secretVar("CHALUPA_INGEST_MASTER_KEY", &c.Secrets.IngestMasterKey, "base64 of the 32-byte key sealing ingest keys",
			docRow{def: "generated on loopback", refusedWhen: "not base64 (standard or URL, padded or not) of exactly 32 bytes; missing off loopback; unset while `chalupa.db` already exists", why: "AES-256 needs 32 bytes; a fresh key can never open an existing database"}),
		c.secretVar("CHALUPA_INGEST_KEY", &c.Secrets.IngestKey, "deprecated shared ingest key",
			docRow{def: "unset (shared path off)", refusedWhen: "shorter than 32 characters", why: "deprecated shared key; same strength floor as tokens"}),
		{name: "CHALUPA_REPLICA_URL", ptr: &c.Replica.URL, load: c.loadReplicaURL, show: func() string { return redactURL(c.Replica.URL) },
			help: "Litestream replica: s3://BUCKET/PATH or file:///PATH",
			doc:  docRow{def: "`file://$CHALUPA_DATA_DIR/replica`", refusedWhen: "not `s3://BUCKET/…` or `file:///absolute`; user info in the URL", why: "credentials belong in their own variables, never in a URL that gets logged"}},
		c.secretVar("CHALUPA_SPACES_KEY", &c.Replica.SpacesKey, "the replica's S3 access key",
			docRow{group: "`CHALUPA_SPACES_KEY`, `CHALUPA_SPACES_SECRET`", def: "unset", refusedWhen: "either missing with an `s3://` replica", why: "S3 replication cannot authenticate without them"}),
		c.secretVar("CHALUPA_SPACES_SECRET", &c.Replica.SpacesSecret, "the replica's S3 secret key",
			docRow{group: "`CHALUPA_SPACES_KEY`, `CHALUPA_SPACES_SECRET`"}),
	}
}

// logsVariables are the log broker's rows.
func (c *Config) logsVariables() []variable {
	return []variable{
		{name: "CHALUPA_LOGS_URL", ptr: &c.Logs.URL, load: func(_ *loader, v string) { c.Logs.URL = v }, show: func() string { return logsURLText(c.Logs.URL) },
			help: "log broker bucket: s3://BUCKET[/PREFIX] (unset: log routes off)",
			doc:  docRow{def: "unset: log routes answer 503 `logs_not_configured`", refusedWhen: "not `s3://BUCKET[/PREFIX]` with optional `endpoint` (absolute http(s)) and `region`; user info in the URL; in the replica's bucket with one path within the other", why: "the log broker deletes objects (see \"Logs\"): it must never reach the database replica"}},
		c.secretVar("CHALUPA_LOGS_KEY", &c.Logs.Key, "the log bucket's access key",
			docRow{group: "`CHALUPA_LOGS_KEY`, `CHALUPA_LOGS_SECRET`", def: "unset", refusedWhen: "either missing with `CHALUPA_LOGS_URL`, set without it; equal to `CHALUPA_SPACES_KEY`/`SECRET`", why: "the log broker's own credentials: ones that can delete log objects must not be able to delete the replica"}),
		c.secretVar("CHALUPA_LOGS_SECRET", &c.Logs.Secret, "the log bucket's secret key",
			docRow{group: "`CHALUPA_LOGS_KEY`, `CHALUPA_LOGS_SECRET`"}),
		{name: "CHALUPA_LOGS_RETENTION", ptr: &c.Logs.Retention, load: durationVar(&c.Logs.Retention, logs.DefaultRetention, time.Hour, logs.MaxRetention,
			fmt.Sprintf("CHALUPA_LOGS_RETENTION must be a duration between 1h and %s (such as 336h)", logs.MaxRetention)),
			show: func() string { return c.Logs.Retention.String() },
			help: "age past which log chunks are removed (default 336h)",
			doc:  docRow{def: "`336h` (14 days)", refusedWhen: "not a Go duration in 1h–8760h", why: "committed log chunks older than this are removed, objects and rows"}},
	}
}

// digitalOceanVariables are the read and write tokens, the API URL and the
// volume price.
func (c *Config) digitalOceanVariables() []variable {
	return []variable{
		c.secretVar("DIGITALOCEAN_READ_TOKEN", &c.Costs.ReadToken, "DigitalOcean read token: inventory and prices",
			docRow{def: "unset", refusedWhen: "missing off loopback while `CHALUPA_COSTS` is on or unset; missing with `CHALUPA_COSTS=on`", why: "inventory and prices only"}),
		c.secretPtrVar("DIGITALOCEAN_WRITE_TOKEN", &c.Reaper.writeToken, "DigitalOcean write token, the reaper's alone",
			docRow{def: "unset", refusedWhen: "equal to the read token; missing off loopback while `CHALUPA_REAPER` is `live` or unset; missing with `CHALUPA_REAPER=live` or `dry-run`", why: "separation of duty: a leaked read token must not be able to destroy droplets"}),
		{name: digitalocean.EnvBaseURL, ptr: &c.DigitalOcean.APIURL, load: c.DigitalOcean.loadAPIURL, show: func() string { return c.DigitalOcean.APIURL },
			help: "DigitalOcean API base URL",
			doc:  docRow{def: "`https://api.digitalocean.com/`", refusedWhen: "not an absolute http(s) URL; user info, a path, query or fragment; `http` to a non-loopback host", why: "every DigitalOcean token travels to it (see \"DigitalOcean API\"); plain http only for a local test server"}},
		{name: "DO_VOLUME_USD_PER_GIB_MONTH", ptr: &c.Costs.VolumeUSDPerGiB, load: c.Costs.loadVolume, show: c.Costs.volumeText,
			help: "volume price in USD per GiB-month (required off loopback with costs on)",
			doc:  docRow{def: "on loopback: $0.10 per GiB-month (see \"Cost reconciliation\"); off loopback with costs on: none, required", refusedWhen: "not a number in 0–100 (NaN refused); missing off loopback while costs are on", why: "a typo must not produce absurd cost estimates; production's rate is reviewed against the provider's, never assumed"}},
	}
}

// convergeVariables are the Pulumi backend, the provision token and the
// CLI.
func (c *Config) convergeVariables() []variable {
	return []variable{
		{name: "PULUMI_BACKEND_URL", ptr: &c.Converge.PulumiBackendURL, load: c.loadPulumiBackend, show: func() string { return orUnset(redactURL(c.Converge.PulumiBackendURL)) },
			help: "Pulumi state backend: file:// or s3://",
			doc:  docRow{def: "`file://$CHALUPA_DATA_DIR/pulumi`", refusedWhen: "not `file://` or `s3://`; `s3://` with converge on but without `CHALUPA_SPACES_KEY`/`SECRET` (handed to Pulumi's child processes only, as `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`)", why: "the only backends converge supports"}},
		c.secretPtrVar("DIGITALOCEAN_PROVISION_TOKEN", &c.Converge.provisionToken, "Pulumi's DigitalOcean token (unset: converge off)",
			docRow{def: "unset: converge off (503 `converge_not_configured`)", refusedWhen: "equal to the read or the write token; set while no pulumi CLI is found", why: "Pulumi's own write token (see \"Converge\"): the reaper's stays the reaper's"}),
		{name: "CHALUPA_PULUMI_CLI", ptr: &c.Converge.PulumiCLI, load: c.Converge.loadPulumiCLI, show: func() string { return orUnset(c.Converge.PulumiCLI) },
			help: "the pulumi binary converge drives (default: pulumi on PATH)",
			doc:  docRow{def: "`pulumi` on `PATH`", refusedWhen: "set with converge on, but not an executable file", why: "the CLI converge drives (v3.274.1)"}},
	}
}

// hostVariables are where converge finds Pulumi's plugins and reaches a
// droplet's SSH.
func (c *Config) hostVariables() []variable {
	return []variable{
		{name: "PULUMI_HOME", ptr: &c.Converge.PulumiHome, load: c.Converge.loadPulumiHome, show: func() string { return orUnset(c.Converge.PulumiHome) },
			help: "where the DigitalOcean provider plugin is installed (default $HOME/.pulumi)",
			doc:  docRow{def: "`$HOME/.pulumi`", refusedWhen: "—", why: "where the DigitalOcean provider plugin is installed"}},
		{name: "CHALUPA_SSH_PORT", ptr: &c.Converge.SSHPort, load: intVar(&c.Converge.SSHPort, DefaultSSHPort, 1, 65535, "CHALUPA_SSH_PORT must be a port number in 1–65535"),
			show: func() string { return strconv.Itoa(c.Converge.SSHPort) },
			help: "the port key delivery dials on a droplet (default 22)",
			doc:  docRow{def: "`22`", refusedWhen: "not a whole number in 1–65535", why: "the port key delivery dials on a droplet's public IPv4 (see \"SSH key delivery\"); DigitalOcean images listen on 22, the tests point it at a local SSH server"}},
		{name: "CHALUPA_AGENT_UPGRADE_REPORT_SECONDS", ptr: &c.Converge.AgentUpgradeReport,
			load: secondsVar(&c.Converge.AgentUpgradeReport, agentrollout.DefaultReport, agentrollout.MinReport, agentrollout.MaxReport,
				"CHALUPA_AGENT_UPGRADE_REPORT_SECONDS must be a whole number of seconds in 5–300"),
			show: func() string { return strconv.Itoa(int(c.Converge.AgentUpgradeReport / time.Second)) },
			help: "seconds an upgraded agent has to heartbeat with the new version (default 120)",
			doc: docRow{def: "`120`", refusedWhen: "not a whole number in 5–300",
				why: "an agent upgrade is done only when the new agent heartbeats with the new version within this bound; otherwise the previous binary is restored and must report within it too (see \"Agent install\", under Upgrade); the agent heartbeats at its start and every 30 s"}},
	}
}

// secondsVar loads a whole number of seconds in [lo, hi] into p, def when
// unset.
func secondsVar(p *time.Duration, def, lo, hi time.Duration, problem string) func(*loader, string) {
	return func(l *loader, v string) {
		*p = def
		if v == "" {
			return
		}
		if n, err := strconv.Atoi(v); err != nil || time.Duration(n)*time.Second < lo || time.Duration(n)*time.Second > hi {
			l.bad("%s", problem)
		} else {
			*p = time.Duration(n) * time.Second
		}
	}
}

// policyVariables are the console's trusted proxies, the reaper's and
// costs' modes, and the reaper's and the disk guard's bounds.
func (c *Config) policyVariables() []variable {
	return []variable{
		{name: "CHALUPA_TRUSTED_PROXIES", ptr: &c.HTTP.TrustedProxies, load: c.HTTP.loadTrustedProxies, show: func() string { return trustedProxiesText(c.HTTP.TrustedProxies) },
			help: "proxies whose X-Forwarded-For the console believes (addresses, CIDRs)",
			doc:  docRow{def: "unset: `X-Forwarded-For` ignored", refusedWhen: "not comma-separated IP addresses or CIDR prefixes", why: "only a proxy the operator runs may name a login's source (see \"Console\")"}},
		{name: "CHALUPA_REAPER", ptr: &c.Reaper.Mode, load: c.Reaper.loadMode, show: func() string { return c.Reaper.Mode },
			help: "reaper mode: live, dry-run or off",
			doc:  docRow{def: "on loopback: `live` with the write token, else `off`; off loopback: `live`", refusedWhen: "not `live`, `dry-run` or `off`; disagreeing with the deprecated `CHALUPA_REAPER_DRY_RUN`", why: "a public control plane never runs without its reaper by accident: the operator says `off` (see \"Reaper\")"}},
		{name: "CHALUPA_REAPER_DRY_RUN", ptr: &c.Reaper.legacy, load: c.Reaper.loadLegacy,
			help: "deprecated: use CHALUPA_REAPER",
			doc:  docRow{group: "`CHALUPA_REAPER_DRY_RUN` (deprecated)", def: "unset", refusedWhen: "not `true`, `false`, `1` or `0`", why: "read for one release as `CHALUPA_REAPER=dry-run`/`live`, with a warning naming the replacement"}},
		{name: "CHALUPA_COSTS", ptr: &c.Costs.On, load: c.Costs.loadSwitch, show: func() string { return onOff(c.Costs.On) },
			help: "cost reconciliation: on or off",
			doc:  docRow{def: "on loopback: `on` with the read token, else `off`; off loopback: `on`", refusedWhen: "not `on` or `off`", why: "no inventory, no cost estimates and no `sunk` check must be a choice, not a missing token"}},
		{name: "CHALUPA_REAPER_CI_FRESHNESS", ptr: &c.Reaper.CIFreshness,
			// At least a minute (two heartbeats' worth would still be too
			// tight to mean "fresh"), at most a day: beyond that a dead
			// agent with ciActive=true keeps its droplet far too long.
			load: durationVar(&c.Reaper.CIFreshness, reaper.DefaultCIFreshness, time.Minute, 24*time.Hour, "CHALUPA_REAPER_CI_FRESHNESS must be a duration between 1m and 24h (such as 10m)"),
			show: func() string { return c.Reaper.CIFreshness.String() },
			help: "how long a heartbeat's CI report counts as live (default 10m)",
			doc:  docRow{def: "`10m`", refusedWhen: "not a Go duration in 1m–24h", why: "how long a heartbeat's `ciActive: true` counts as live CI; beyond a day a dead agent keeps its droplet far too long"}},
		{name: "CHALUPA_MIN_FREE_BYTES", ptr: &c.Disk.MinFreeBytes,
			// Whole bytes up to 1 PiB: a typo must not silently turn the
			// guard off or make it refuse forever.
			load: int64Var(&c.Disk.MinFreeBytes, storage.MinFreeAuto, 0, maxMinFreeBytes, fmt.Sprintf("CHALUPA_MIN_FREE_BYTES must be a whole number of bytes between 0 (guard off, for tests only) and %d", int64(maxMinFreeBytes))),
			show: func() string { return minFreeText(c.Disk.MinFreeBytes) },
			help: "free bytes the data disk keeps before ingest is refused (0: off)",
			doc:  docRow{def: "the larger of 1 GiB and 5 % of the data directory's filesystem", refusedWhen: "not a whole number of bytes in 0–2^50; 0 turns the guard off (tests only)", why: "below it, signed ingest other than heartbeats is refused 503 `disk_low` so the disk keeps room for heartbeats, the WAL and the operator (see \"Quotas\")"}},
		{name: "CHALUPA_REAPER_MAX_DESTROY", ptr: &c.Reaper.MaxDestroy,
			// At least one (0 would stop the reaper: pause it with `admin
			// loops` instead), at most 1000: beyond that there is no pace.
			load: intVar(&c.Reaper.MaxDestroy, reaper.DefaultMaxDestroy, 1, 1000, "CHALUPA_REAPER_MAX_DESTROY must be a whole number between 1 and 1000"),
			show: func() string { return strconv.Itoa(c.Reaper.MaxDestroy) + " a minute" },
			help: "most droplets the reaper destroys a minute (default 10)",
			doc:  docRow{def: "`10`", refusedWhen: "not a whole number in 1–1000", why: "the destroy pace: at most this many droplets destroyed a minute, oldest deadline first (see \"Reaper\"); 0 would stop the reaper (pause it with `admin loops` instead), beyond 1000 there is no pace"}},
	}
}

// secretText is a secret's preview: where it comes from, never its value.
func (c *Config) secretText(k string, s Secret) string {
	gen := false
	for _, g := range c.Secrets.Generated {
		gen = gen || g == k
	}
	switch {
	case gen && s == "":
		return "(generated on first serve into " + c.Secrets.File + ")"
	case gen:
		return "[redacted] (from " + c.Secrets.File + ")"
	case s == "":
		return "(unset)"
	}
	return "[redacted]"
}

// secretVar is a row reading a secret as given.
func (c *Config) secretVar(name string, p *Secret, help string, doc docRow) variable {
	return variable{name: name, ptr: p, load: func(_ *loader, v string) { *p = Secret(v) },
		show: func() string { return c.secretText(name, *p) }, help: help, doc: doc}
}

// secretPtrVar is a row reading a secret into an unexported pointer field
// (the write and provision tokens: only the wiring reads them, and %+v of
// a Config prints a nested pointer as its address, never the token).
func (c *Config) secretPtrVar(name string, p **Secret, help string, doc docRow) variable {
	return variable{name: name, ptr: p, load: func(_ *loader, v string) { s := Secret(v); *p = &s },
		show: func() string { return c.secretText(name, deref(*p)) }, help: help, doc: doc}
}

// deref is *p, "" for nil.
func deref(p *Secret) Secret {
	if p == nil {
		return ""
	}
	return *p
}

// intVar loads a whole number in [lo, hi] into p, def when unset; problem
// is the refusal.
func intVar(p *int, def, lo, hi int, problem string) func(*loader, string) {
	return func(l *loader, v string) {
		*p = def
		if v == "" {
			return
		}
		if n, err := strconv.Atoi(v); err != nil || n < lo || n > hi {
			l.bad("%s", problem)
		} else {
			*p = n
		}
	}
}

// int64Var is intVar for 64-bit values.
func int64Var(p *int64, def, lo, hi int64, problem string) func(*loader, string) {
	return func(l *loader, v string) {
		*p = def
		if v == "" {
			return
		}
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < lo || n > hi {
			l.bad("%s", problem)
		} else {
			*p = n
		}
	}
}

// durationVar loads a Go duration in [lo, hi] into p, def when unset.
func durationVar(p *time.Duration, def, lo, hi time.Duration, problem string) func(*loader, string) {
	return func(l *loader, v string) {
		*p = def
		if v == "" {
			return
		}
		if d, err := time.ParseDuration(v); err != nil || d < lo || d > hi {
			l.bad("%s", problem)
		} else {
			*p = d
		}
	}
}

// orUnset is s, or "(unset)".
func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
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

// fileURL is the file:// URL of dir/name.
func fileURL(dir, name string) string {
	return (&url.URL{Scheme: "file", Path: filepath.Join(dir, name)}).String()
}

// configDocsTable is docs/operations.md's "Configuration" table as the
// variable table writes it (TestConfigDocs keeps the docs equal to it).
func configDocsTable() string {
	rows := newConfig().variables()
	var b strings.Builder
	b.WriteString("| variable | default | refused when | why |\n|---|---|---|---|\n")
	for i, v := range rows {
		if i > 0 && v.doc.group != "" && v.doc.group == rows[i-1].doc.group {
			continue
		}
		first := v.doc.group
		if first == "" {
			first = "`" + v.name + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", first, v.doc.def, v.doc.refusedWhen, v.doc.why)
	}
	return b.String()
}
