package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestReleaseIsReproducible builds the same commit twice, from two clones
// in different directories, with contrib/release.sh and compares the
// archives' checksums byte for byte (docs/operations.md, "Releases"). It
// builds linux/amd64 only (CHALUPA_RELEASE_ARCHES), which is what the agent's
// cloud-init pins; arm64 goes through the same steps. The clones hold the
// repository's HEAD, so uncommitted changes are not part of what is built.
func TestReleaseIsReproducible(t *testing.T) {
	proctest.FullRunOnly(t, "builds two releases")
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required to build a release")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	commit := strings.TrimSpace(string(head))
	var sums [2][]byte
	for i := range sums {
		dir := filepath.Join(t.TempDir(), []string{"first", "second-clone"}[i])
		runIn(t, "", "git", "clone", "--quiet", "--no-hardlinks", ".", dir)
		runIn(t, dir, "git", "checkout", "--quiet", commit)
		out := filepath.Join(dir, "out")
		cmd := exec.Command("sh", "contrib/release.sh", "v0.0.0-test", out)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CHALUPA_RELEASE_ARCHES=amd64")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release.sh in %s: %v\n%s", dir, err, b)
		}
		sums[i], err = os.ReadFile(filepath.Join(out, "checksums.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			bin := filepath.Join(t.TempDir(), "x")
			runIn(t, "", "mkdir", "-p", bin)
			runIn(t, "", "tar", "-xzf", filepath.Join(out, "chalupa_v0.0.0-test_linux_amd64.tar.gz"), "-C", bin)
			v, err := exec.Command(filepath.Join(bin, "chalupa"), "version", "--json").Output()
			if err != nil {
				t.Fatalf("released binary: %v", err)
			}
			var info versionInfo
			if err := json.Unmarshal(v, &info); err != nil {
				t.Fatal(err)
			}
			if info.Version != "v0.0.0-test" || info.Commit != commit || info.Modified {
				t.Fatalf("released binary says %+v; want version v0.0.0-test, commit %s, unmodified", info, commit)
			}
		}
	}
	if !bytes.Equal(sums[0], sums[1]) || len(sums[0]) == 0 {
		t.Fatalf("two builds of %s differ:\n%s\n%s", commit, sums[0], sums[1])
	}
}

// TestReleaseRefusesMutableVersions: "latest", branch names and bare
// numbers are refused before anything is built.
func TestReleaseRefusesMutableVersions(t *testing.T) {
	for _, v := range []string{"latest", "main", "1.2.3", "v1.2", "v1.2.3/evil"} {
		t.Run(v, func(t *testing.T) {
			cmd := exec.Command("sh", "contrib/release.sh", v, t.TempDir())
			b, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
				t.Fatalf("release.sh %s: %v\n%s; want exit 2", v, err, b)
			}
		})
	}
}

func runIn(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b)
	}
}
