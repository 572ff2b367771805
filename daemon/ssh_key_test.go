package daemon_test

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// TestSSHKeyIsGeneratedOnceAndSurvivesRestart: adminGetSSHKey answers the
// identity's public key and fingerprint, the same after a restart (the
// identity lives in the database), and never any private material; the
// daemon's sealer opens the stored identity.
func TestSSHKeyIsGeneratedOnceAndSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	d := daemontest.NewInProcess(t, daemontest.AppOptions{})
	first, err := d.Admin.GetSSHKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub, comment, _, _, err := ssh.ParseAuthorizedKey([]byte(first.PublicKey))
	if err != nil || pub.Type() != ssh.KeyAlgoED25519 || comment != "chalupa-converge" {
		t.Fatalf("public key %q (%v): want an ed25519 authorized_keys line named chalupa-converge", first.PublicKey, err)
	}
	if first.Fingerprint != ssh.FingerprintSHA256(pub) {
		t.Fatalf("fingerprint %s, want %s", first.Fingerprint, ssh.FingerprintSHA256(pub))
	}
	if strings.Contains(first.PublicKey, "PRIVATE") {
		t.Fatal("the answer carries private material")
	}
	signer, err := sshdeliver.Signer(ctx, d.App.DB.Read, d.App.Sealer)
	if err != nil {
		t.Fatalf("the daemon's sealer does not open the stored identity: %v", err)
	}
	if string(signer.PublicKey().Marshal()) != string(pub.Marshal()) {
		t.Fatal("the stored identity's private key does not match the public key answered")
	}
	d.Restart(daemontest.AppOptions{})
	again, err := d.Admin.GetSSHKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("after a restart the key is %q, want %q", again.PublicKey, first.PublicKey)
	}
	id, err := storage.GetSSHIdentity(ctx, d.App.DB.Read)
	if err != nil || id.MasterKeyVersion != d.App.Sealer.Version() {
		t.Fatalf("stored identity %v at master key version %d, want version %d", err, id.MasterKeyVersion, d.App.Sealer.Version())
	}
}
