package servercmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// cloudInitRelease is a well-formed agent release configuration: the four
// CHALUPA_AGENT_* values `config cloud-init` renders from.
func cloudInitRelease() map[string]string {
	return map[string]string{
		agentrelease.EnvVersion:     "v1.4.2",
		agentrelease.EnvReleaseURL:  "https://releases.example/chalupa/v1.4.2",
		agentrelease.EnvSHA256AMD64: strings.Repeat("a1", 32),
		agentrelease.EnvSHA256ARM64: strings.Repeat("b2", 32),
	}
}

// documentedCloudInit matches a `chalupa config cloud-init …` code span of
// the docs, which may wrap across lines.
var documentedCloudInit = regexp.MustCompile("`(chalupa config\\s+cloud-init[^`]*)`")

// cloudInitPlaceholders stand in for the docs' placeholder words.
var cloudInitPlaceholders = map[string]string{"SLUG": "demo-harbor", "ORIGIN": "https://chalupa.example", "S": "s-1vcpu-1gb", "N": "30"}

// TestConfigCloudInitDocumentedLines runs every `chalupa config
// cloud-init` line the README, docs/operations.md and the release notes
// show, as written (placeholders filled in, optional flags given), with a
// configured release and no CHALUPA_ORIGIN: each prints the user data
// (docs/operations.md, "Agent install").
func TestConfigCloudInitDocumentedLines(t *testing.T) {
	t.Parallel()
	root := proctest.RepoRoot(t)
	n := 0
	for _, doc := range []string{"README.md", "docs/operations.md", "docs/release-notes.md"} {
		raw, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range documentedCloudInit.FindAllStringSubmatch(string(raw), -1) {
			line := strings.Join(strings.Fields(m[1]), " ")
			if line == "chalupa config cloud-init" {
				continue // the command named, not a line to run
			}
			n++
			t.Run(doc+": "+line, func(t *testing.T) {
				var args []string
				for _, w := range strings.Fields(strings.NewReplacer("[", "", "]", "").Replace(line))[1:] {
					if v, ok := cloudInitPlaceholders[w]; ok {
						w = v
					}
					args = append(args, w)
				}
				out, errOut, code := runStreams(cloudInitRelease(), "", args...)
				if code != 0 || !strings.HasPrefix(out, "#cloud-config\n") {
					t.Fatalf("%q: exit %d, want 0 and the user data\nstderr:\n%s", args, code, errOut)
				}
			})
		}
	}
	if n < 4 {
		t.Fatalf("%d documented `chalupa config cloud-init` lines found; the README, docs/operations.md (twice) and the release notes show one each", n)
	}
}

// TestConfigCloudInitMissingURLNamesOrigin: without --url and
// CHALUPA_ORIGIN, the usage error names both, not the flag alone.
func TestConfigCloudInitMissingURLNamesOrigin(t *testing.T) {
	t.Parallel()
	_, errOut, code := runStreams(cloudInitRelease(), "", "config", "cloud-init", "--env", "demo-harbor")
	if code != 2 || !strings.Contains(errOut, "--url") || !strings.Contains(errOut, "CHALUPA_ORIGIN") {
		t.Fatalf("exit %d, want 2 naming --url and CHALUPA_ORIGIN:\n%s", code, errOut)
	}
}
