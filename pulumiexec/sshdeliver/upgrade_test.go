package sshdeliver_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
)

// agentArchive is a release archive as contrib/release.sh builds it: one
// file, chalupa-agent (0755), here a script answering `version`.
func agentArchive(t *testing.T, version string) []byte {
	t.Helper()
	body := []byte("#!/bin/sh\necho 'chalupa-agent " + version + "'\n")
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "chalupa-agent", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// upgradeRig is a fake droplet running agent v1.0.0 under a temporary
// root, its systemctl a script that logs its arguments, and a loopback
// release directory serving v1.1.0's archives.
type upgradeRig struct {
	*rig
	srv     *sshdtest.Server
	rel     agentrelease.Release
	archive []byte
	unitLog string
}

func newUpgradeRig(t *testing.T) *upgradeRig {
	t.Helper()
	r := newRig(t)
	srv := sshdtest.New(t, sshdtest.NewSigner(t), r.pub)
	srv.Root = t.TempDir()
	bin := t.TempDir()
	unitLog := filepath.Join(bin, "systemctl.log")
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\necho \"$@\" >> '"+unitLog+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv.Path = []string{bin}
	if err := os.MkdirAll(filepath.Dir(srv.AgentBinary()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srv.AgentBinary(), []byte("#!/bin/sh\necho 'chalupa-agent v1.0.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := agentArchive(t, "v1.1.0")
	release := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		for _, a := range agentrelease.Arches {
			if req.URL.Path == "/rel/"+agentrelease.ArchiveName("v1.1.0", a) {
				_, _ = w.Write(archive)
				return
			}
		}
		http.NotFound(w, req)
	}))
	t.Cleanup(release.Close)
	sum := sha256.Sum256(archive)
	digest := hex.EncodeToString(sum[:])
	rel := agentrelease.Release{Version: "v1.1.0", URL: release.URL + "/rel", SHA256: map[string]string{"amd64": digest, "arm64": digest}}
	return &upgradeRig{rig: r, srv: srv, rel: rel, archive: archive, unitLog: unitLog}
}

func (u *upgradeRig) binary(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(u.srv.AgentBinary())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (u *upgradeRig) restarts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(u.unitLog)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUpgradeAgent: the upgrade over SSH verifies the archive's digest
// before replacing anything: a mismatch, a missing archive or an archive
// without the agent leave the old binary and restart nothing, and their
// errors carry no URL; a matching archive replaces the binary (0755, no
// temporary file left), restarts chalupa-agent.service and reports the
// architecture and both versions (docs/operations.md, "Agent install").
func TestUpgradeAgent(t *testing.T) {
	ctx := context.Background()
	old := "#!/bin/sh\necho 'chalupa-agent v1.0.0'\n"
	for _, tc := range []struct {
		name   string
		mutate func(*agentrelease.Release)
		want   error
	}{
		{"digest mismatch", func(r *agentrelease.Release) {
			r.SHA256 = map[string]string{"amd64": strings.Repeat("0", 64), "arm64": strings.Repeat("0", 64)}
		}, sshdeliver.ErrUpgradeDigest},
		{"archive missing", func(r *agentrelease.Release) { r.Version = "v9.9.9" }, sshdeliver.ErrUpgradeDownload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpgradeRig(t)
			rel := u.rel
			tc.mutate(&rel)
			res, err := u.deliver.UpgradeAgent(ctx, u.srv.Addr, 42, rel)
			if !errors.Is(err, tc.want) {
				t.Fatalf("upgrade: %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "127.0.0.1") || strings.Contains(err.Error(), "http") {
				t.Errorf("the error carries an address or URL: %v", err)
			}
			if got := u.binary(t); got != old {
				t.Errorf("the binary was replaced: %q", got)
			}
			if r := u.restarts(t); r != "" {
				t.Errorf("systemctl ran: %q", r)
			}
			if res.Before != "chalupa-agent v1.0.0" || res.After != "" {
				t.Errorf("result %+v", res)
			}
			leftovers(t, u.srv)
		})
	}

	// A droplet whose first boot installed no agent (the box's agent
	// turned on after creation, or a failed install): a binary alone
	// would never run, so nothing is downloaded, placed or restarted.
	t.Run("no agent installed", func(t *testing.T) {
		u := newUpgradeRig(t)
		if err := os.Remove(u.srv.AgentBinary()); err != nil {
			t.Fatal(err)
		}
		res, err := u.deliver.UpgradeAgent(ctx, u.srv.Addr, 42, u.rel)
		if !errors.Is(err, sshdeliver.ErrUpgradeNoAgent) {
			t.Fatalf("upgrade: %v, want ErrUpgradeNoAgent", err)
		}
		if _, err := os.Stat(u.srv.AgentBinary()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a binary was placed: %v", err)
		}
		if r := u.restarts(t); r != "" {
			t.Errorf("systemctl ran: %q", r)
		}
		if res.Before != "none" {
			t.Errorf("result %+v", res)
		}
		leftovers(t, u.srv)
	})

	t.Run("success replaces and restarts", func(t *testing.T) {
		u := newUpgradeRig(t)
		res, err := u.deliver.UpgradeAgent(ctx, u.srv.Addr, 42, u.rel)
		if err != nil {
			t.Fatal(err)
		}
		if res.Before != "chalupa-agent v1.0.0" || res.After != "chalupa-agent v1.1.0" || res.Arch != runtime.GOARCH || res.HostKeyFingerprint == "" {
			t.Errorf("result %+v", res)
		}
		if got := u.binary(t); !strings.Contains(got, "v1.1.0") {
			t.Errorf("the binary was not replaced: %q", got)
		}
		if fi, err := os.Stat(u.srv.AgentBinary()); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("the new binary: %v %v", fi.Mode(), err)
		}
		if r := u.restarts(t); r != "restart chalupa-agent.service\n" {
			t.Errorf("systemctl ran %q, want one restart of the unit", r)
		}
		if prev, err := os.ReadFile(u.srv.AgentBinary() + ".prev"); err != nil || string(prev) != old {
			t.Errorf("chalupa-agent.prev is not the replaced binary: %q %v", prev, err)
		}
		leftovers(t, u.srv)
	})

	// Upgrading to the installed version is a no-op that says so: nothing
	// downloaded, replaced or restarted.
	t.Run("installed version is a no-op", func(t *testing.T) {
		u := newUpgradeRig(t)
		if err := os.WriteFile(u.srv.AgentBinary(), []byte("#!/bin/sh\necho 'chalupa-agent v1.1.0 (commit abc, go1.24, linux/amd64)'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		u.rel.URL = "https://127.0.0.1:1/never"
		_, err := u.deliver.UpgradeAgent(ctx, u.srv.Addr, 42, u.rel)
		if !errors.Is(err, sshdeliver.ErrUpgradeInstalled) {
			t.Fatalf("upgrade: %v, want ErrUpgradeInstalled", err)
		}
		if r := u.restarts(t); r != "" {
			t.Errorf("systemctl ran: %q", r)
		}
		if _, err := os.Stat(u.srv.AgentBinary() + ".prev"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a previous binary was kept: %v", err)
		}
		leftovers(t, u.srv)
	})
}

// TestRestoreAgent: the restore reports the unit's state and restarts as
// systemd gives them, puts chalupa-agent.prev back over the binary (the
// previous copy stays) and restarts the unit; without a previous binary,
// or with one that does not run, nothing is replaced or restarted
// (docs/operations.md, "Agent install", under Upgrade).
func TestRestoreAgent(t *testing.T) {
	ctx := context.Background()
	t.Run("restores and restarts", func(t *testing.T) {
		u := newUpgradeRig(t)
		if _, err := u.deliver.UpgradeAgent(ctx, u.srv.Addr, 42, u.rel); err != nil {
			t.Fatal(err)
		}
		res, err := u.deliver.RestoreAgent(ctx, u.srv.Addr, 42)
		if err != nil {
			t.Fatal(err)
		}
		// The rig's systemctl prints nothing for is-active: not active.
		if res.Replaced != "chalupa-agent v1.1.0" || res.Restored != "chalupa-agent v1.0.0" || res.State != "unknown" || !res.Crashed() {
			t.Errorf("result %+v", res)
		}
		if got := u.binary(t); !strings.Contains(got, "v1.0.0") {
			t.Errorf("the binary was not restored: %q", got)
		}
		if _, err := os.Stat(u.srv.AgentBinary() + ".prev"); err != nil {
			t.Errorf("chalupa-agent.prev went away: %v", err)
		}
		want := "restart chalupa-agent.service\nis-active chalupa-agent.service\nshow -p NRestarts --value chalupa-agent.service\nrestart chalupa-agent.service\n"
		if r := u.restarts(t); r != want {
			t.Errorf("systemctl ran %q, want %q", r, want)
		}
		leftovers(t, u.srv)
	})
	for _, tc := range []struct {
		name string
		prev string // "" for none
		want error
	}{
		{"no previous binary", "", sshdeliver.ErrRestoreNoPrevious},
		{"previous binary does not run", "#!/bin/sh\nexit 1\n", sshdeliver.ErrRestorePrevious},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpgradeRig(t)
			if tc.prev != "" {
				if err := os.WriteFile(u.srv.AgentBinary()+".prev", []byte(tc.prev), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			_, err := u.deliver.RestoreAgent(ctx, u.srv.Addr, 42)
			if !errors.Is(err, tc.want) {
				t.Fatalf("restore: %v, want %v", err, tc.want)
			}
			if got := u.binary(t); !strings.Contains(got, "v1.0.0") {
				t.Errorf("the binary was replaced: %q", got)
			}
			if strings.Contains(u.restarts(t), "restart") {
				t.Errorf("systemctl restarted: %q", u.restarts(t))
			}
		})
	}
}

// leftovers fails when the upgrade left its temporary directory beside
// the binary.
func leftovers(t *testing.T, srv *sshdtest.Server) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(srv.AgentBinary()))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "chalupa-agent" && e.Name() != "chalupa-agent.prev" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}
