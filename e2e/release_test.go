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

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
)

// TestReleaseIsReproducible builds the same commit twice, from two clones
// in different directories, with contrib/release.sh and compares the
// archives' checksums byte for byte (docs/operations.md, "Releases"). It
// builds linux/amd64 only (CHALUPA_RELEASE_ARCHES); arm64 goes through the
// same steps. Each archive of the first build holds exactly its binaries
// (mode 0755, owner 0, the commit's time) stamped with the version and
// commit: chalupa's holds the light chalupa and the full chalupad (and
// chalupa's server commands reach the chalupad beside it), chalupa-cli's
// the same light chalupa alone, chalupa-agent's the agent; checksums.txt
// lists them in the documented order (the agent install reads its lines:
// boxes/agentrelease, ArchiveName, Arches). The clones hold the repository's
// HEAD, so uncommitted changes are not part of what is built.
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
		checkChecksums(t, out, sums[i], []string{"chalupa_v0.0.0-test_linux_amd64.tar.gz", "chalupa-cli_v0.0.0-test_linux_amd64.tar.gz",
			agentrelease.ArchiveName("v0.0.0-test", "amd64")})
		if i == 0 {
			checkAgentArchive(t, filepath.Join(out, agentrelease.ArchiveName("v0.0.0-test", "amd64")), commit)
			checkServerArchives(t, out, commit)
		}
	}
	if !bytes.Equal(sums[0], sums[1]) || len(sums[0]) == 0 {
		t.Fatalf("two builds of %s differ:\n%s\n%s", commit, sums[0], sums[1])
	}
}

// checkServerArchives: chalupa's archive holds chalupa and chalupad,
// chalupa-cli's the same chalupa alone; all three say the version and
// commit; chalupa is the light binary (a fraction of chalupad's size) and
// its server commands reach the chalupad beside it.
func checkServerArchives(t *testing.T, out, commit string) {
	t.Helper()
	server := checkArchive(t, filepath.Join(out, "chalupa_v0.0.0-test_linux_amd64.tar.gz"), commit, "chalupa", "chalupad")
	cli := checkArchive(t, filepath.Join(out, "chalupa-cli_v0.0.0-test_linux_amd64.tar.gz"), commit, "chalupa")
	for _, bin := range []string{filepath.Join(server, "chalupa"), filepath.Join(server, "chalupad"), filepath.Join(cli, "chalupa")} {
		checkVersion(t, bin, commit)
	}
	light, _ := os.ReadFile(filepath.Join(server, "chalupa"))
	if alone, _ := os.ReadFile(filepath.Join(cli, "chalupa")); !bytes.Equal(light, alone) {
		t.Error("chalupa-cli's chalupa differs from the one beside chalupad")
	}
	full, _ := os.ReadFile(filepath.Join(server, "chalupad"))
	if len(light) == 0 || len(light)*3 > len(full) {
		t.Errorf("chalupa is %d bytes beside chalupad's %d: not the light binary", len(light), len(full))
	}
	help, err := exec.Command(filepath.Join(server, "chalupa"), "serve", "--help").Output()
	if err != nil || !strings.HasPrefix(string(help), "Usage: chalupa serve [flags]\n") || !strings.Contains(string(help), "--lag-limit") {
		t.Errorf("chalupa serve --help beside chalupad (%v):\n%s", err, help)
	}
}

// checkVersion: bin says the release's version and commit, unmodified.
func checkVersion(t *testing.T, bin, commit string) {
	t.Helper()
	v, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("released %s: %v", bin, err)
	}
	var info struct {
		Version, Commit string
		Modified        bool
	}
	if err := json.Unmarshal(v, &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != "v0.0.0-test" || info.Commit != commit || info.Modified {
		t.Fatalf("released %s says %+v; want version v0.0.0-test, commit %s, unmodified", bin, info, commit)
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

// checkAgentArchive: the agent archive holds exactly chalupa-agent, and
// the binary says its version and commit and prints its unit.
func checkAgentArchive(t *testing.T, path, commit string) {
	t.Helper()
	bin := filepath.Join(checkArchive(t, path, commit, "chalupa-agent"), "chalupa-agent")
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

// checkArchive: the archive at path holds exactly names, in that order,
// each mode 0755, owned by 0:0 at the commit's time, behind a gzip header
// without name or time; it unpacks them into a fresh directory and
// returns it.
func checkArchive(t *testing.T, path, commit string, names ...string) string {
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
		t.Errorf("%s: gzip header carries a name %q or time %v", path, zr.Name, zr.ModTime)
	}
	ct, err := exec.Command("git", "log", "-1", "--format=%ct", commit).Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(zr)
	for _, name := range names {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: %v before %s", path, err, name)
		}
		if hdr.Name != name || hdr.Mode&0o7777 != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 ||
			fmt.Sprint(hdr.ModTime.Unix()) != strings.TrimSpace(string(ct)) {
			t.Errorf("%s: entry %q mode %o owner %d:%d time %v; want %s", path, hdr.Name, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime, name)
		}
		out, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("%s holds more than %v (%v)", path, names, err)
	}
	return dir
}

// TestReleaseArchOrder: release.sh builds, by default, the architectures
// the agent install pins, in agentrelease.Arches order (checksums.txt lists each
// binary's archives in that order).
func TestReleaseArchOrder(t *testing.T) {
	b, err := os.ReadFile("contrib/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	if want := "arches=${CHALUPA_RELEASE_ARCHES:-" + strings.Join(agentrelease.Arches, " ") + "}\n"; !strings.Contains(string(b), want) {
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
