// Package agentrelease describes the agent release a control plane installs on
// the droplets it converges (docs/operations.md, "Agent install"): which
// version, where its archives are, and the sha256 of each. Server code: the
// daemon reads it from configuration, converge and the agent upgrade render
// it, and nothing under agent/ (what runs on a droplet) imports it.
package agentrelease

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// Configuration variables (docs/operations.md, "Configuration").
const (
	// EnvVersion is the agent release version, e.g. v1.4.2.
	EnvVersion = "CHALUPA_AGENT_VERSION"
	// EnvReleaseURL is the https URL of the release directory that holds
	// the chalupa-agent archives (ArchiveName).
	EnvReleaseURL = "CHALUPA_AGENT_RELEASE_URL"
	// EnvSHA256AMD64 is the sha256 of the linux/amd64 archive, copied from
	// the release's checksums.txt.
	EnvSHA256AMD64 = "CHALUPA_AGENT_SHA256_AMD64"
	// EnvSHA256ARM64 is the sha256 of the linux/arm64 archive.
	EnvSHA256ARM64 = "CHALUPA_AGENT_SHA256_ARM64"
)

// Arches are the droplet architectures a release carries, in the order
// checksums.txt lists them.
var Arches = []string{"amd64", "arm64"}

// ErrNotConfigured is returned by Release.Check when no agent release is
// configured at all (every variable unset).
var ErrNotConfigured = errors.New("no agent release configured: set " + EnvVersion + ", " + EnvReleaseURL + ", " + EnvSHA256AMD64 + " and " + EnvSHA256ARM64 + " from the release's checksums.txt")

// Release is one immutable agent release: the version and the digests of
// its archives, pinned so a droplet installs exactly what the operator
// checked (docs/operations.md, "Releases").
type Release struct {
	// Version is an immutable release version (v1.2.3 or v1.2.3-rc.1),
	// never "latest" or a branch.
	Version string
	// URL is the https URL of the release directory, without a trailing
	// slash; ArchiveURL appends the archive's name.
	URL string
	// SHA256 maps an architecture (Arches) to its archive's sha256, 64
	// lowercase hex digits.
	SHA256 map[string]string
}

// FromEnv reads a Release from the four variables (get returns "" for an
// unset one). It does not validate: call Check.
func FromEnv(get func(string) string) Release {
	return Release{
		Version: strings.TrimSpace(get(EnvVersion)),
		URL:     strings.TrimRight(strings.TrimSpace(get(EnvReleaseURL)), "/"),
		SHA256: map[string]string{
			"amd64": strings.TrimSpace(get(EnvSHA256AMD64)),
			"arm64": strings.TrimSpace(get(EnvSHA256ARM64)),
		},
	}
}

var (
	versionRE = lazyre.New(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)
	sha256RE  = lazyre.New(`^[0-9a-f]{64}$`)
	// urlRE holds a release URL to the characters a release directory
	// needs, so that it passes through user data, a command line and the
	// install script unquoted (docs/operations.md, "Agent install").
	urlRE  = lazyre.New(`^[A-Za-z0-9._~:/%-]+$`)
	sizeRE = lazyre.New(`^[a-z0-9][a-z0-9-]{0,63}$`)
)

// Problem is one reason a Release cannot be installed: the variable at
// fault and what is wrong with it. The text never carries the value.
type Problem struct {
	// Var is the configuration variable (EnvVersion, …).
	Var string
	// Reason says what is wrong and how to fix it.
	Reason string
}

func (p Problem) Error() string { return p.Var + " " + p.Reason }

// Check returns every problem of r, each naming its variable and never its
// value: a missing or mutable version ("latest", a branch), a URL that is
// not https or that carries a query, credentials or a fragment (a mutable
// or secret-bearing address) or characters a release directory does not
// need (spaces, quotes, shell syntax), a digest that is missing or not 64 lowercase
// hex digits. It returns exactly []error{ErrNotConfigured} when nothing is
// set. An empty slice means the release can be installed.
func (r Release) Check() []error {
	if r.Version == "" && r.URL == "" && r.SHA256["amd64"] == "" && r.SHA256["arm64"] == "" {
		return []error{ErrNotConfigured}
	}
	var out []error
	if !versionRE.MatchString(r.Version) {
		out = append(out, Problem{EnvVersion, "must be an immutable release version like v1.2.3, not a moving name or a branch"})
	}
	if u, err := url.Parse(r.URL); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || !urlRE.MatchString(r.URL) {
		out = append(out, Problem{EnvReleaseURL, "must be the https URL of the release directory (no query, fragment, credentials, spaces or quotes)"})
	}
	for _, a := range Arches {
		if !sha256RE.MatchString(r.SHA256[a]) {
			out = append(out, Problem{envSHA(a), "must be the archive's sha256 from the release's checksums.txt (64 lowercase hex digits)"})
		}
	}
	return out
}

func envSHA(arch string) string {
	if arch == "arm64" {
		return EnvSHA256ARM64
	}
	return EnvSHA256AMD64
}

// ArchiveName is the file name of the agent archive for arch in a release
// built by contrib/release.sh: chalupa-agent_VERSION_linux_ARCH.tar.gz,
// holding one file, chalupa-agent (mode 0755).
func ArchiveName(version, arch string) string {
	return fmt.Sprintf("chalupa-agent_%s_linux_%s.tar.gz", version, arch)
}

// ArchiveURL is the URL of r's archive for arch.
func (r Release) ArchiveURL(arch string) string {
	return r.URL + "/" + ArchiveName(r.Version, arch)
}
