package sshdeliver_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
)

// TestCancelledWaitNamesNoAddress: a delivery or upgrade whose context ends
// during an attempt (the admin caller gave up, the job was cancelled)
// fails with ErrUnreachable and the context's error, and its text carries
// neither the droplet's address nor its port (docs/operations.md, "SSH key
// delivery": errors name the droplet and the kind of failure, never the
// address). Before, the raw net error ("read tcp 127.0.0.1:…->…: use of
// closed network connection") reached the admin answer and the box's
// agent-upgrade-failed event.
func TestCancelledWaitNamesNoAddress(t *testing.T) {
	// A listener that accepts and never speaks SSH: a handshake that hangs.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		name string
		run  func(context.Context, *rig) error
	}{
		{"deliver", func(ctx context.Context, r *rig) error {
			_, err := r.deliver.Deliver(ctx, ln.Addr().String(), 42, files)
			return err
		}},
		{"upgrade", func(ctx context.Context, r *rig) error {
			rel := agentrelease.Release{Version: "v1.1.0", URL: "https://releases.example/rel",
				SHA256: map[string]string{"amd64": strings.Repeat("a", 64), "arm64": strings.Repeat("b", 64)}}
			_, err := r.deliver.UpgradeAgent(ctx, ln.Addr().String(), 42, rel)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The caller gives up once the connection is open: the
			// attempt's handshake then fails on the closed connection.
			r.deliver.Dial = func(dctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(dctx, network, addr)
				cancel()
				return c, err
			}
			err := tc.run(ctx, r)
			if !errors.Is(err, sshdeliver.ErrUnreachable) || !errors.Is(err, context.Canceled) {
				t.Fatalf("error %v, want ErrUnreachable and context.Canceled", err)
			}
			if msg := err.Error(); strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, port) {
				t.Fatalf("the error names the address: %q", msg)
			}
		})
	}
}
