package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// terminalQueriers are modules whose package init writes a query to the
// terminal and waits for its answer, each with where it comes from: none
// may be linked into chalupa or chalupa-agent except as the stand-in named
// (docs/operations.md, "Footprint": no command touches the terminal beyond
// its own input and output).
var terminalQueriers = map[string]struct{ why, standIn string }{
	"github.com/charmbracelet/bubbletea": {
		why:     "Bubble Tea v1's init asks Lip Gloss for the background colour (an OSC 11 query, up to 5 s), linked through the Pulumi SDK's cmdutil",
		standIn: "./internal/teastub",
	},
}

// TestNoTerminalQueryLinked: the packages of chalupad (.), chalupa and chalupa-agent,
// for each platform the release builds, link no terminalQueriers module
// other than its stand-in, in the manner of cmd/chalupa-agent's TestDeps.
func TestNoTerminalQueryLinked(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run("linux/"+arch, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}} {{with .Replace}}{{.Path}}{{end}}{{end}}", ".", "./cmd/chalupa", "./cmd/chalupa-agent")
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) < 100 {
				t.Fatalf("go list listed %d packages", len(lines))
			}
			for _, l := range lines {
				f := strings.Fields(l)
				if len(f) < 2 {
					continue // the standard library
				}
				q, ok := terminalQueriers[f[1]]
				if !ok {
					continue
				}
				if len(f) < 3 || f[2] != q.standIn {
					t.Errorf("%s is linked from %s, not the stand-in %s: %s", f[0], f[1], q.standIn, q.why)
				}
			}
		})
	}
}
