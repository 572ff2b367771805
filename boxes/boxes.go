// Package boxes holds the rules of converge intent: what a box (one
// declared machine of an environment, the cloud_resource oracle) may
// declare (docs/operations.md, "Boxes"). The admin API validates every
// create and update here before anything is written.
package boxes

import (
	"errors"
	"fmt"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/internal/lazyre"
	"github.com/chalupa-run/chalupa/internal/slug"
	"github.com/chalupa-run/chalupa/storage"
)

// Bounds of a box's configuration (docs/operations.md, "Boxes").
const (
	// MaxSSHKeys bounds the SSH key fingerprints of one box: more is a
	// mistake, not a team.
	MaxSSHKeys = 10
	// MaxTags bounds a box's extra tags: DigitalOcean allows more, but the
	// program adds its own and a droplet's tags are listed on every
	// inventory read.
	MaxTags = 20
	// MaxVolumeGiB is DigitalOcean's largest volume (16 TiB).
	MaxVolumeGiB = 16384
	// ReservedTagPrefix starts the tags the converge program sets itself
	// (chalupa, chalupa:env:<slug>, the box and job tags): a declared tag
	// may not, so the reaper's tag guard cannot be spoofed by intent.
	ReservedTagPrefix = "chalupa"
	// DefaultAgentIdleMinutes is a new box's agent idle limit: the agent's
	// own default, so a box that says nothing is watched as a hand-started
	// agent watches.
	DefaultAgentIdleMinutes = agentrelease.DefaultIdleLimitMinutes
	// MaxAgentIdleMinutes is the heartbeat's bound on the idle limit (one
	// week; docs/operations.md, "Heartbeats and deadlines").
	MaxAgentIdleMinutes = agentrelease.MaxIdleLimitMinutes
	// MaxAgentSessionMinutes bounds the agent's session limit at 30 days,
	// the longest session policy (docs/operations.md, "Session policies").
	MaxAgentSessionMinutes = agentrelease.MaxSessionLimitMinutes
)

// ErrInvalid is wrapped by every validation error; the message names the
// field and the rule and never echoes more than the field's name.
var ErrInvalid = errors.New("invalid box")

// The patterns are apischema.Patterns' entries, which the box bodies'
// schema tags name: the OpenAPI document's patterns and these checks are
// one string each (docs/operations.md, "OpenAPI").
var (
	regionRE      = lazyre.New(apischema.Patterns["region"])
	sizeRE        = lazyre.New(apischema.Patterns["size"])
	imageRE       = lazyre.New(apischema.Patterns["image"])
	fingerprintRE = lazyre.New(apischema.Patterns["fingerprint"])
	tagRE         = lazyre.New(apischema.Patterns["tag"])
	reservedTagRE = lazyre.New(apischema.Patterns["reservedTag"])
	hostRE        = lazyre.New(apischema.Patterns["ipv4Host"])
	nonUnicastRE  = lazyre.New(apischema.Patterns["nonUnicastHost"])
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ValidName checks a box name: an environment-slug-like label (the
// stacks are <name>-compute and <name>-data). Errors: ErrInvalid.
func ValidName(name string) error {
	if !slug.Valid(name) {
		return invalid("name must match %s", slug.Pattern)
	}
	return nil
}

// ValidSource checks one firewall source: an IPv4 /32 in canonical form
// ("203.0.113.7/32") of a globally routable unicast address, as net/netip
// reads them (IsGlobalUnicast: private addresses are unicast too). field
// names it in the error. Errors: ErrInvalid.
func ValidSource(field, s string) error {
	if !hostRE.MatchString(s) {
		return invalid("%s must be an IPv4 /32 such as 203.0.113.7/32", field)
	}
	if nonUnicastRE.MatchString(s) {
		return invalid("%s must be a unicast address (not loopback, link-local, multicast or unspecified)", field)
	}
	return nil
}

// WithDefaults returns c with the agent's idle limit at
// DefaultAgentIdleMinutes when it is 0 (the agent flag has no zero-value
// default: the caller decides it, true unless asked otherwise).
func WithDefaults(c storage.BoxConfig) storage.BoxConfig {
	if c.AgentIdleMinutes == 0 {
		c.AgentIdleMinutes = DefaultAgentIdleMinutes
	}
	return c
}

// Validate checks a box's configuration (the Version and UpdatedAt fields
// are ignored). Errors: ErrInvalid naming the first field that breaks its
// rule.
func Validate(c storage.BoxConfig) error {
	switch {
	case !regionRE.MatchString(c.Region):
		return invalid("region must be a DigitalOcean region slug such as nyc3")
	case !sizeRE.MatchString(c.Size):
		return invalid("size must be a DigitalOcean size slug such as s-2vcpu-4gb")
	case !imageRE.MatchString(c.Image):
		return invalid("image must be a DigitalOcean image slug or id such as ubuntu-24-04-x64")
	case len(c.SSHKeyFingerprints) == 0:
		return invalid("at least one SSH key fingerprint is required")
	case len(c.SSHKeyFingerprints) > MaxSSHKeys:
		return invalid("at most %d SSH key fingerprints", MaxSSHKeys)
	case len(c.Tags) > MaxTags:
		return invalid("at most %d tags", MaxTags)
	case c.VolumeSizeGiB < 0 || c.VolumeSizeGiB > MaxVolumeGiB:
		return invalid("volumeSizeGiB must be between 0 (no data volume) and %d", MaxVolumeGiB)
	case c.AgentIdleMinutes < 1 || c.AgentIdleMinutes > MaxAgentIdleMinutes:
		return invalid("agentIdleMinutes must be between 1 and %d (one week)", MaxAgentIdleMinutes)
	case c.AgentSessionMinutes < 0 || c.AgentSessionMinutes > MaxAgentSessionMinutes:
		return invalid("agentSessionMinutes must be between 0 (no session limit) and %d (30 days)", MaxAgentSessionMinutes)
	}
	seen := map[string]bool{}
	for _, f := range c.SSHKeyFingerprints {
		if !fingerprintRE.MatchString(f) {
			return invalid("SSH key fingerprints must be MD5 fingerprints in lowercase colon-separated hex (aa:bb:…, 16 bytes)")
		}
		if seen[f] {
			return invalid("SSH key fingerprints must be distinct")
		}
		seen[f] = true
	}
	if err := ValidSource("customerSource", c.CustomerSource); err != nil {
		return err
	}
	if err := ValidSource("controlPlaneSource", c.ControlPlaneSource); err != nil {
		return err
	}
	seen = map[string]bool{}
	for _, t := range c.Tags {
		if !tagRE.MatchString(t) {
			return invalid("tags must match %s", tagRE)
		}
		if reservedTagRE.MatchString(t) {
			return invalid("tags starting with %q are set by chalupa itself", ReservedTagPrefix)
		}
		if seen[t] {
			return invalid("tags must be distinct")
		}
		seen[t] = true
	}
	return nil
}
