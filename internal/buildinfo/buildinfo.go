// Package buildinfo holds what a build stamps into every chalupa binary —
// the server, the CLI and the fleet agent — so that commands which are not
// the server read it without importing the server's packages
// (docs/architecture.md, "Dependency direction"). A leaf: standard library only.
package buildinfo

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
