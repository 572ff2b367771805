package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/cli/light"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// readmeMarker precedes each README code block TestReadmeFirstSession runs.
const readmeMarker = "<!-- readme-test: first-session -->"

// readmeBuildMarker precedes the README's block that builds the binaries
// the first session runs: chalupad from the module root and the light
// chalupa from cmd/chalupa (docs/operations.md, "Releases").
const readmeBuildMarker = "<!-- readme-test: build -->"

// readmeBuildLine is the one form a line of the build block may take:
// `go build -o NAME PACKAGE`, an optional comment after it.
var readmeBuildLine = regexp.MustCompile(`^go build -o ([A-Za-z0-9_-]+) (\.|\./[A-Za-z0-9_/-]+)(?:\s+#.*)?$`)

// readmeRunTimeout bounds the whole block: three heartbeats 5 s apart,
// the smoke list, and serve's start and stop.
const readmeRunTimeout = 3 * time.Minute

// readmeBuildTimeout bounds one `go build` of the build block (a cold
// build of chalupad on 2 cores takes well under a minute; the bound only
// stops a wedged toolchain), as proctest bounds its own build.
const readmeBuildTimeout = 5 * time.Minute

// TestReadmeFirstSession builds the binaries with the README's build
// block (each `go build -o NAME PACKAGE` run in the module root, its
// output put in a fresh directory instead of the checkout) and runs the
// README's offline "A first session" block, as written, with sh -e in
// that directory: `./chalupa serve` there is the light binary forwarding
// to the `./chalupad` beside it. The one change is the port: serve gets a
// free one through CHALUPA_LISTEN (so the test runs beside others), and
// the literal 127.0.0.1:8080 in the block is replaced by it; every other
// command finds the daemon through the address serve records
// (docs/operations.md, "Embedded default").
func TestReadmeFirstSession(t *testing.T) {
	t.Parallel()
	proctest.FullRunOnly(t, "builds the chalupa and chalupad binaries")
	root := proctest.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script := readmeBlock(t, string(raw), readmeMarker)
	dir := t.TempDir()
	built := readmeBuild(t, root, dir, readmeBlock(t, string(raw), readmeBuildMarker))
	for _, name := range []string{"chalupa", light.ServerBinary} {
		if !slices.Contains(built, name) {
			t.Fatalf("the README's build block builds %q; the first session needs %q", built, name)
		}
	}
	addr := proctest.FreeAddr(t)
	script = strings.ReplaceAll(script, "127.0.0.1:8080", addr)
	ctx, cancel := context.WithTimeout(context.Background(), readmeRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CHALUPA_LISTEN=" + addr, "CHALUPA_MIN_FREE_BYTES=0"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
		t.Fatalf("the README's first session failed: %v\n%s\n--- serve.log:\n%s", err, out, log)
	}
	for _, want := range []string{"demo-harbor", "KEYS ACTIVE/ROTATING/REVOKED", "adminListFleet", "CHECK", "gpu-1", "reaper"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), " FAIL ") {
		t.Errorf("a smoke row failed:\n%s", out)
	}
}

// readmeBuild runs each line of the README's build block in the module
// root with CGO_ENABLED=0, writing NAME into dir rather than into the
// checkout, and returns the names built. A line of another form fails the
// test: the block is what a reader pastes, so it holds builds only.
func readmeBuild(t *testing.T, root, dir, block string) []string {
	t.Helper()
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		m := readmeBuildLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			t.Fatalf("the README's build block has %q; want `go build -o NAME PACKAGE` lines only", line)
		}
		ctx, cancel := context.WithTimeout(context.Background(), readmeBuildTimeout)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, m[1]), m[2])
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		names = append(names, m[1])
	}
	return names
}

// readmeBlock is the code of the ```sh blocks that follow marker, joined;
// the test fails when there is none.
func readmeBlock(t *testing.T, readme, marker string) string {
	t.Helper()
	var b strings.Builder
	for rest := readme; ; {
		i := strings.Index(rest, marker)
		if i < 0 {
			break
		}
		rest = rest[i+len(marker):]
		open := strings.Index(rest, "```sh\n")
		if open < 0 {
			t.Fatal("a readme-test marker without a ```sh block after it")
		}
		rest = rest[open+len("```sh\n"):]
		end := strings.Index(rest, "\n```")
		if end < 0 {
			t.Fatal("an unterminated ```sh block")
		}
		b.WriteString(rest[:end+1])
	}
	if b.Len() == 0 {
		t.Fatalf("README.md has no %s block", marker)
	}
	return b.String()
}
