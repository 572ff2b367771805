package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// SSHIdentity is the one row of ssh_identity: chalupa's SSH identity for
// key delivery (docs/operations.md, "SSH key delivery"). PublicKey is in
// authorized_keys form; Envelope is the sealed private key and is never
// returned by any API.
type SSHIdentity struct {
	ID               int64
	PublicKey        string
	MasterKeyVersion uint32
	Envelope         []byte
	CreatedAt        time.Time
}

// SSHIdentityID is the id of the one identity row.
const SSHIdentityID int64 = 1

// GetSSHIdentity returns the stored identity. Errors: ErrNotFound before
// the first InsertSSHIdentity.
func GetSSHIdentity(ctx context.Context, q Querier) (SSHIdentity, error) {
	var s SSHIdentity
	var c sql.NullInt64
	err := q.QueryRowContext(ctx,
		`SELECT id, public_key, master_key_version, envelope, created_at FROM ssh_identity WHERE id = ?`, SSHIdentityID).
		Scan(&s.ID, &s.PublicKey, &s.MasterKeyVersion, &s.Envelope, &c)
	if err != nil {
		return SSHIdentity{}, notFound(err)
	}
	s.CreatedAt = fromMS(c)
	return s, nil
}

// InsertSSHIdentity stores s as the identity unless one exists already
// (insert-or-ignore: the identity is generated once) and reports whether it
// stored it.
func InsertSSHIdentity(ctx context.Context, q Querier, s SSHIdentity, now time.Time) (bool, error) {
	res, err := q.ExecContext(ctx,
		`INSERT INTO ssh_identity (id, public_key, master_key_version, envelope, created_at)
		 VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		SSHIdentityID, s.PublicKey, s.MasterKeyVersion, s.Envelope, ms(now))
	if err != nil {
		return false, fmt.Errorf("insert ssh identity: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// UpdateSSHIdentityEnvelope replaces the identity's envelope and master-key
// version (rewrap). Errors: ErrNotFound.
func UpdateSSHIdentityEnvelope(ctx context.Context, q Querier, version uint32, envelope []byte) error {
	res, err := q.ExecContext(ctx,
		`UPDATE ssh_identity SET envelope = ?, master_key_version = ? WHERE id = ?`, envelope, version, SSHIdentityID)
	if err != nil {
		return fmt.Errorf("update ssh identity envelope: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// SSHHostKey is a droplet's pinned SSH host key: HostKey in authorized_keys
// form, Fingerprint its SHA256 fingerprint.
type SSHHostKey struct {
	DropletID   int64
	HostKey     string
	Fingerprint string
	FirstSeenAt time.Time
	LastSeenAt  time.Time
}

// SSHHostKeyByDroplet returns dropletID's pinned host key. Errors:
// ErrNotFound when none is pinned yet.
func SSHHostKeyByDroplet(ctx context.Context, q Querier, dropletID int64) (SSHHostKey, error) {
	var k SSHHostKey
	var f, l sql.NullInt64
	err := q.QueryRowContext(ctx,
		`SELECT droplet_id, host_key, fingerprint, first_seen_at, last_seen_at FROM ssh_host_keys WHERE droplet_id = ?`, dropletID).
		Scan(&k.DropletID, &k.HostKey, &k.Fingerprint, &f, &l)
	if err != nil {
		return SSHHostKey{}, notFound(err)
	}
	k.FirstSeenAt, k.LastSeenAt = fromMS(f), fromMS(l)
	return k, nil
}

// ErrHostKeyMismatch is returned by PinSSHHostKey when the droplet has a
// different key pinned already.
var ErrHostKeyMismatch = errors.New("host key differs from the pinned one")

// PinSSHHostKey records k for its droplet at first contact, or, when the
// same key is pinned, moves its last_seen_at to now. The pin is decided
// inside the caller's transaction, so two first contacts cannot pin two
// keys. Errors: ErrHostKeyMismatch when another key is pinned (nothing is
// written).
func PinSSHHostKey(ctx context.Context, q Querier, k SSHHostKey, now time.Time) error {
	cur, err := SSHHostKeyByDroplet(ctx, q, k.DropletID)
	switch {
	case errors.Is(err, ErrNotFound):
		_, err := q.ExecContext(ctx,
			`INSERT INTO ssh_host_keys (droplet_id, host_key, fingerprint, first_seen_at, last_seen_at) VALUES (?, ?, ?, ?, ?)`,
			k.DropletID, k.HostKey, k.Fingerprint, ms(now), ms(now))
		if err != nil {
			return fmt.Errorf("pin host key: %w", err)
		}
		return nil
	case err != nil:
		return err
	case cur.HostKey != k.HostKey:
		return ErrHostKeyMismatch
	}
	if _, err := q.ExecContext(ctx, `UPDATE ssh_host_keys SET last_seen_at = ? WHERE droplet_id = ?`, ms(now), k.DropletID); err != nil {
		return fmt.Errorf("pin host key: %w", err)
	}
	return nil
}
