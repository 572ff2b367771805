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

// readmeBuildLine is the form of a build line of the build block:
// `go build -o DIR/NAME PACKAGE`, an optional comment after it.
var readmeBuildLine = regexp.MustCompile(`^go build -o ([A-Za-z0-9_-]+)/([A-Za-z0-9_-]+) (\.|\./[A-Za-z0-9_/-]+)(?:\s+#.*)?$`)

// readmeDirLine is the form of the build block's other lines, `mkdir -p
// DIR` first and `cd DIR` last: the session's directory.
var readmeDirLine = regexp.MustCompile(`^(mkdir -p|cd) ([A-Za-z0-9_-]+)(?:\s+#.*)?$`)

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

// readmeBuild runs each build line of the README's build block in the
// module root with CGO_ENABLED=0 (the README's setting), writing NAME into
// dir, which stands for the block's DIR, rather than into the checkout,
// and returns the names built. The block must be `mkdir -p DIR`, the
// builds into DIR, then `cd DIR`, with DIR git-ignored: everything the
// first session writes lands there, out of `git status`, where no `git
// add -A` commits a secret and contrib/release.sh does not refuse the tree
// (docs/operations.md, "Releases"). A line of another form fails the test:
// the block is what a reader pastes.
func readmeBuild(t *testing.T, root, dir, block string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(block), "\n")
	first := readmeDirLine.FindStringSubmatch(strings.TrimSpace(lines[0]))
	last := readmeDirLine.FindStringSubmatch(strings.TrimSpace(lines[len(lines)-1]))
	if first == nil || first[1] != "mkdir -p" || last == nil || last[1] != "cd" || first[2] != last[2] {
		t.Fatalf("the README's build block must start with `mkdir -p DIR` and end with `cd DIR`; it has %q … %q", lines[0], lines[len(lines)-1])
	}
	session := first[2]
	ignored := exec.Command("git", "check-ignore", "-q", session+"/console-password")
	ignored.Dir = root
	if err := ignored.Run(); err != nil {
		t.Fatalf("the first session's directory %s/ is not git-ignored (git check-ignore: %v): its files would be one `git add -A` from a commit", session, err)
	}
	var names []string
	for _, line := range lines[1 : len(lines)-1] {
		m := readmeBuildLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || m[1] != session {
			t.Fatalf("the README's build block has %q; want `go build -o %s/NAME PACKAGE` lines between mkdir and cd", line, session)
		}
		ctx, cancel := context.WithTimeout(context.Background(), readmeBuildTimeout)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, m[2]), m[3])
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		names = append(names, m[2])
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

// readmeCloudInitMarker precedes the README's block that renders the
// agent's cloud-init for a hand-made droplet from a release's
// checksums.txt (docs/operations.md, "Agent install").
const readmeCloudInitMarker = "<!-- readme-test: cloud-init -->"

// TestReadmeCloudInit runs the README's cloud-init block as written, with
// sh -e, in a directory standing for the first session's try/: ./chalupa
// is the full binary, and ../dist/v0.1.0/checksums.txt is the one
// contrib/release.sh writes (its archives' names, digests made up here;
// the release tests at the root check release.sh itself). The block must
// write the user data with the digests it read from checksums.txt.
func TestReadmeCloudInit(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(proctest.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script := readmeBlock(t, string(raw), readmeCloudInitMarker)
	bin := proctest.BuildBinary(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "try")
	sums := filepath.Join(parent, "dist", "v0.1.0", "checksums.txt")
	for _, d := range []string{dir, filepath.Dir(sums)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(bin, filepath.Join(dir, "chalupa")); err != nil {
		t.Fatal(err)
	}
	amd, arm := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	var b strings.Builder
	for _, name := range []string{"chalupa", "chalupa-cli"} {
		for _, arch := range []string{"amd64", "arm64"} {
			b.WriteString(strings.Repeat("0", 64) + "  " + name + "_v0.1.0_linux_" + arch + ".tar.gz\n")
		}
	}
	b.WriteString(amd + "  chalupa-agent_v0.1.0_linux_amd64.tar.gz\n" + arm + "  chalupa-agent_v0.1.0_linux_arm64.tar.gz\n")
	if err := os.WriteFile(sums, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's cloud-init block failed: %v\n%s", err, out)
	}
	ud, err := os.ReadFile(filepath.Join(dir, "cloud-init.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#cloud-config", amd, arm, "CHALUPA_AGENT_ENV=demo-harbor", "v0.1.0"} {
		if !strings.Contains(string(ud), want) {
			t.Errorf("the rendered user data has no %q:\n%s", want, ud)
		}
	}
}
