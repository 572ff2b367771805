package daemon

import (
	"context"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// sshKeyHandlers serve the public key of converge's SSH identity
// (docs/operations.md, "SSH key delivery"). They hold the master-key
// sealer only to seal a newly generated identity.
type sshKeyHandlers struct {
	db     *storage.DB
	sealer *envelope.Sealer
	clock  clockwork.Clock
}

func (h *sshKeyHandlers) register(o *operations) {
	handleOp(o, adminapi.OpGetSSHKey, h.get)
}

// get returns the identity's public key, generating the identity on the
// first call: the operator adds the key to DigitalOcean before the first
// box is created.
func (h *sshKeyHandlers) get(ctx context.Context, _ none) (adminapi.SSHKey, error) {
	line, err := sshdeliver.EnsureIdentity(ctx, h.db, h.sealer, h.clock.Now())
	if err != nil {
		return adminapi.SSHKey{}, err
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return adminapi.SSHKey{}, err
	}
	return adminapi.SSHKey{PublicKey: line, Fingerprint: ssh.FingerprintSHA256(pub)}, nil
}
