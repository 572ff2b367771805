package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// releaseModule lays out, in a fresh git repository, a module with the
// three main packages contrib/release.sh builds (., ./cmd/chalupa,
// ./cmd/chalupa-agent; each an empty main) and this checkout's
// contrib/release.sh, commits it all with .gitignore ignoring "ignored/",
// and returns the repository's directory.
func releaseModule(t *testing.T) string {
	t.Helper()
	script, err := os.ReadFile("contrib/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                      "module example.com/rel\n\ngo 1.22\n",
		"main.go":                     "package main\n\nfunc main() {}\n",
		"cmd/chalupa/main.go":         "package main\n\nfunc main() {}\n",
		"cmd/chalupa-agent/main.go":   "package main\n\nfunc main() {}\n",
		".gitignore":                  "/ignored/\n/dist/\n",
		"contrib/release.sh":          string(script),
		"notes/tracked-and-edited.md": "committed\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "release test"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}

// runRelease runs contrib/release.sh v0.0.1 in dir for linux/amd64 only
// and returns its stderr and error.
func runRelease(t *testing.T, dir string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "contrib/release.sh", "v0.0.1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CHALUPA_RELEASE_ARCHES=amd64")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

// TestReleaseRefusesWhatGoStampsModified: contrib/release.sh refuses,
// naming the file, whenever Go's VCS stamp would say vcs.modified=true —
// an untracked file counts as much as an edited tracked one
// (docs/operations.md, "Releases") — before it builds anything.
func TestReleaseRefusesWhatGoStampsModified(t *testing.T) {
	for _, tc := range []struct {
		name, file, body string
	}{
		{"untracked file", "agent-keys/ingest.key", "secret\n"},
		{"edited tracked file", "notes/tracked-and-edited.md", "edited\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := releaseModule(t)
			p := filepath.Join(dir, tc.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			stderr, err := runRelease(t, dir)
			if err == nil {
				t.Fatalf("release.sh built a release from a tree with %s:\n%s", tc.file, stderr)
			}
			// git status names an untracked directory, not its files.
			want := tc.file
			if tc.name == "untracked file" {
				want = filepath.Dir(tc.file) + "/"
			}
			if !strings.Contains(stderr, want) || !strings.Contains(stderr, "vcs.modified") {
				t.Errorf("the refusal does not name %s and the stamp:\n%s", want, stderr)
			}
			if strings.Contains(stderr, "building") {
				t.Errorf("release.sh built before refusing:\n%s", stderr)
			}
		})
	}
}

// TestReleaseCleanTreePhases: from a tree whose only stray files are
// git-ignored, contrib/release.sh builds binaries stamped
// vcs.modified=false, and every phase prints a line on stderr when it
// starts and its time when it ends.
func TestReleaseCleanTreePhases(t *testing.T) {
	proctest.FullRunOnly(t, "builds a release with contrib/release.sh")
	dir := releaseModule(t)
	if err := os.MkdirAll(filepath.Join(dir, "ignored"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ignored", "console-password"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr, err := runRelease(t, dir)
	if err != nil {
		t.Fatalf("release.sh: %v\n%s", err, stderr)
	}
	for _, phase := range []string{
		"building chalupa linux/amd64 (./cmd/chalupa)",
		"building chalupad linux/amd64 (.)",
		"building chalupa-agent linux/amd64 (./cmd/chalupa-agent)",
		"writing the archives and checksums.txt",
	} {
		start := regexp.MustCompile(`(?m)^release: ` + regexp.QuoteMeta(phase) + ` …$`)
		end := regexp.MustCompile(`(?m)^release: ` + regexp.QuoteMeta(phase) + `: done in [0-9]+s$`)
		if !start.MatchString(stderr) || !end.MatchString(stderr) {
			t.Errorf("phase %q: no start line or no timed end line on stderr:\n%s", phase, stderr)
		}
	}
	x := t.TempDir()
	tar := exec.Command("tar", "-xzf", filepath.Join(dir, "dist/v0.0.1/chalupa_v0.0.1_linux_amd64.tar.gz"), "-C", x)
	if out, err := tar.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "version", "-m", filepath.Join(x, "chalupad")).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "vcs.modified=false") {
		t.Errorf("the release's chalupad is not stamped vcs.modified=false:\n%s", out)
	}
}
