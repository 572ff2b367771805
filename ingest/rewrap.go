package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/storage"
)

// ErrSameMasterKey is returned when the new master key equals the old one.
var ErrSameMasterKey = errors.New("the new master key equals the current one")

// RewrapResult reports a completed rewrap.
type RewrapResult struct {
	// Keys is how many ingest key envelopes were re-encrypted.
	Keys int
	// ProviderTokens is how many customer provider token envelopes were
	// re-encrypted (every status).
	ProviderTokens int
	// SSHIdentities is how many SSH identity envelopes were re-encrypted
	// (0 or 1: the converge key delivery's identity).
	SSHIdentities int
	// FromVersion and ToVersion are the master-key versions.
	FromVersion, ToVersion uint32
}

// Rewrap re-encrypts every envelope (every ingest key and customer provider
// token, whatever its status, the SSH identity of key delivery, and the
// check value) from oldKey to newKey in one transaction, so the
// master key can be rotated without re-issuing agent keys (Vault's rewrap,
// Coder's dbcrypt rotate). The new envelopes carry the next master-key
// version. Either every envelope moves or none does.
//
// Errors: ErrWrongMasterKey when oldKey does not open the check value,
// ErrSameMasterKey, or an envelope that does not open under oldKey (the
// transaction is rolled back and nothing changes).
func Rewrap(ctx context.Context, db *storage.DB, oldKey, newKey []byte, now time.Time) (RewrapResult, error) {
	var res RewrapResult
	if bytes.Equal(oldKey, newKey) {
		return res, ErrSameMasterKey
	}
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		res = RewrapResult{}
		version, check, err := storage.MasterKeyCheck(ctx, tx)
		if err != nil {
			return fmt.Errorf("read master key check: %w", err)
		}
		oldS, err := VerifyMasterKey(oldKey, version, check)
		if err != nil {
			return err
		}
		newS, err := envelope.New(newKey, version+1)
		if err != nil {
			return err
		}
		keys, err := storage.ListIngestKeyEnvelopes(ctx, tx)
		if err != nil {
			return err
		}
		for _, k := range keys {
			raw, err := oldS.Open(k.Envelope, keyAAD(k.KeyID))
			if err != nil {
				return fmt.Errorf("open envelope of %s: %w", k.KeyID, err)
			}
			if err := storage.UpdateIngestKeyEnvelope(ctx, tx, k.KeyID, newS.Version(), newS.Seal(raw, keyAAD(k.KeyID))); err != nil {
				return err
			}
		}
		tokens, err := storage.ListProviderTokens(ctx, tx)
		if err != nil {
			return err
		}
		for _, t := range tokens {
			aad := providerTokenAAD(t.OrgID, t.Generation)
			raw, err := oldS.Open(t.Envelope, aad)
			if err != nil {
				return fmt.Errorf("open provider token envelope of organization %d: %w", t.OrgID, err)
			}
			if err := storage.UpdateProviderTokenEnvelope(ctx, tx, t.OrgID, newS.Version(), newS.Seal(raw, aad)); err != nil {
				return err
			}
		}
		ident, err := storage.GetSSHIdentity(ctx, tx)
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return err
		default:
			aad := SSHIdentityAAD(ident.ID)
			raw, err := oldS.Open(ident.Envelope, aad)
			if err != nil {
				return fmt.Errorf("open the SSH identity envelope: %w", err)
			}
			if err := storage.UpdateSSHIdentityEnvelope(ctx, tx, newS.Version(), newS.Seal(raw, aad)); err != nil {
				return err
			}
			res.SSHIdentities = 1
		}
		if err := storage.PutMasterKeyCheck(ctx, tx, newS.Version(), newS.Seal(checkPlaintext, checkAAD), now); err != nil {
			return err
		}
		res.Keys, res.ProviderTokens, res.FromVersion, res.ToVersion = len(keys), len(tokens), version, newS.Version()
		return nil
	})
	return res, err
}
