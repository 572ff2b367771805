package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// module is this module's path.
const module = "github.com/chalupa-run/chalupa"

// badDeps are the packages the light binary may not link, by import path
// prefix, each with why: it exists so that every command the operator
// types starts without the server's packages (docs/operations.md,
// "Footprint"); the server's commands forward to chalupad.
var badDeps = map[string]string{
	"modernc.org/sqlite":                "SQLite is the server's database",
	"github.com/benbjohnson/litestream": "replication is the server's",
	"github.com/pressly/goose":          "migrations are the server's",
	"github.com/pulumi/":                "Pulumi is the converge engine's",
	"github.com/aws/":                   "the AWS SDK is the replica's and the log store's",
	"github.com/digitalocean/godo":      "provider calls are the server's",
	"github.com/prometheus/":            "metrics are the server's",
	"google.golang.org/grpc":            "gRPC comes with Pulumi",
	module + "/cli/servercmd":           "the server's commands run in chalupad (forwarded)",
	module + "/storage":                 "the server's database",
	module + "/schema":                  "the server's migrations",
	module + "/daemon":                  "the server's wiring",
	module + "/reaper":                  "the server's reaper",
	module + "/jobs":                    "the server's job queue",
	module + "/pulumiexec":              "the server's Pulumi engine",
	module + "/console":                 "the server's web console",
	module + "/digitalocean":            "the server's provider client",
	module + "/boxes":                   "the server's converge intent",
	module + "/ingest":                  "the server's ingest (only ingest/signer and ingest/wire are leaves)",
}

// allowed are the exceptions to the module + "/ingest" prefix: the leaves.
var allowed = map[string]bool{module + "/ingest/signer": true, module + "/ingest/wire": true}

// TestDeps: the light binary links none of badDeps, for each platform the
// release builds (docs/operations.md, "Releases"), in the manner of
// Tailscale's cmd/tailscale/deps_test.go.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run("linux/"+arch, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/cmd/chalupa")
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 10 {
				t.Fatalf("go list listed %d packages", len(deps))
			}
			for _, dep := range deps {
				if allowed[dep] {
					continue
				}
				for prefix, why := range badDeps {
					if dep == prefix || strings.HasPrefix(dep, prefix+"/") || (strings.HasSuffix(prefix, "/") && strings.HasPrefix(dep, prefix)) {
						t.Errorf("%s is linked by the light binary: %s", dep, why)
					}
				}
			}
		})
	}
}
