// Package buildinfo holds what a build stamps into every chalupa binary —
// the server, the CLI and the fleet agent — so that commands which are not
// the server read it without importing the server's packages
// (docs/architecture.md, "Dependency direction"). A leaf: standard library only.
package buildinfo

import "runtime/debug"

// Version is the release version, set at build time by contrib/release.sh
// (docs/operations.md, "Releases"):
//
//	go build -ldflags "-X github.com/chalupa-run/chalupa/internal/buildinfo.Version=v1.2.3"
//
// An unstamped build (go run, go build) reports "dev".
var Version = "dev"

// LitestreamVersion is the version of the Litestream library storage embeds
// (pinned in go.mod), which `chalupa version` reports; storage's
// LitestreamVersion is this constant.
const LitestreamVersion = "v0.5.18"

// LitestreamModule is the Litestream library's module path in go.mod.
const LitestreamModule = "github.com/benbjohnson/litestream"

// Commit returns the VCS revision Go stamped into the binary (-buildvcs, the
// default in a git checkout), or "unknown" for a build outside one.
func Commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// LinkedLitestreamVersion returns the version of LitestreamModule linked
// into the running binary, read from its embedded module list
// (runtime/debug.ReadBuildInfo); LitestreamVersion when the list is absent
// or does not name it (a test binary of a package that does not import it).
func LinkedLitestreamVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == LitestreamModule {
				if d.Replace != nil && d.Replace.Version != "" {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return LitestreamVersion
}
