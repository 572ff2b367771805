package machines_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestRootFSBuildAfterKilledBuild: a root filesystem build killed with
// SIGKILL leaves its half-built tree with proc still mounted in it
// (debootstrap unmounts on its way out, which SIGKILL skips); the next
// `contrib/install-test-tools.sh --rootfs` detaches that mount, clears the
// tree and builds again (docs/architecture.md, "Tests"). Before, its
// `rm -rf` walked the host's /proc through the mount, failed on every file
// and no run could build the tree again. debootstrap and chroot are stand-ins
// here (the real build is minutes and a mirror); the mount is a real proc.
func TestRootFSBuildAfterKilledBuild(t *testing.T) {
	if os.Geteuid() != 0 {
		msg := "mounting proc in a half-built tree needs root"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a missing requirement fails the run)", msg)
		}
		t.Skip(msg)
	}
	run, xdg, repo := rootfsInstaller(t)

	// The first build, to learn where the tree goes; then make it the
	// killed build's: the finished tree gone, its .tmp there with proc
	// mounted in it.
	if out, err := run(); err != nil {
		t.Fatalf("first build: %v\n%s", err, out)
	}
	dest, err := filepath.EvalSymlinks(filepath.Join(repo, ".tools", "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dest, dest+".tmp"); err != nil {
		t.Fatal(err)
	}
	proc := filepath.Join(dest+".tmp", "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		t.Fatalf("mount proc: %v", err)
	}
	t.Cleanup(func() {
		if mountedUnder(t, xdg) {
			_ = unix.Unmount(proc, unix.MNT_DETACH)
		}
	})

	out, err := run()
	if err != nil {
		t.Fatalf("the build after a killed one: %v\n%s", err, firstLines(out, 10))
	}
	if mountedUnder(t, xdg) {
		t.Errorf("a mount is left below the cache after the build")
	}
	if _, err := os.Stat(filepath.Join(dest, "etc", "debian_version")); err != nil {
		t.Errorf("the tree was not built again: %v", err)
	}
	if _, err := os.Stat(dest + ".tmp"); err == nil {
		t.Errorf("the killed build's tree is still there")
	}
}

// mountedUnder reports whether any mount point lies below dir.
func mountedUnder(t *testing.T, dir string) bool {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 && strings.HasPrefix(fs[4], real+"/") {
			return true
		}
	}
	return false
}

// firstLines is s's first n lines (a failed rm prints one per file).
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// rootfsFiles is the ROOTFS_FILES list of contrib/install-test-tools.sh:
// what a built tree must hold.
var rootfsFiles = regexp.MustCompile(`(?m)^ROOTFS_FILES="([^"]*)"$`)

// rootfsInstaller copies contrib/install-test-tools.sh into a repository of
// its own, with debootstrap, chroot and systemd-nspawn stand-ins on PATH (the
// stand-in debootstrap makes a tree of the script's ROOTFS_FILES), and
// returns a func running its --rootfs, the XDG cache and the repository.
func rootfsInstaller(t *testing.T) (run func() (string, error), xdg, repo string) {
	t.Helper()
	for _, c := range []string{"flock", "awk", "realpath", "umount", "sha256sum"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
	}
	script, err := os.ReadFile(filepath.Join(proctest.RepoRoot(t), "contrib", "install-test-tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := rootfsFiles.FindSubmatch(script)
	if m == nil || !strings.Contains(string(m[1]), "usr/sbin/sshd") {
		t.Fatalf("install-test-tools.sh has no ROOTFS_FILES naming usr/sbin/sshd")
	}
	// A repository of the script alone: it links .tools/rootfs beside it.
	repo = t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "contrib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "contrib", "install-test-tools.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	stubs := t.TempDir()
	for name, body := range map[string]string{
		// debootstrap --variant=… --include=… SUITE TARGET MIRROR
		"debootstrap":    "#!/bin/sh\nset -e\nmkdir -p \"$4/proc\"\nfor f in $STUB_ROOTFS_FILES; do mkdir -p \"$(dirname \"$4/$f\")\"; echo stub > \"$4/$f\"; done\n",
		"chroot":         "#!/bin/sh\nexit 0\n",
		"systemd-nspawn": "#!/bin/sh\nexit 0\n",
	} {
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	xdg = t.TempDir()
	return func() (string, error) {
		cmd := exec.Command(filepath.Join(repo, "contrib", "install-test-tools.sh"), "--rootfs")
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+xdg, "PATH="+stubs+":"+os.Getenv("PATH"), "STUB_ROOTFS_FILES="+string(m[1]))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}, xdg, repo
}

// TestRootFSIncompleteTreeRebuilt: a cached root filesystem that lost a
// file the machine tests use (sshd here) is built again by the next
// `contrib/install-test-tools.sh --rootfs`, which names the file; before,
// its etc/debian_version alone passed it, and every box booted without sshd.
func TestRootFSIncompleteTreeRebuilt(t *testing.T) {
	if os.Geteuid() != 0 {
		msg := "the root filesystem is built as root"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a missing requirement fails the run)", msg)
		}
		t.Skip(msg)
	}
	run, _, repo := rootfsInstaller(t)
	if out, err := run(); err != nil {
		t.Fatalf("first build: %v\n%s", err, out)
	}
	dest, err := filepath.EvalSymlinks(filepath.Join(repo, ".tools", "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dest, "usr", "sbin", "sshd")); err != nil {
		t.Fatal(err)
	}
	out, err := run()
	if err != nil {
		t.Fatalf("the build after sshd went: %v\n%s", err, out)
	}
	if !strings.Contains(out, "lacks usr/sbin/sshd") {
		t.Errorf("the build does not name what the tree lacked:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dest, "usr", "sbin", "sshd")); err != nil {
		t.Errorf("the tree was not built again: %v", err)
	}
}
