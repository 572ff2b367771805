package daemon

import (
	"os"
	"testing"
)

// TestServeHelpEnvironment: the environment list serve --help shows
// (internal/servehelp/environment.txt) is the one the variable table
// writes. -update rewrites it.
func TestServeHelpEnvironment(t *testing.T) {
	path := repoFile("internal", "servehelp", "environment.txt")
	got, err := os.ReadFile(path)
	if err != nil && !*update {
		t.Fatal(err)
	}
	want := serveEnvironmentHelp()
	if string(got) == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s differs from the variable table (daemon/config_vars.go); run go test ./daemon -run TestServeHelpEnvironment -update, or paste:\n%s", path, want)
}
