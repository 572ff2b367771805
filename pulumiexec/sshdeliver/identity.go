// Package sshdeliver delivers an environment's ingest key to a fresh
// droplet over SSH (docs/operations.md, "SSH key delivery"): cloud-init
// never carries the key, so after a successful up converge connects with
// chalupa's own SSH identity, pins the droplet's host key at first contact,
// and writes ingest.key and key-id where the agent waits for them.
//
// The identity (ed25519) is generated once and stored in the database as an
// AES-256-GCM envelope under the master key, bound to its row, so a
// database restored on a new control-plane droplet still reaches the live
// fleet; `chalupa rewrap` re-seals it with the ingest keys.
package sshdeliver

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/storage"
)

// identityComment ends the public key line, so the key is recognisable in a
// droplet's authorized_keys and in the DigitalOcean account's SSH keys.
const identityComment = "chalupa-converge"

// ErrIdentityCorrupt is returned when the stored identity does not open
// under the master key or does not match its recorded public key.
var ErrIdentityCorrupt = errors.New("the stored SSH identity does not open under the master key")

// EnsureIdentity returns the public key (authorized_keys form, one line
// without a newline) of chalupa's SSH identity, generating and storing the
// identity first if the database has none. The check and the insert run in
// one writer transaction, so two callers never store two identities.
func EnsureIdentity(ctx context.Context, db *storage.DB, sealer *envelope.Sealer, now time.Time) (string, error) {
	var pub string
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		cur, err := storage.GetSSHIdentity(ctx, tx)
		if err == nil {
			pub = cur.PublicKey
			return nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return fmt.Errorf("generate SSH identity: %w", err)
		}
		sshPub, err := ssh.NewPublicKey(edPub)
		if err != nil {
			return fmt.Errorf("generate SSH identity: %w", err)
		}
		pub = authorizedLine(sshPub) + " " + identityComment
		_, err = storage.InsertSSHIdentity(ctx, tx, storage.SSHIdentity{
			PublicKey:        pub,
			MasterKeyVersion: sealer.Version(),
			Envelope:         sealer.Seal(edPriv, ingest.SSHIdentityAAD(storage.SSHIdentityID)),
		}, now)
		return err
	})
	return pub, err
}

// PublicKey returns the stored identity's public key (authorized_keys form).
// Errors: storage.ErrNotFound before EnsureIdentity ran.
func PublicKey(ctx context.Context, q storage.Querier) (string, error) {
	id, err := storage.GetSSHIdentity(ctx, q)
	if err != nil {
		return "", err
	}
	return id.PublicKey, nil
}

// Signer opens the stored identity with sealer. Errors:
// storage.ErrNotFound, ErrIdentityCorrupt (another master key, or a tampered
// or moved envelope).
func Signer(ctx context.Context, q storage.Querier, sealer *envelope.Sealer) (ssh.Signer, error) {
	id, err := storage.GetSSHIdentity(ctx, q)
	if err != nil {
		return nil, err
	}
	raw, err := sealer.Open(id.Envelope, ingest.SSHIdentityAAD(id.ID))
	if err != nil || len(raw) != ed25519.PrivateKeySize {
		return nil, ErrIdentityCorrupt
	}
	signer, err := ssh.NewSignerFromKey(ed25519.PrivateKey(raw))
	if err != nil {
		return nil, ErrIdentityCorrupt
	}
	if !strings.HasPrefix(id.PublicKey, authorizedLine(signer.PublicKey())+" ") {
		return nil, ErrIdentityCorrupt
	}
	return signer, nil
}

// authorizedLine is k in authorized_keys form without comment or newline.
func authorizedLine(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}
