package cli

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// module is this module's path.
const module = "github.com/chalupa-run/chalupa"

// ownDeps are the only packages of this module the CLI may link: itself,
// the MCP server (a client of the admin API) and the leaves
// (docs/architecture.md, "Dependency direction"). A prefix ending in "/"
// names the packages under it.
var ownDeps = []string{
	module + "/cli",
	module + "/mcpserver",
	module + "/adminapi",
	module + "/ingest/signer",
	module + "/ingest/wire",
	module + "/internal/",
}

// serverModules are modules the CLI may not link, each with why: the
// server's storage, replication, migrations, Pulumi, AWS and provider.
var serverModules = map[string]string{
	"modernc.org/sqlite":                "SQLite is the server's database",
	"github.com/benbjohnson/litestream": "replication is the server's",
	"github.com/pressly/goose":          "migrations are the server's",
	"github.com/pulumi/":                "Pulumi is the converge engine's",
	"github.com/aws/":                   "the AWS SDK is the replica's and the log store's",
	"github.com/digitalocean/godo":      "provider calls are the server's",
}

// TestDeps: the CLI (the operator's commands, smoke among them) links no
// server package and none of serverModules, for each platform the release
// builds (docs/operations.md, "Releases"), in the manner of
// cmd/chalupa-agent's TestDeps: a binary of cli alone runs on a laptop
// without the server.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	has := func(dep, prefix string) bool {
		return dep == prefix || strings.HasPrefix(dep, prefix+"/") || (strings.HasSuffix(prefix, "/") && strings.HasPrefix(dep, prefix))
	}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run("linux/"+arch, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/cli")
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 100 {
				t.Fatalf("go list listed %d packages", len(deps))
			}
			for _, dep := range deps {
				if dep == module || strings.HasPrefix(dep, module+"/") {
					ok := false
					for _, p := range ownDeps {
						ok = ok || dep == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(dep, p))
					}
					if !ok {
						t.Errorf("%s is linked by the CLI: only its own package, mcpserver and the leaves may be", dep)
					}
					continue
				}
				for prefix, why := range serverModules {
					if has(dep, prefix) {
						t.Errorf("%s is linked by the CLI: %s", dep, why)
					}
				}
			}
		})
	}
}
