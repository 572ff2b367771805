package sshdeliver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
)

// TestRotateKey: a rotation over SSH writes the new pair (0600, the key on
// stdin only) and restarts the agent's unit, so the agent, which reads its
// key files at start, signs with the new key; a droplet without the agent
// gets nothing; a failed write renames nothing, so the droplet keeps the
// old pair whole; a failed restart leaves the new pair in place and says
// so (docs/operations.md, "Ingest keys" and "SSH key delivery").
func TestRotateKey(t *testing.T) {
	ctx := context.Background()
	next := sshdeliver.Files{KeyID: "env_demo-harbor_fedcba9876543210", Key: []byte("ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkj")}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, u *upgradeRig)
		want    error
		written bool
		restart bool
	}{
		{"rotated", func(*testing.T, *upgradeRig) {}, nil, true, true},
		{"no agent", func(t *testing.T, u *upgradeRig) {
			if err := os.Remove(u.srv.AgentBinary()); err != nil {
				t.Fatal(err)
			}
		}, sshdeliver.ErrRotateNoAgent, false, false},
		{"write fails", func(t *testing.T, u *upgradeRig) {
			// A stale temporary path that is a directory: the write
			// cannot create the file.
			if err := os.MkdirAll(filepath.Join(u.dir, ".ingest.key.tmp", "x"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, sshdeliver.ErrWrite, false, false},
		{"restart fails", func(t *testing.T, u *upgradeRig) {
			if err := os.WriteFile(filepath.Join(u.srv.Path[0], "systemctl"), []byte("#!/bin/sh\necho \"$@\" >> '"+u.unitLog+"'\necho 'Job failed' >&2\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, sshdeliver.ErrRotateRestart, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpgradeRig(t)
			// The agent's own directory, which the fake droplet keeps
			// under its root.
			u.deliver.Dir, u.dir = sshdeliver.DefaultDir, u.srv.AgentDir()
			if _, err := u.deliver.Deliver(ctx, u.srv.Addr, 42, files); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, u)
			res, err := u.deliver.RotateKey(ctx, u.srv.Addr, 42, next)
			if !errors.Is(err, tc.want) {
				t.Fatalf("rotate: %v, want %v", err, tc.want)
			}
			if res.Written != tc.written || res.Uncertain {
				t.Fatalf("result %+v, want written %v and certain", res, tc.written)
			}
			if err != nil {
				for _, leak := range []string{"127.0.0.1", next.KeyID, string(next.Key)} {
					if strings.Contains(err.Error(), leak) {
						t.Fatalf("error %q carries the address, the key id or the key", err)
					}
				}
			}
			want := files
			if tc.written {
				want = next
			}
			for name, body := range map[string]string{"key-id": want.KeyID + "\n", "ingest.key": string(want.Key) + "\n"} {
				p := filepath.Join(u.dir, name)
				b, err := os.ReadFile(p)
				if err != nil || string(b) != body {
					t.Fatalf("%s holds %q (%v), want %q", name, b, err, body)
				}
				if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
					t.Fatalf("%s mode %v (%v), want 0600", name, st.Mode().Perm(), err)
				}
			}
			if got := u.restarts(t); (got == "restart chalupa-agent.service\n") != tc.restart {
				t.Fatalf("systemctl ran %q, want a restart: %v", got, tc.restart)
			}
			for _, c := range u.srv.Ran() {
				if strings.Contains(c, string(next.Key)) {
					t.Fatalf("a remote command line carries the key: %q", c)
				}
			}
		})
	}
}
