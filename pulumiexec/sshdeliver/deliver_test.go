package sshdeliver_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver/sshdtest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

type rig struct {
	db      *storage.DB
	sealer  *envelope.Sealer
	clock   *clockwork.FakeClock
	pub     ssh.PublicKey
	deliver *sshdeliver.Deliverer
	dir     string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	db := storagetest.NewDB(t)
	sealer, err := envelope.New(bytes.Repeat([]byte{7}, envelope.KeySize), 1)
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	line, err := sshdeliver.EnsureIdentity(ctx, db, sealer, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatalf("public key %q: %v", line, err)
	}
	d := sshdeliver.New(db, sealer, clock)
	dir := filepath.Join(t.TempDir(), "etc", "chalupa-agent")
	d.Dir = dir
	return &rig{db: db, sealer: sealer, clock: clock, pub: pub, deliver: d, dir: dir}
}

var files = sshdeliver.Files{KeyID: "env_demo-harbor_0123456789abcdef", Key: []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ")}

func TestDeliverWritesKeyFiles(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	host := sshdtest.NewSigner(t)
	srv := sshdtest.New(t, host, r.pub)
	res, err := r.deliver.Deliver(ctx, srv.Addr, 42, files)
	if err != nil {
		t.Fatal(err)
	}
	if !res.FirstContact || res.HostKeyFingerprint != ssh.FingerprintSHA256(host.PublicKey()) {
		t.Fatalf("result %+v: want first contact pinning %s", res, ssh.FingerprintSHA256(host.PublicKey()))
	}
	for _, tc := range []struct{ name, want string }{
		{"key-id", files.KeyID + "\n"},
		{"ingest.key", string(files.Key) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(r.dir, tc.name)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("%s holds %q, want %q", tc.name, b, tc.want)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Fatalf("%s mode %v, want 0600", tc.name, st.Mode().Perm())
			}
		})
	}
	st, err := os.Stat(r.dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
	// The key only ever travels on stdin: no command line carries it.
	for _, c := range srv.Ran() {
		if strings.Contains(c, string(files.Key)) {
			t.Fatalf("a remote command line carries the key: %q", c)
		}
	}
	pin, err := storage.SSHHostKeyByDroplet(ctx, r.db.Read, 42)
	if err != nil || pin.Fingerprint != res.HostKeyFingerprint {
		t.Fatalf("pin %+v, %v: want the host key recorded for droplet 42", pin, err)
	}
	// A second delivery to the same droplet and key is not a first contact.
	res, err = r.deliver.Deliver(ctx, srv.Addr, 42, files)
	if err != nil || res.FirstContact {
		t.Fatalf("second delivery: %+v, %v; want success without a new pin", res, err)
	}
}

func TestDeliverRefusesChangedHostKey(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	first := sshdtest.New(t, sshdtest.NewSigner(t), r.pub)
	if _, err := r.deliver.Deliver(ctx, first.Addr, 42, files); err != nil {
		t.Fatal(err)
	}
	impostor := sshdtest.New(t, sshdtest.NewSigner(t), r.pub)
	other := sshdeliver.Files{KeyID: "env_demo-harbor_fedcba9876543210", Key: []byte("ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkj")}
	_, err := r.deliver.Deliver(ctx, impostor.Addr, 42, other)
	if !errors.Is(err, sshdeliver.ErrHostKeyChanged) {
		t.Fatalf("delivery to a changed host key = %v, want ErrHostKeyChanged", err)
	}
	if len(impostor.Ran()) != 0 {
		t.Fatalf("the impostor received %d commands", len(impostor.Ran()))
	}
	b, _ := os.ReadFile(filepath.Join(r.dir, "ingest.key"))
	if string(b) != string(files.Key)+"\n" {
		t.Fatal("a refused delivery changed ingest.key")
	}
	// Another droplet id is a first contact of its own.
	if _, err := r.deliver.Deliver(ctx, impostor.Addr, 43, other); err != nil {
		t.Fatalf("first contact with droplet 43: %v", err)
	}
}

func TestDeliverRefusedIdentity(t *testing.T) {
	r := newRig(t)
	srv := sshdtest.New(t, sshdtest.NewSigner(t), sshdtest.NewSigner(t).PublicKey())
	_, err := r.deliver.Deliver(context.Background(), srv.Addr, 42, files)
	if !errors.Is(err, sshdeliver.ErrAuth) {
		t.Fatalf("delivery with an unauthorized identity = %v, want ErrAuth", err)
	}
}

// A droplet whose firewall drops the control plane: every attempt fails
// until the bounded wait ends, and the error says the droplet is billable.
func TestDeliverUnreachableIsBoundedAndSaysBillable(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connection refused from now on
	done := make(chan error, 1)
	var res sshdeliver.Result
	go func() {
		var err error
		res, err = r.deliver.Deliver(ctx, addr, 42, files)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if !errors.Is(err, sshdeliver.ErrUnreachable) || !strings.Contains(err.Error(), "billable") {
				t.Fatalf("Deliver = %v, want ErrUnreachable saying the droplet is billable", err)
			}
			if strings.Contains(err.Error(), addr) {
				t.Fatalf("the error carries the address: %v", err)
			}
			if want := int(r.deliver.Wait/r.deliver.Retry) + 1; res.Attempts != want {
				t.Fatalf("%d attempts, want %d (one per retry interval within the wait)", res.Attempts, want)
			}
			return
		default:
		}
		bctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if r.clock.BlockUntilContext(bctx, 1) == nil {
			r.clock.Advance(r.deliver.Retry)
		}
		cancel()
	}
}

func TestDeliverRefusesBadFiles(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		name string
		f    sshdeliver.Files
	}{
		{"no key id", sshdeliver.Files{Key: files.Key}},
		{"no key", sshdeliver.Files{KeyID: files.KeyID}},
		{"key id with a space", sshdeliver.Files{KeyID: "a b", Key: files.Key}},
		{"key with a newline", sshdeliver.Files{KeyID: files.KeyID, Key: []byte("a\nb")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.deliver.Deliver(context.Background(), "127.0.0.1:1", 42, tc.f); !errors.Is(err, sshdeliver.ErrBadFiles) {
				t.Fatalf("Deliver = %v, want ErrBadFiles", err)
			}
		})
	}
}

func TestEnsureIdentityIsGeneratedOnce(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	again, err := sshdeliver.EnsureIdentity(ctx, r.db, r.sealer, r.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ssh.MarshalAuthorizedKey(r.pub)[:len(ssh.MarshalAuthorizedKey(r.pub))-1], []byte(strings.Fields(again)[0]+" "+strings.Fields(again)[1])) {
		t.Fatalf("a second EnsureIdentity returned another key: %q", again)
	}
	other, _ := envelope.New(bytes.Repeat([]byte{8}, envelope.KeySize), 1)
	if _, err := sshdeliver.Signer(ctx, r.db.Read, other); !errors.Is(err, sshdeliver.ErrIdentityCorrupt) {
		t.Fatalf("Signer under another master key = %v, want ErrIdentityCorrupt", err)
	}
}
