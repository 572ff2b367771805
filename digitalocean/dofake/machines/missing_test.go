package machines_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/digitalocean/dofake/machines"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// probeEnv makes TestBedProbe start a bed: only TestMissingCapabilities
// sets it, in a child of this test binary run with capabilities dropped.
const probeEnv = "CHALUPA_MACHINES_PROBE"

// TestBedProbe is TestMissingCapabilities's child: it starts a bed, which
// skips or fails naming what the process lacks. It never boots anything:
// with nothing missing it fails first.
func TestBedProbe(t *testing.T) {
	if os.Getenv(probeEnv) != "1" {
		t.Skip("run by TestMissingCapabilities")
	}
	if m := machines.Missing(filepath.Join(proctest.RepoRoot(t), machines.RootFSLink)); len(m) == 0 {
		t.Fatal("probe: nothing is missing (the row would start a real bed)")
	}
	machines.New(t, machines.Config{})
}

// TestMissingCapabilities: root without the capabilities the bed needs
// skips naming each one it lacks and saying how to get them, or fails under
// CI=true (docs/architecture.md, "Tests") — root with CAP_SYS_ADMIN and
// CAP_DAC_OVERRIDE alone (a container given --cap-add SYS_ADMIN) passed the
// checks and failed in `ip` with "Operation not permitted", skip or not.
func TestMissingCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("drops root's capabilities: needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("setpriv (util-linux): %v", err)
	}
	for _, row := range []struct {
		name, bounding string
		ci             bool
		want, notWant  []string
		verdict        string
	}{
		{name: "none", bounding: "-all",
			want: []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_CHROOT", "every capability"}, verdict: "--- SKIP"},
		{name: "none under CI", bounding: "-all", ci: true,
			want: []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CI=true"}, verdict: "--- FAIL"},
		{name: "SYS_ADMIN and DAC_OVERRIDE alone", bounding: "-all,+sys_admin,+dac_override",
			want:    []string{"CAP_NET_ADMIN", "CAP_SETGID", "CAP_SETPCAP", "CAP_SYS_CHROOT", "every capability"},
			notWant: []string{"CAP_SYS_ADMIN,", "CAP_DAC_OVERRIDE", "install-test-tools"}, verdict: "--- SKIP"},
		{name: "all but NET_ADMIN", bounding: "-net_admin", ci: true,
			want: []string{"CAP_NET_ADMIN", "CI=true"}, notWant: []string{"CAP_SYS_ADMIN", "CAP_SETGID"}, verdict: "--- FAIL"},
	} {
		t.Run(row.name, func(t *testing.T) {
			cmd := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set="+row.bounding,
				os.Args[0], "-test.run=^TestBedProbe$", "-test.v", "-test.count=1")
			ci := ""
			if row.ci {
				ci = "true"
			}
			cmd.Env = append(os.Environ(), probeEnv+"=1", "CI="+ci)
			out, _ := cmd.CombinedOutput()
			got := string(out)
			if !strings.Contains(got, row.verdict+": TestBedProbe") {
				t.Errorf("want %s:\n%s", row.verdict, got)
			}
			for _, w := range row.want {
				if !strings.Contains(got, w) {
					t.Errorf("the message does not say %q:\n%s", w, got)
				}
			}
			for _, w := range row.notWant {
				if strings.Contains(got, w) {
					t.Errorf("the message says %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestMissingNamesAnIncompleteRootFS: a root filesystem lacking a file
// the bed uses (sshd here) is named missing, with the file, so the machine
// tests skip or fail at once (docs/architecture.md, "Tests") instead of
// booting boxes without sshd and failing minutes later waiting for it.
func TestMissingNamesAnIncompleteRootFS(t *testing.T) {
	dir := t.TempDir()
	for _, f := range machines.RootFSFiles {
		if f == "usr/sbin/sshd" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := strings.Join(machines.Missing(dir), ", ")
	if !strings.Contains(missing, "the root filesystem "+dir+" whole (it lacks usr/sbin/sshd)") {
		t.Errorf("Missing says %q, not the tree's lacking sshd", missing)
	}
}

// TestRootFSFilesMatchInstaller: the files the bed checks are those
// contrib/install-test-tools.sh rebuilds a cached tree for lacking.
func TestRootFSFilesMatchInstaller(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(proctest.RepoRoot(t), "contrib", "install-test-tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := rootfsFiles.FindSubmatch(script)
	if m == nil {
		t.Fatal("install-test-tools.sh has no ROOTFS_FILES line")
	}
	if got, want := strings.Join(machines.RootFSFiles, " "), string(m[1]); got != want {
		t.Errorf("machines checks %q, install-test-tools.sh %q", got, want)
	}
}
