package agentrelease

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"text/template"

	"github.com/chalupa-run/chalupa/internal/origin"
	"github.com/chalupa-run/chalupa/internal/slug"
)

// The agent's limits a box declares (docs/operations.md, "Boxes" and
// "Agent").
const (
	// DefaultIdleLimitMinutes is the agent's own default idle limit
	// (CHALUPA_AGENT_LIMIT_MINUTES, agent.DefaultLimitMinutes): a box that
	// says nothing gets what a hand-started agent gets.
	DefaultIdleLimitMinutes = 30
	// MaxIdleLimitMinutes is the heartbeat's bound on limitMinutes (one
	// week, ingest.MaxLimitMinutes; docs/operations.md, "Heartbeats and
	// deadlines"): a longer limit means "never reap" and is refused.
	MaxIdleLimitMinutes = 7 * 24 * 60
	// MaxSessionLimitMinutes bounds a box's session limit at 30 days, the
	// longest session policy (docs/operations.md, "Session policies").
	MaxSessionLimitMinutes = 30 * 24 * 60
)

// cloudInitTemplate is the one user-data template for a fleet droplet
// (docs/operations.md, "Agent install"); RenderCloudInit fills it in.
//
//go:embed cloud-init.yaml
var cloudInitTemplate string

// cloudInit parses cloudInitTemplate on its first render, not when the
// package is initialised (docs/operations.md, "Footprint"); it panics if
// the embedded template does not parse, which the package's tests catch.
var cloudInit = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("cloud-init.yaml").Funcs(template.FuncMap{
		// q quotes a string as a YAML double-quoted scalar (JSON's string
		// syntax is a subset of it).
		"q": func(s string) (string, error) {
			b, err := json.Marshal(s)
			return string(b), err
		},
	}).Option("missingkey=error").Parse(cloudInitTemplate))
})

// Params are one droplet's agent settings, written to
// /etc/chalupa-agent/agent.env at its first boot.
type Params struct {
	// URL is the control plane's origin (CHALUPA_ORIGIN): https unless
	// loopback, no path (the agent's --url rule).
	URL string
	// Environment is the environment slug the droplet's key is bound to.
	Environment string
	// Size is the droplet's size slug ("" when unknown: the metadata
	// service has none).
	Size string
	// IdleLimitMinutes is the agent's idle limit, 1..MaxIdleLimitMinutes;
	// 0 means DefaultIdleLimitMinutes.
	IdleLimitMinutes int64
	// SessionLimitMinutes, when above 0, makes the session expire that
	// many minutes after the install runs (at most
	// MaxSessionLimitMinutes); 0 is no session expiry.
	SessionLimitMinutes int64
}

// ErrRelease wraps the release's problems (Release.Check) when
// RenderCloudInit refuses to render: Variables names them.
var ErrRelease = errors.New("the agent release cannot be installed")

// ErrParams wraps a refused Params field; the message names the field,
// never its value.
var ErrParams = errors.New("invalid agent settings")

// Validate checks p on its face. Errors: ErrParams naming the field.
func (p Params) Validate() error {
	if err := origin.CheckDaemonURL("the control plane URL (CHALUPA_ORIGIN)", "fleet data", p.URL); err != nil {
		return fmt.Errorf("%w: %w", ErrParams, err)
	}
	switch {
	case !slug.Valid(p.Environment):
		return fmt.Errorf("%w: the environment must match %s", ErrParams, slug.Pattern)
	case p.Size != "" && !sizeRE.MatchString(p.Size):
		return fmt.Errorf("%w: the size must be a DigitalOcean size slug", ErrParams)
	case p.IdleLimitMinutes < 0 || p.IdleLimitMinutes > MaxIdleLimitMinutes:
		return fmt.Errorf("%w: the idle limit must be 1..%d minutes", ErrParams, MaxIdleLimitMinutes)
	case p.SessionLimitMinutes < 0 || p.SessionLimitMinutes > MaxSessionLimitMinutes:
		return fmt.Errorf("%w: the session limit must be 0 (none) to %d minutes", ErrParams, MaxSessionLimitMinutes)
	}
	return nil
}

// RenderCloudInit renders the one user-data template for a droplet that
// installs release r's agent with p's settings (docs/operations.md, "Agent
// install"): it embeds BOTH architectures' digests and the install script
// picks one by `uname -m`, verifying the archive before it runs anything.
// The result never carries key material: the ingest key arrives over SSH.
// Errors: ErrRelease wrapping every problem of r.Check (ErrNotConfigured
// or Problems naming variables); ErrParams.
func RenderCloudInit(r Release, p Params) (string, error) {
	if problems := r.Check(); len(problems) > 0 {
		return "", fmt.Errorf("%w: %w", ErrRelease, errors.Join(problems...))
	}
	if err := p.Validate(); err != nil {
		return "", err
	}
	if p.IdleLimitMinutes == 0 {
		p.IdleLimitMinutes = DefaultIdleLimitMinutes
	}
	var b bytes.Buffer
	err := cloudInit().Execute(&b, struct {
		Params
		Version, ReleaseURL, SHA256AMD64, SHA256ARM64 string
	}{p, r.Version, r.URL, r.SHA256["amd64"], r.SHA256["arm64"]})
	if err != nil {
		return "", fmt.Errorf("render cloud-init: %w", err)
	}
	return b.String(), nil
}

// Variables are the configuration variables errs (Release.Check's, or an
// error RenderCloudInit wrapped them in) name, in order and without
// repeats; ErrNotConfigured names all four. Never a value.
func Variables(errs ...error) []string {
	var out []string
	seen := map[string]bool{}
	add := func(v string) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case Problem:
			add(e.Var)
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			if err == ErrNotConfigured {
				for _, v := range []string{EnvVersion, EnvReleaseURL, EnvSHA256AMD64, EnvSHA256ARM64} {
					add(v)
				}
				return
			}
			walk(errors.Unwrap(err))
		}
	}
	for _, e := range errs {
		walk(e)
	}
	return out
}
