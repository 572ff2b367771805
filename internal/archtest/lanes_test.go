package archtest

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// goTest is one `go test` command of a lane's plan.
type goTest struct {
	flags []string // every argument that is not a package, in order
	pkgs  []string
}

// plan runs `contrib/test.sh args... --plan` and parses the go test
// commands it prints. Errors fail the test.
func plan(t *testing.T, args ...string) []goTest {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"contrib/test.sh"}, append(args, "--plan")...)...)
	cmd.Dir = proctest.RepoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("contrib/test.sh %v --plan: %v\n%s", args, err, out)
	}
	var cmds []goTest
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "go" || f[1] != "test" {
			t.Fatalf("contrib/test.sh %v --plan printed %q; want go test commands", args, line)
		}
		var c goTest
		for _, a := range f[2:] {
			if a == module || strings.HasPrefix(a, module+"/") {
				c.pkgs = append(c.pkgs, a)
			} else {
				c.flags = append(c.flags, a)
			}
		}
		if len(c.pkgs) == 0 {
			t.Fatalf("contrib/test.sh %v --plan printed %q, which names no package of %s", args, line, module)
		}
		cmds = append(cmds, c)
	}
	if len(cmds) == 0 {
		t.Fatalf("contrib/test.sh %v --plan printed no go test command", args)
	}
	return cmds
}

// inE2E reports whether pkg is an end-to-end package (under e2e/), which
// only the full run runs.
func inE2E(pkg string) bool { return matches("e2e/...", rel(pkg)) }

// TestLanesRunEveryPackage: the full run of contrib/test.sh runs every
// package of `go list ./...` exactly once and never with -short (so no
// test's full-run work is skipped, docs/architecture.md, "Tests"); the fast
// lane runs every package outside e2e/ under -race and -short; .ci/run
// calls the full run. A package added anywhere is in both lanes, or this
// fails.
func TestLanesRunEveryPackage(t *testing.T) {
	var all []string
	for p := range strings.Lines(goList(t, "./...")) {
		all = append(all, strings.TrimSpace(p))
	}

	t.Run("full", func(t *testing.T) {
		count := map[string]int{}
		for _, c := range plan(t) {
			if slices.Contains(c.flags, proctest.FastLaneFlag) {
				t.Errorf("the full run passes %s to go test of %d packages (%s …): their full-run work would skip", proctest.FastLaneFlag, len(c.pkgs), c.pkgs[0])
			}
			for _, p := range c.pkgs {
				count[p]++
			}
		}
		for _, p := range all {
			if count[p] != 1 {
				t.Errorf("the full run runs %s %d times; want once", p, count[p])
			}
		}
		for _, p := range slices.Sorted(maps.Keys(count)) {
			if !slices.Contains(all, p) {
				t.Errorf("the full run names %s, which go list ./... does not", p)
			}
		}
	})

	t.Run("fast", func(t *testing.T) {
		count := map[string]int{}
		for _, c := range plan(t, "--fast") {
			for _, flag := range []string{"-race", proctest.FastLaneFlag} {
				if !slices.Contains(c.flags, flag) {
					t.Errorf("the fast lane runs go test of %d packages without %s", len(c.pkgs), flag)
				}
			}
			for _, p := range c.pkgs {
				count[p]++
			}
		}
		for _, p := range all {
			want := 1
			if inE2E(p) {
				want = 0
			}
			if count[p] != want {
				t.Errorf("the fast lane runs %s %d times; want %d", p, count[p], want)
			}
		}
	})

	t.Run("ci", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(proctest.RepoRoot(t), ".ci", "run"))
		if err != nil {
			t.Fatal(err)
		}
		var calls []string
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") && slices.Contains(f, "contrib/test.sh") {
				calls = append(calls, strings.TrimSpace(line))
			}
		}
		if len(calls) != 1 || strings.Contains(calls[0], "--") {
			t.Errorf(".ci/run calls contrib/test.sh as %q; want one call of the full run, without flags", calls)
		}
	})
}
