package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/chalupa-run/chalupa/internal/datadir"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// TestServeRecordsAddress: serve on a port of its own (CHALUPA_LISTEN
// alone) prints the console URL once and records its address in the data
// dir (mode 0600), so `chalupa admin` finds it without CHALUPA_URL; `config
// check` beside it checks the configuration anyway and notes the daemon; a
// clean stop exits 0 and removes the address (docs/operations.md,
// "Embedded default" and "Exit codes"). A second serve meanwhile names the
// first one's pid; once it stopped, `chalupa admin` refuses to fall back to
// the default address and, pointed at it, names the URL it tried.
func TestServeRecordsAddress(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	addrFile := filepath.Join(d.DataDir, datadir.AddressFileName)
	console := "console at " + d.URL + "/app; set its password with: chalupa admin password"
	// Serve prints the console line and writes the address once it accepts
	// connections, so /api/health may answer before either is seen: wait
	// for both, then count the line in the whole output after the stop.
	var fi os.FileInfo
	testwait.Eventually(t, testwait.Long, "the console line and "+datadir.AddressFileName, func() (bool, string) {
		var err error
		fi, err = os.Stat(addrFile)
		seen := strings.Contains(d.Logs(), console)
		return err == nil && seen, fmt.Sprintf("%s: %v; console line seen: %v", datadir.AddressFileName, err, seen)
	})
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, want 0600", datadir.AddressFileName, fi.Mode())
	}
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_DATA_DIR": d.DataDir}
	if out, code := proctest.RunCommand(t, bin, "", env, "admin", "status"); code != 0 || !strings.Contains(out, "schema version") {
		t.Fatalf("admin status without CHALUPA_URL: exit %d:\n%s", code, out)
	}
	out, code := proctest.RunCommand(t, bin, "", d.EnvCopy(), "config", "check")
	if code != 0 || !strings.Contains(out, "a chalupa daemon is running on CHALUPA_DATA_DIR") || !strings.Contains(out, "configuration ok") {
		t.Fatalf("config check beside the daemon: exit %d, want 0 with a note:\n%s", code, out)
	}
	// A second serve on the same data dir, and so the same port, names the
	// lock's holder, not the port clash.
	out, code = proctest.RunCommand(t, bin, "", d.EnvCopy(), "serve")
	if want := fmt.Sprintf("another chalupa process (pid %d) is using this data dir", d.Pid); code != 1 || !strings.Contains(out, want) || strings.Contains(out, "listen on CHALUPA_LISTEN") {
		t.Fatalf("a second serve on the data dir: exit %d, want 1 with %q:\n%s", code, want, out)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM, want 0", code)
	}
	if _, err := os.Stat(addrFile); !os.IsNotExist(err) {
		t.Fatalf("%s after a clean stop: %v, want it removed", datadir.AddressFileName, err)
	}
	// With serve gone, the CLI does not fall back to 127.0.0.1:8080 (where
	// another daemon may answer): it says what it looked for.
	out, code = proctest.RunCommand(t, bin, "", env, "admin", "status")
	if want := "no daemon address in " + addrFile; code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "--url or CHALUPA_URL") {
		t.Fatalf("admin status after serve stopped: exit %d, want 1 with %q:\n%s", code, want, out)
	}
	// And a daemon that does not answer is named in the error.
	out, code = proctest.RunCommand(t, bin, "", map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL}, "admin", "status")
	if want := "no answer from the daemon at " + d.URL + " (--url or CHALUPA_URL)"; code != 1 || !strings.Contains(out, want) || strings.Contains(out, d.AdminToken()) {
		t.Fatalf("admin status against the stopped daemon: exit %d, want 1 with %q:\n%s", code, want, out)
	}
	if n := strings.Count(d.Logs(), console); n != 1 {
		t.Fatalf("the console line appears %d times, want once:\n%s", n, d.Logs())
	}
}

// TestInterruptExitCodes: Ctrl-C (SIGINT) ends a finite command that is
// waiting — `agent heartbeat --count`, `admin jobs --watch` — with 130, so
// a script does not read an interrupted run as done (docs/operations.md,
// "Exit codes").
func TestInterruptExitCodes(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	keyDir := filepath.Join(t.TempDir(), "keys")
	ingestE2ECLI(t, bin, d, "admin", "environment", "create", "demo-harbor")
	ingestE2ECLI(t, bin, d, "admin", "keys", "issue", "demo-harbor", "--out", keyDir)
	keyID, err := os.ReadFile(filepath.Join(keyDir, "key-id"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		first string // output that says the command is waiting
	}{
		{"agent heartbeat --count", []string{"agent", "heartbeat", "--url", d.URL, "--key-id", strings.TrimSpace(string(keyID)),
			"--key-file", filepath.Join(keyDir, "ingest.key"), "--env", "demo-harbor", "--deployment", "dep-1",
			"--droplet-id", "42", "--every", "1h", "--count", "3"}, " 202 "},
		{"admin jobs --watch", []string{"admin", "jobs", "--watch"}, "— "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out proctest.SyncBuffer
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "CHALUPA_ADMIN_TOKEN=" + d.AdminToken(), "CHALUPA_URL=" + d.URL}
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			testwait.Eventually(t, testwait.Long, "the command waiting", func() (bool, string) {
				return strings.Contains(out.String(), tc.first), out.String()
			})
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("exit %d after Ctrl-C, want 130:\n%s", code, out.String())
			}
		})
	}
}
