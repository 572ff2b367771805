package pulumiexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// RunError is a failed Pulumi run as a job keeps it (docs/operations.md,
// "Jobs", the row for a run's error): Error is the diagnostic that matters, drawn
// from the CLI's output by Explain; Detail is the whole output, which the
// job's step journal keeps (jobs.DetailedError). Both are scrubbed of the
// provision token by the engine.
type RunError struct {
	// Diagnostic is what went wrong and what to do, in one or two
	// sentences.
	Diagnostic string
	// Output is the run's error with Pulumi's whole output.
	Output string
	// Kind names the rule that matched (ExplainPluginMissing, …), "" for
	// the generic reading.
	Kind string
	err  error
}

// Error is the diagnostic.
func (e *RunError) Error() string { return e.Diagnostic }

// Detail is the raw output (jobs.DetailedError).
func (e *RunError) Detail() string { return e.Output }

// Unwrap exposes the engine's error (ErrBusy among them).
func (e *RunError) Unwrap() error { return e.err }

// The kinds of failure Explain recognises in Pulumi's output
// (docs/operations.md, "Converge", under Job errors).
const (
	ExplainPluginMissing = "plugin_missing"
	ExplainTokenRefused  = "token_refused"
	ExplainTokenScope    = "token_lacks_scope"
	ExplainRateLimited   = "rate_limited"
	ExplainProviderError = "provider_error"
	ExplainLocked        = "stack_locked"
)

var (
	// pluginMissingRE is the CLI's message for a resource plugin it could
	// neither find under PULUMI_HOME nor download ("Could not
	// automatically download and install resource plugin
	// 'pulumi-resource-digitalocean' at version v4.62.0", and "no resource
	// plugin 'pulumi-resource-digitalocean' found" when downloads are off).
	pluginMissingRE = lazyre.New(`resource plugin '?pulumi-resource-([a-z0-9-]+)'?(?: at version v?([0-9][0-9A-Za-z.+-]*))?`)
	// godoErrorRE is a DigitalOcean API error as godo (in the real
	// provider and the test one) writes it: METHOD URL: STATUS (request
	// "ID") MESSAGE.
	godoErrorRE = lazyre.New(`\b(GET|POST|PUT|PATCH|DELETE) \S+: (\d{3}) \(request "[^"]*"\) ([^\n]*)`)
	// lockedRE is the CLI's held-lock message, with the lock's holder.
	lockedRE       = lazyre.New(`the stack is currently locked by \d+ lock\(s\)`)
	lockHolderRE   = lazyre.New(`/([^/\s]+)/[0-9a-f-]+\.json\S*: created by (\S+) \(pid (\d+)\) at (\S+)`)
	diagHeaderRE   = lazyre.New(`^  (\S+) \((.+)\):$`)
	diagErrorRE    = lazyre.New(`^    error: (.+)$`)
	urlRE          = lazyre.New(`[a-z][a-z0-9+.-]*://\S+`)
	stderrErrorRE  = lazyre.New(`(?m)^stderr: error: (.+)$`)
	genericFailure = map[string]bool{"update failed": true, "preview failed": true, "refresh failed": true, "destroy failed": true}
)

// maxDiagnosticBytes bounds the generic diagnostic: one provider message.
const maxDiagnosticBytes = 500

// Explain reads a failed run's error (the CLI's output inside it) and
// returns the diagnostic that matters for box (docs/operations.md,
// "Converge", under Job errors): a missing provider plugin names the install
// command with pulumiHome (the daemon's PULUMI_HOME, "" for the CLI's
// default); a 401, 403, 429 or 5xx from DigitalOcean names the provision
// token's problem; a held lock names its holder and the cancel command;
// anything else is the first error of Pulumi's diagnostics with the
// resource it concerns. URLs are left out. It returns nil for a nil err.
func Explain(err error, box, pulumiHome string) *RunError {
	if err == nil {
		return nil
	}
	out := err.Error()
	e := &RunError{Output: out, err: err}
	if m := pluginMissingRE.FindStringSubmatch(out); m != nil {
		version := m[2]
		if version == "" && m[1] == "digitalocean" {
			version = ProviderVersion
		}
		e.Kind = ExplainPluginMissing
		e.Diagnostic = fmt.Sprintf("the %s provider plugin %s is not installed: %s", providerName(m[1]), version, InstallHint(m[1], version, pulumiHome))
		return e
	}
	if lockedRE.MatchString(out) || errors.Is(err, ErrBusy) {
		e.Kind = ExplainLocked
		holder := ""
		if m := lockHolderRE.FindStringSubmatch(out); m != nil {
			holder = fmt.Sprintf(" (stack %s, by %s pid %s since %s)", m[1], m[2], m[3], m[4])
		}
		e.Diagnostic = fmt.Sprintf("another update in progress: a stack of box %s is locked%s; if no job of the box is running and that process is gone, run chalupa admin state cancel %s", box, holder, box)
		return e
	}
	resource, msg := firstDiagnostic(out)
	where := ""
	if resource != "" {
		where = " (" + resource + ")"
	}
	if m := godoErrorRE.FindStringSubmatch(out); m != nil {
		status, reason := m[2], strings.TrimSuffix(strings.TrimSpace(m[3]), ".")
		switch {
		case status == "401":
			e.Kind = ExplainTokenRefused
			e.Diagnostic = fmt.Sprintf("DigitalOcean refused the provision token%s: 401 %s; set a valid DIGITALOCEAN_PROVISION_TOKEN and restart serve", where, reason)
		case status == "403":
			e.Kind = ExplainTokenScope
			e.Diagnostic = fmt.Sprintf("the provision token lacks a scope%s: 403 %s; DIGITALOCEAN_PROVISION_TOKEN needs read and write access to droplets, volumes, firewalls and tags", where, reason)
		case status == "429":
			e.Kind = ExplainRateLimited
			e.Diagnostic = fmt.Sprintf("DigitalOcean rate-limited the provision token%s: 429 %s; run the job again in a minute", where, reason)
		case status[0] == '5':
			e.Kind = ExplainProviderError
			e.Diagnostic = fmt.Sprintf("DigitalOcean failed%s: %s %s; run the job again later (refresh first if it was an up)", where, status, reason)
		}
		if e.Kind != "" {
			return e
		}
	}
	if msg == "" {
		if m := stderrErrorRE.FindStringSubmatch(out); m != nil {
			msg = m[1]
		}
	}
	if msg == "" {
		// Not Pulumi's output (a checkpoint or recording error): as it is.
		e.Diagnostic = out
		return e
	}
	msg = godoErrorRE.ReplaceAllString(msg, "$2 $3")
	msg = urlRE.ReplaceAllString(msg, "[url]")
	if len(msg) > maxDiagnosticBytes {
		msg = msg[:maxDiagnosticBytes] + "…"
	}
	if resource != "" {
		msg = resource + ": " + msg
	}
	e.Diagnostic = msg
	return e
}

// firstDiagnostic is the first error line of the CLI's "Diagnostics:"
// section that is not the stack's generic "update failed", and the
// resource it is under ("digitalocean:index:Volume volume").
func firstDiagnostic(out string) (resource, msg string) {
	_, diag, ok := strings.Cut(out, "\nDiagnostics:\n")
	if !ok {
		return "", ""
	}
	for _, line := range strings.Split(diag, "\n") {
		if m := diagHeaderRE.FindStringSubmatch(line); m != nil {
			resource = m[1] + " " + m[2]
			continue
		}
		if m := diagErrorRE.FindStringSubmatch(line); m != nil && !genericFailure[m[1]] {
			return resource, m[1]
		}
	}
	return "", ""
}

// providerName is a plugin's name as the docs write it.
func providerName(plugin string) string {
	if plugin == "digitalocean" {
		return "DigitalOcean"
	}
	return plugin
}

// InstallHint is the command that installs resource plugin name at
// version into pulumiHome ("" for the CLI's default, ~/.pulumi), as
// docs/operations.md, "Converge" ("Provider") has it.
func InstallHint(name, version, pulumiHome string) string {
	cmd := "pulumi plugin install resource " + name + " " + version
	if pulumiHome != "" {
		cmd = "PULUMI_HOME=" + pulumiHome + " " + cmd
	}
	return "install the " + providerName(name) + " provider with the daemon's PULUMI_HOME: `" + cmd + "`"
}

// ErrPluginMissing: the DigitalOcean provider plugin at ProviderVersion is
// not installed under PULUMI_HOME, so every converge job would fail.
var ErrPluginMissing = errors.New("the DigitalOcean provider plugin is not installed")

// CheckPlugin looks for the DigitalOcean provider plugin at
// ProviderVersion in pulumiHome's plugin directory ("" reads the CLI's
// default, ~/.pulumi), without running pulumi: the CLI installs a
// resource plugin as plugins/resource-<name>-v<version>/ holding
// pulumi-resource-<name>. Errors: ErrPluginMissing, naming the install
// command.
func CheckPlugin(pulumiHome string) error {
	home := pulumiHome
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("%w: %s", ErrPluginMissing, InstallHint("digitalocean", ProviderVersion, pulumiHome))
		}
		home = filepath.Join(h, ".pulumi")
	}
	bin := filepath.Join(home, "plugins", "resource-digitalocean-v"+ProviderVersion, "pulumi-resource-digitalocean")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%w (version %s): %s", ErrPluginMissing, ProviderVersion, InstallHint("digitalocean", ProviderVersion, pulumiHome))
}
