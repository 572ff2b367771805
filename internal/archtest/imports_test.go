package archtest

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// module is the module path; patterns below are relative to it.
const module = proctest.ModulePath

// layer is one floor of docs/architecture.md, "Dependency direction".
type layer struct {
	name string
	// pkgs are paths relative to the module root: "." is the root, "x" is
	// package x alone, "x/..." is x and every package under it.
	pkgs []string
	// peers: the layer's packages may import each other.
	peers bool
	// leavesOnly: the layer's packages import leaves and peers only; they
	// speak to the server over the wire, never by linking it.
	leavesOnly bool
}

// layers, top to bottom. A package may import any package of a lower layer
// (unless its layer is leavesOnly), a package of its own layer when the
// layer has peers, and any leaf. A package of the module in no layer and no
// leaf fails the test until it is placed.
var layers = []layer{
	// The binaries, the tools beside them and the end-to-end tests: they
	// wire everything.
	{name: "main", pkgs: []string{".", "cmd/...", "e2e/...", "contrib/..."}, peers: true},
	// The server's commands (serve, migrate, rollback, rewrap, config),
	// which main wires into cli.Run.
	{name: "server commands", pkgs: []string{"cli/servercmd/..."}},
	// Clients of the server's HTTP surfaces: the operator's commands (cli,
	// and cli/light with cmd/chalupa, the light binary that forwards the
	// server's commands to chalupad), the fleet agent and its binary, and
	// the MCP server (which calls the admin API's typed client). They link
	// no server package.
	{name: "clients", pkgs: []string{"cli", "cli/light", "cmd/chalupa", "agent/...", "cmd/chalupa-agent", "mcpserver/..."}, peers: true, leavesOnly: true},
	// Assembles daemon.Apps in process for tests.
	{name: "in-process harness", pkgs: []string{"daemon/daemontest"}},
	{name: "daemon", pkgs: []string{"daemon"}},
	// The domains the daemon wires; they never import daemon.
	{name: "domain", pkgs: []string{"alerts/...", "ingest/...", "reaper/...", "jobs/...", "boxes/...", "pulumiexec/...", "console/...", "digitalocean/..."}, peers: true},
	// storage imports no domain package.
	{name: "storage", pkgs: []string{"storage/..."}, peers: true},
	{name: "schema", pkgs: []string{"schema/..."}},
}

// leaves import no server package, only other leaves; every package may
// import them. They are matched before the layers: the most specific
// pattern wins, and leaves win ties.
var leaves = []string{"adminapi/...", "protocol", "internal/..."}

// allowed lists today's imports against the direction, each with its
// reason. The test fails when one of them is gone, so the list only
// shrinks: delete the entry with the import.
var allowed = []struct{ from, to, reason string }{}

// rel returns path relative to the module ("." for the root).
func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// matches reports whether package p (relative) is named by pattern.
func matches(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

// place returns p's layer index, or -1 for a leaf; ok is false when p is in
// neither. The most specific pattern wins (cmd/chalupa-agent over cmd/...);
// leaves win ties.
func place(p string) (idx int, ok bool) {
	best := -1
	consider := func(pattern string, i int) {
		if !matches(pattern, p) {
			return
		}
		n := len(strings.TrimSuffix(pattern, "/...")) * 2
		if !strings.HasSuffix(pattern, "/...") {
			n++ // "x" names x more exactly than "x/..."
		}
		if n > best {
			best, idx, ok = n, i, true
		}
	}
	for _, pat := range leaves {
		consider(pat, -1)
	}
	for i, l := range layers {
		for _, pat := range l.pkgs {
			consider(pat, i)
		}
	}
	return idx, ok
}

// violation says why from (relative) may not import to, or "" when it may.
// Both must be placed.
func violation(from, to string) string {
	fi, _ := place(from)
	ti, _ := place(to)
	switch {
	case ti == -1:
		return ""
	case fi == -1:
		return "a leaf imports a server package"
	case layers[fi].leavesOnly && ti != fi:
		return fmt.Sprintf("the %s layer imports only leaves, and %s is in %s", layers[fi].name, to, layers[ti].name)
	case ti > fi, ti == fi && layers[fi].peers:
		return ""
	case ti == fi:
		return fmt.Sprintf("packages of the %s layer do not import each other", layers[fi].name)
	default:
		return fmt.Sprintf("%s (%s) is above %s (%s): the import points up", to, layers[ti].name, from, layers[fi].name)
	}
}

// goList runs `go list args...` in the repository root and returns its
// standard output. Errors fail the test.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = proctest.RepoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return string(out)
}

// imports returns the module's non-test imports of module packages, from
// and to relative to the module, one edge per import.
func imports(t *testing.T) [][2]string {
	t.Helper()
	var edges [][2]string
	for line := range strings.Lines(goList(t, "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...")) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				edges = append(edges, [2]string{rel(f[0]), rel(imp)})
			}
		}
	}
	return edges
}

// TestImportDirection: every non-test import between the module's packages
// points down the layers of docs/architecture.md, "Dependency direction",
// or is in allowed with its reason; every allowed import still exists and
// still points the wrong way; every package is placed.
func TestImportDirection(t *testing.T) {
	edges := imports(t)
	if len(edges) == 0 {
		t.Fatal("go list reported no imports between the module's packages")
	}
	pkgs := map[string]bool{}
	for p := range strings.Lines(goList(t, module+"/...")) {
		pkgs[rel(strings.TrimSpace(p))] = true
	}
	for p := range pkgs {
		if _, ok := place(p); !ok {
			t.Errorf("package %s is in no layer and is no leaf: place it in layers or leaves (internal/archtest/imports_test.go) and docs/architecture.md", p)
		}
	}
	if t.Failed() {
		return
	}
	seen := map[[2]string]bool{}
	for _, e := range edges {
		why := violation(e[0], e[1])
		if why == "" {
			continue
		}
		if slices.ContainsFunc(allowed, func(a struct{ from, to, reason string }) bool { return a.from == e[0] && a.to == e[1] }) {
			seen[e] = true
			continue
		}
		t.Errorf("%s imports %s: %s (docs/architecture.md, \"Dependency direction\")", e[0], e[1], why)
	}
	for _, a := range allowed {
		if !seen[[2]string{a.from, a.to}] {
			t.Errorf("allowed lists %s → %s, which is gone or no longer points the wrong way: delete the entry", a.from, a.to)
		}
	}
}

// TestImportRules checks the rules themselves on made-up imports, so a
// mistake in the table or in violation cannot let everything through.
func TestImportRules(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		ok       bool
	}{
		{".", "daemon", true},
		{"cli", "daemon", false},
		{"cli/servercmd", "daemon", true},
		{"cli/servercmd", "cli", true},
		{"cli", "cli/servercmd", false},
		{"cli", "mcpserver", true},
		{"daemon", "cli", false},
		{"daemon", ".", false},
		{"daemon", "ingest", true},
		{"ingest", "daemon", false},
		{"reaper", "daemon", false},
		{"console", "jobs", true},
		{"ingest", "storage", true},
		{"storage", "ingest", false},
		{"storage", "reaper", false},
		{"storage", "schema", true},
		{"schema", "storage", false},
		{"storage/storagetest", "storage", true},
		{"daemon/daemontest", "daemon", true},
		{"daemon", "daemon/daemontest", false},
		{"adminapi", "storage", false},
		{"protocol", "ingest", false},
		{"internal/proctest", "daemon", false},
		{"internal/proctest", "adminapi", true},
		{"boxes/agentrelease", "daemon", false},
		{"ingest", "adminapi", true},
		{"ingest", "protocol", true},
		{"daemon", "boxes/agentrelease", true},
		{"agent", "agent/logship", true},
		{"agent", "protocol", true},
		{"agent", "storage", false},
		{"cmd/chalupa-agent", "agent", true},
		{"cmd/chalupa-agent", "daemon", false},
		{"mcpserver", "adminapi", true},
		{"mcpserver", "daemon", false},
		{"daemon", "agent", false},
		{"e2e", "daemon", true},
		{"contrib/load", "storage", true},
	} {
		t.Run(tc.from+"→"+tc.to, func(t *testing.T) {
			for _, p := range []string{tc.from, tc.to} {
				if _, ok := place(p); !ok {
					t.Fatalf("%s is in no layer", p)
				}
			}
			why := violation(tc.from, tc.to)
			if (why == "") != tc.ok {
				t.Errorf("violation(%s, %s) = %q; want allowed: %v", tc.from, tc.to, why, tc.ok)
			}
		})
	}
}

// pulumiDeps returns the Pulumi modules among the dependencies of pkg's
// test binaries (`go list -deps -test`).
func pulumiDeps(t *testing.T, pkg string) []string {
	t.Helper()
	var found []string
	for m := range strings.Lines(goList(t, "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}", pkg)) {
		if m = strings.TrimSpace(m); strings.HasPrefix(m, "github.com/pulumi/") && !slices.Contains(found, m) {
			found = append(found, m)
		}
	}
	return found
}

// TestStorageTestsLinkNoPulumi: storage's tests link no Pulumi module
// (docs/architecture.md, "Dependency direction": internal/proctest imports
// no server package so that storage's tests link neither the daemon nor
// Pulumi). pulumiexec, which does link Pulumi, proves the check sees it.
func TestStorageTestsLinkNoPulumi(t *testing.T) {
	if got := pulumiDeps(t, "./storage/"); len(got) > 0 {
		t.Errorf("storage's tests link Pulumi modules %v; follow `go list -deps -test ./storage/` to the import that brings them", got)
	}
	if got := pulumiDeps(t, "./pulumiexec/"); len(got) == 0 {
		t.Error("the check found no Pulumi module in pulumiexec's test dependencies: it cannot see one in storage's either")
	}
}
