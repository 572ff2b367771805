package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/agent/install"
)

// TestReleaseIsReproducible builds the same commit twice, from two clones
// in different directories, with contrib/release.sh and compares the
// archives' checksums byte for byte (docs/operations.md, "Releases"). It
// builds linux/amd64 only (CHALUPA_RELEASE_ARCHES); arm64 goes through the
// same steps. Both archives of each build, chalupa and chalupa-agent, hold
// their one binary (mode 0755, owner 0, the commit's time) stamped with the
// version and commit, and checksums.txt lists them in the order the agent
// install reads (agent/install: ArchiveName, Arches). The clones hold the
// repository's HEAD, so uncommitted changes are not part of what is built.
func TestReleaseIsReproducible(t *testing.T) {
	t.Parallel()
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
		checkChecksums(t, out, sums[i], []string{"chalupa_v0.0.0-test_linux_amd64.tar.gz", install.ArchiveName("v0.0.0-test", "amd64")})
		if i == 0 {
			checkAgentArchive(t, filepath.Join(out, install.ArchiveName("v0.0.0-test", "amd64")), commit)
			bin := filepath.Join(t.TempDir(), "x")
			runIn(t, "", "mkdir", "-p", bin)
			runIn(t, "", "tar", "-xzf", filepath.Join(out, "chalupa_v0.0.0-test_linux_amd64.tar.gz"), "-C", bin)
			v, err := exec.Command(filepath.Join(bin, "chalupa"), "version", "--json").Output()
			if err != nil {
				t.Fatalf("released binary: %v", err)
			}
			var info struct {
				Version, Commit string
				Modified        bool
			}
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

// checkChecksums: checksums.txt is sha256sum's format over exactly names,
// in that order, and each sum is its archive's.
func checkChecksums(t *testing.T, dir string, sums []byte, names []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("checksums.txt:\n%s\nwant %d lines: %v", sums, len(names), names)
	}
	for i, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%x  %s", sha256.Sum256(b), name); lines[i] != want {
			t.Errorf("checksums.txt line %d is %q, want %q", i+1, lines[i], want)
		}
	}
}

// checkAgentArchive: the agent archive holds exactly chalupa-agent, mode
// 0755, owned by 0:0 at the commit's time, and the binary says its version
// and commit.
func checkAgentArchive(t *testing.T, path, commit string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header carries a name %q or time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	ct, err := exec.Command("git", "log", "-1", "--format=%ct", commit).Output()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Name != "chalupa-agent" || hdr.Mode&0o7777 != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 ||
		fmt.Sprint(hdr.ModTime.Unix()) != strings.TrimSpace(string(ct)) {
		t.Errorf("agent archive entry %q mode %o owner %d:%d time %v", hdr.Name, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime)
	}
	bin := filepath.Join(t.TempDir(), "chalupa-agent")
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, tr); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("agent archive holds more than chalupa-agent (%v)", err)
	}
	v, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("released agent: %v", err)
	}
	if want := "chalupa-agent v0.0.0-test (commit " + commit[:12] + ", "; !strings.HasPrefix(string(v), want) {
		t.Fatalf("released agent says %q; want %q…", v, want)
	}
	unit, err := exec.Command(bin, "systemd-unit").Output()
	if err != nil || !strings.Contains(string(unit), "\nExecStart=/usr/local/bin/chalupa-agent run\n") {
		t.Fatalf("released agent's unit (%v):\n%s", err, unit)
	}
}

// TestReleaseArchOrder: release.sh builds, by default, the architectures
// the agent install pins, in install.Arches order (checksums.txt lists each
// binary's archives in that order).
func TestReleaseArchOrder(t *testing.T) {
	b, err := os.ReadFile("contrib/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	if want := "arches=${CHALUPA_RELEASE_ARCHES:-" + strings.Join(install.Arches, " ") + "}\n"; !strings.Contains(string(b), want) {
		t.Fatalf("contrib/release.sh does not build %q by default", want)
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
