// Package depstest checks what a package links, in the manner of
// Tailscale's cmd/tailscale/deps_test.go: the agent, the light binary and
// the CLI each keep the server's packages out (docs/architecture.md,
// "Dependency direction"), and each says so with one call; Count measures
// how much one links, for the agent's bound on it.
package depstest

import (
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Module is this module's path.
const Module = "github.com/chalupa-run/chalupa"

// ServerModules are the third-party modules only the server links, by
// import path prefix (a prefix ending in "/" names everything under it),
// each with why.
var ServerModules = map[string]string{
	"modernc.org/sqlite":                "SQLite is the server's database",
	"github.com/benbjohnson/litestream": "replication is the server's",
	"github.com/pressly/goose":          "migrations are the server's",
	"github.com/pulumi/":                "Pulumi is the converge engine's",
	"github.com/aws/":                   "the AWS SDK is the replica's and the log store's",
	"github.com/digitalocean/godo":      "provider calls are the server's",
}

// ServerPackages are this module's server packages, each with why; a
// prefix covers its subpackages too. What clients share with the server
// (the protocol, adminapi, internal leaves) lives outside these prefixes.
var ServerPackages = map[string]string{
	Module + "/storage":      "the server's database",
	Module + "/schema":       "the server's migrations",
	Module + "/daemon":       "the server's wiring",
	Module + "/reaper":       "the server's reaper",
	Module + "/jobs":         "the server's job queue",
	Module + "/pulumiexec":   "the server's Pulumi engine",
	Module + "/console":      "the server's web console",
	Module + "/digitalocean": "the server's provider client",
	Module + "/boxes":        "the server's converge intent",
	Module + "/ingest":       "the server's ingest",
}

// Forbidden is ServerModules and ServerPackages with extra added: the
// usual rule set of a client, plus what that client must also keep out.
func Forbidden(extra map[string]string) map[string]string {
	out := maps.Clone(ServerModules)
	maps.Copy(out, ServerPackages)
	maps.Copy(out, extra)
	return out
}

// Check fails t for every package that pkgs link (go list -deps, for
// linux on each architecture the release builds: docs/operations.md,
// "Releases") matching a prefix of forbidden; who
// names the linker in the failure. It skips under -short (it runs
// go list over the module).
func Check(t *testing.T, who string, pkgs []string, forbidden map[string]string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run("linux/"+arch, func(t *testing.T) {
			cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < len(pkgs) {
				t.Fatalf("go list listed %d packages for %d", len(deps), len(pkgs))
			}
			for _, dep := range deps {
				for prefix, why := range forbidden {
					if Matches(dep, prefix) {
						t.Errorf("%s is linked by %s: %s", dep, who, why)
					}
				}
			}
		})
	}
}

// Count returns how many packages pkg links for goos/goarch with cgo off,
// as the release builds it: the lines of `go list -deps pkg`, which names
// pkg itself and every standard-library package too. Errors fail t.
func Count(t *testing.T, goos, goarch, pkg string) int {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	return len(strings.Fields(string(out)))
}

// Matches reports whether the import path dep is prefix or under it; a
// prefix ending in "/" matches every path that starts with it.
func Matches(dep, prefix string) bool {
	return dep == prefix || strings.HasPrefix(dep, prefix+"/") || (strings.HasSuffix(prefix, "/") && strings.HasPrefix(dep, prefix))
}
