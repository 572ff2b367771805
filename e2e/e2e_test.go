// Package e2e holds chalupa's end-to-end tests: each builds the binary (or a
// release) and runs it as a process against real tools — versitygw, the
// litestream CLI, pulumi with its test provider — with only DigitalOcean
// simulated (digitalocean/dofake). They are the full run's own lane
// (`contrib/test.sh`); the fast lane leaves this package out.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/chalupa-run/chalupa/protocol"
)

// exitUsage is the exit status the binary gives a command-line mistake
// (docs/operations.md, "Exit codes").
const exitUsage = 2

// defaultParallel is how many of this package's parallel tests run at once
// when go test is given no -parallel (whose own default is GOMAXPROCS, 2 on
// CI's machine). The tests here mostly wait on other processes — a daemon's
// loops, an agent's cadence, the reaper's deadline, pulumi and its plugins —
// so a CPU apiece would leave the machine idle through most of the lane.
// Eight keeps the CPU-bound steps (go build, contrib/release.sh, Chromium)
// overlapping at most a few at a time; every wait is bounded by
// internal/testwait for a loaded machine. An explicit -parallel wins.
const defaultParallel = 8

// TestMain runs the tests from the module root, so they name the
// repository's files (README.md, contrib/…, docs/…) by their paths there,
// defaultParallel at a time unless -parallel says otherwise.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(defaultParallel)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
	}
	if err := os.Chdir(".."); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if _, err := os.Stat("go.mod"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: the parent directory is not the module root:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// agentKeyFile writes a fresh ingest key (0600) into a new temporary dir for
// the agent tests and returns the dir and the file's path.
func agentKeyFile(t *testing.T) (dir, key string) {
	t.Helper()
	dir = t.TempDir()
	key = filepath.Join(dir, "ingest.key")
	if err := os.WriteFile(key, []byte(protocol.NewKeyMaterial()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, key
}
