// Package pulumiexec runs the Pulumi program of one box — its stacks
// `<box>-compute` (droplet and firewall) and `<box>-data` (the volume) —
// through the Automation API with the real pulumi CLI (docs/operations.md,
// "Converge"). It is stage 1 of converge: the engine a job runner calls; it
// holds no job queue and no database.
//
// The program registers the DigitalOcean provider's resources by type token
// (digitalocean:index/droplet:Droplet, …) with the provider version pinned
// (ProviderVersion), instead of importing the typed pulumi-digitalocean SDK:
// the same resources and the same state, without the SDK's ~40 MB.
package pulumiexec

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// ProviderVersion is the DigitalOcean provider plugin version the program
// requests. Production installs it once with `pulumi plugin install
// resource digitalocean 4.62.0`; tests install the test provider
// (pulumiexec/internal/testprovider) under this version.
const ProviderVersion = "4.62.0"

// Tags every box resource carries (docs/operations.md, "Converge").
const (
	// TagChalupa marks every resource chalupa manages.
	TagChalupa = "chalupa"
	// tagEnvPrefix + slug names the environment.
	tagEnvPrefix = "chalupa:env:"
	// tagBoxPrefix + box name names the box.
	tagBoxPrefix = "chalupa:box:"
	// tagJobPrefix + job id names the job that created the resource.
	tagJobPrefix = "chalupa:job:"
)

// Errors of BoxSpec.Validate; each wraps ErrInvalidSpec.
var (
	// ErrInvalidSpec is wrapped by every validation error.
	ErrInvalidSpec = errors.New("converge: invalid box spec")
)

// BoxSpec is converge's input for one box: what the oracle declares.
type BoxSpec struct {
	// Name is the box name, also the droplet's hostname and the stack
	// prefix: lowercase letters, digits and dashes, starting with a letter,
	// at most 40 characters.
	Name string
	// EnvironmentSlug is the environment the box belongs to (its tag).
	EnvironmentSlug string
	// Region, Size and Image are DigitalOcean slugs.
	Region, Size, Image string
	// SSHKeyFingerprints are the account SSH keys installed at creation
	// (at least one).
	SSHKeyFingerprints []string
	// CustomerSource and ControlPlaneSource are the only SSH sources the
	// firewall admits: the customer's address and the control plane's own
	// egress address, each an IPv4 /32 (a bare address is read as /32).
	// Both are required.
	CustomerSource, ControlPlaneSource string
	// VolumeGiB is the data volume's size in GiB (1–16384), or 0 for a
	// box without a data volume (its data stack then holds nothing).
	VolumeGiB int
	// Tags are extra droplet tags beyond chalupa's own.
	Tags []string
	// Managed marks a managed worker box.
	Managed bool
	// UserData is the droplet's cloud-init user data (never a secret: it is
	// stored in Pulumi state and checkpoints).
	UserData string
	// JobID, when set, adds the per-job tag "chalupa:job:<id>" to the
	// droplet and volume, so a crashed run's resources can be found at the
	// provider. It is an input like any other: pass the id of the job that
	// created the box's resources (recorded beside the provider ids), not
	// each new job's, or every run updates the tags.
	JobID string
	// Known are provider ids the oracle recorded; a stack without state
	// imports them instead of creating (adoption).
	Known KnownIDs
}

// KnownIDs are the provider ids of a box's resources, as recorded in the
// oracle. Empty fields are unknown.
type KnownIDs struct {
	// DropletID is the droplet's numeric id as a string.
	DropletID string
	// FirewallID and VolumeID are UUIDs.
	FirewallID, VolumeID string
}

var (
	boxName = lazyre.New(`^[a-z][a-z0-9-]{0,39}$`)
	slug    = lazyre.New(`^[a-z0-9][a-z0-9-]{0,62}$`)
	tagRe   = lazyre.New(`^[A-Za-z0-9:_-]{1,255}$`)
)

// Validate checks a spec; every error wraps ErrInvalidSpec and names the
// field.
func (s BoxSpec) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	switch {
	case !boxName.MatchString(s.Name):
		return bad("name must be 1–40 lowercase letters, digits or dashes, starting with a letter")
	case !slug.MatchString(s.EnvironmentSlug):
		return bad("environment slug is missing or malformed")
	case s.Region == "" || s.Size == "" || s.Image == "":
		return bad("region, size and image are required")
	case len(s.SSHKeyFingerprints) == 0:
		return bad("at least one SSH key fingerprint is required")
	case s.VolumeGiB < 0 || s.VolumeGiB > 16384:
		return bad("volume size must be 0 (no data volume) to 16384 GiB")
	}
	for _, src := range []struct{ name, v string }{{"customer source", s.CustomerSource}, {"control-plane source", s.ControlPlaneSource}} {
		if _, err := hostPrefix(src.v); err != nil {
			return bad("%s: %v", src.name, err)
		}
	}
	for _, t := range s.Tags {
		if !tagRe.MatchString(t) {
			return bad("tag %q is not a valid DigitalOcean tag", t)
		}
	}
	if s.JobID != "" && !tagRe.MatchString(tagJobPrefix+s.JobID) {
		return bad("job id is not usable in a tag")
	}
	return nil
}

// hostPrefix reads an IPv4 address or /32 as a /32 prefix. Anything wider
// is refused: the firewall admits single hosts only.
func hostPrefix(v string) (netip.Prefix, error) {
	if v == "" {
		return netip.Prefix{}, errors.New("required")
	}
	if !strings.Contains(v, "/") {
		v += "/32"
	}
	p, err := netip.ParsePrefix(v)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, errors.New("must be an IPv4 address or /32")
	}
	if p.Bits() != 32 {
		return netip.Prefix{}, errors.New("must be a single host (/32)")
	}
	return p, nil
}

// sshSources are the firewall's SSH sources, sorted.
func (s BoxSpec) sshSources() []string {
	var out []string
	for _, v := range []string{s.CustomerSource, s.ControlPlaneSource} {
		p, _ := hostPrefix(v)
		out = append(out, p.String())
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// dropletTags are the droplet's tags, sorted: chalupa's, the environment's,
// the box's, the extra ones and the job's.
func (s BoxSpec) dropletTags() []string {
	tags := append([]string{TagChalupa, tagEnvPrefix + s.EnvironmentSlug, tagBoxPrefix + s.Name}, s.Tags...)
	if s.JobID != "" {
		tags = append(tags, tagJobPrefix+s.JobID)
	}
	sort.Strings(tags)
	return slices.Compact(tags)
}

// BoxTag is the tag every resource of the box carries
// ("chalupa:box:<name>"): crash recovery finds them by it.
func BoxTag(name string) string { return tagBoxPrefix + name }

// ComputeStack and DataStack are the names of a box's two stacks.
func (s BoxSpec) ComputeStack() string { return s.Name + "-compute" }

// DataStack is the name of the box's data stack.
func (s BoxSpec) DataStack() string { return s.Name + "-data" }
