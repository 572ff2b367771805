package daemon

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/operations.md's Configuration table and internal/servehelp/environment.txt from the variable table")

// repoFile is a file of the repository, from the daemon package's directory.
func repoFile(parts ...string) string { return filepath.Join(append([]string{".."}, parts...)...) }

// TestConfigDocs: docs/operations.md's "Configuration" table is the one the
// variable table writes (configDocsTable), byte for byte. -update rewrites
// it; otherwise the failure prints the table to paste.
func TestConfigDocs(t *testing.T) {
	path := repoFile("docs", "operations.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	const header = "| variable | default | refused when | why |\n"
	start := strings.Index(doc, header)
	if start < 0 {
		t.Fatalf("%s has no Configuration table (header %q)", path, header)
	}
	end := start + strings.Index(doc[start:], "\n\n") + 1
	got, want := doc[start:end], configDocsTable()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:start]+want+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's Configuration table differs from the variable table (daemon/config_vars.go); run go test ./daemon -run TestConfigDocs -update, or paste:\n%s", path, want)
}
