package proctest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ModulePath is the module whose root RepoRoot looks for.
const ModulePath = "github.com/chalupa-run/chalupa"

// InstallCommand is what installs the test tools, relative to the repository root.
const InstallCommand = "contrib/install-test-tools.sh"

// buildTimeout bounds `go build` of the binary (a cold build on 2 cores
// takes well under a minute; the bound only stops a wedged toolchain).
const buildTimeout = 5 * time.Minute

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error

	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// RepoRoot returns the absolute path of the repository: the nearest directory
// at or above the working directory holding the go.mod of ModulePath.
// Errors (no such directory) fail the test.
func RepoRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() { rootDir, rootErr = findRoot() })
	if rootErr != nil {
		t.Fatalf("proctest: %v", rootErr)
	}
	return rootDir
}

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module "+ModulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s at or above the working directory", ModulePath)
		}
		dir = parent
	}
}

// ToolPath returns the absolute path of tool name (e.g. "litestream",
// "versitygw") in <repo>/.tools/bin. When it is missing the test is skipped
// with the install command, or fails when the environment has CI=true (a
// missing tool must not turn a CI run green). Under FastLaneFlag it skips
// the test for the tools whose runs belong to the full run (litestream,
// pulumi) before looking.
func ToolPath(t testing.TB, name string) string {
	t.Helper()
	if what, ok := fullRunTools[name]; ok {
		FullRunOnly(t, what)
	}
	p := filepath.Join(RepoRoot(t), ".tools", "bin", name)
	fi, err := os.Stat(p) // follows the link into the tool cache
	if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return p
	}
	msg := fmt.Sprintf("test tool %s is not installed at %s; run %s", name, p, InstallCommand)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a missing tool fails the run)", msg)
	}
	t.Skip(msg)
	return ""
}

// BuildBinary builds the full binary (what a release ships as chalupad)
// from the repository root with CGO_ENABLED=0, once per test process, and
// returns its absolute path; the file is named chalupa, as the tests run
// it. The binary lives in a directory made by os.MkdirTemp (shared by every test of
// the process, so not t.TempDir); directories left by earlier runs more than
// an hour old are removed. A failed build fails every caller with the
// compiler's output. Under FastLaneFlag it skips the test instead.
func BuildBinary(t testing.TB) string {
	t.Helper()
	FullRunOnly(t, "builds the chalupa binary")
	root := RepoRoot(t)
	buildOnce.Do(func() { buildPath, buildErr = build(root) })
	if buildErr != nil {
		t.Fatalf("proctest: %v", buildErr)
	}
	return buildPath
}

// withheldBuilds caches BuildWithheld's binaries, by the number withheld.
var withheldBuilds struct {
	sync.Mutex
	path map[int]string
}

// BuildWithheld builds the binary like BuildBinary but leaving out its
// newest n migrations (the test-only build setting
// storage.withheldMigrations): a stand-in for the previous release, for
// rollback tests. Built once per n per test process. Under FastLaneFlag it
// skips the test instead.
func BuildWithheld(t testing.TB, n int) string {
	t.Helper()
	FullRunOnly(t, "builds the chalupa binary")
	root := RepoRoot(t)
	withheldBuilds.Lock()
	defer withheldBuilds.Unlock()
	if p, ok := withheldBuilds.path[n]; ok {
		return p
	}
	p, err := build(root, "-ldflags", fmt.Sprintf("-X %s/storage.withheldMigrations=%d", ModulePath, n))
	if err != nil {
		t.Fatalf("proctest: %v", err)
	}
	if withheldBuilds.path == nil {
		withheldBuilds.path = map[int]string{}
	}
	withheldBuilds.path[n] = p
	return p
}

const binDirPrefix = "chalupa-testbin-"

func build(root string, flags ...string) (string, error) {
	pruneOldBinDirs()
	dir, err := os.MkdirTemp("", binDirPrefix)
	if err != nil {
		return "", fmt.Errorf("make binary dir: %w", err)
	}
	out := filepath.Join(dir, "chalupa")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build", "-o", out}, flags...), ".")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go build of %s failed: %v\n%s", ModulePath, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// binDirMaxAge is how old a binary dir of an earlier test process must be
// before pruneOldBinDirs removes it: beyond any run of the suite (test.sh
// uses -timeout 20m), short enough that a day of runs does not fill /tmp
// with 40 MB binaries.
const binDirMaxAge = time.Hour

// pruneOldBinDirs removes binary dirs of earlier test processes. Nothing
// removes a process's own dir when it exits (a test binary has no hook for
// that without TestMain).
func pruneOldBinDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err == nil && fi.IsDir() && time.Since(fi.ModTime()) > binDirMaxAge {
			_ = os.RemoveAll(m)
		}
	}
}
