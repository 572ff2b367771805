// Package ingest is chalupa's main job: per-environment ingest keys sealed in
// envelopes (keys.go), verification of protocol-v1 signed requests
// (verify.go), the heartbeat handler (heartbeat.go) and nonce pruning
// (prune.go). The rules are docs/operations.md's "Signed ingest", "Ingest
// keys" and "Heartbeats and deadlines".
package ingest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// Errors of the key lifecycle.
var (
	// ErrWrongMasterKey is returned at start when CHALUPA_INGEST_MASTER_KEY
	// does not open the database's check value.
	ErrWrongMasterKey = errors.New("CHALUPA_INGEST_MASTER_KEY does not open this database's envelopes (wrong master key?); refusing to start")
	// ErrEnvironmentNotFound is returned for an unknown environment slug.
	ErrEnvironmentNotFound = errors.New("environment not found")
	// ErrKeyNotFound is returned for an unknown key id.
	ErrKeyNotFound = errors.New("ingest key not found")
)

// checkAAD binds the master-key check envelope to its purpose.
var checkAAD = []byte("chalupa/master-key-check")

// checkPlaintext is what the check envelope holds; any fixed value works,
// authentication is what proves the key.
var checkPlaintext = []byte("chalupa master key check v1")

// keyAAD is the additional data binding a key's envelope to its key id, so
// an envelope copied onto another row fails to open.
func keyAAD(keyID string) []byte { return []byte("chalupa/ingest-key/" + keyID) }

// OpenSealer returns the Sealer for masterKey after proving it against the
// database: the first start stores an encrypted check value (version 1);
// every later start must open it. Errors: ErrWrongMasterKey.
func OpenSealer(ctx context.Context, db *storage.DB, masterKey []byte, now time.Time) (*envelope.Sealer, error) {
	version, sealed, err := storage.MasterKeyCheck(ctx, db.Read)
	if errors.Is(err, storage.ErrNotFound) {
		s, err := envelope.New(masterKey, 1)
		if err != nil {
			return nil, err
		}
		err = db.Writer.Do(ctx, func(tx storage.Tx) error {
			// Recheck inside the write: never overwrite a check value.
			if _, _, err := storage.MasterKeyCheck(ctx, tx); err == nil {
				return ErrWrongMasterKey
			}
			return storage.PutMasterKeyCheck(ctx, tx, 1, s.Seal(checkPlaintext, checkAAD), now)
		})
		if err != nil {
			return nil, fmt.Errorf("store master key check: %w", err)
		}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read master key check: %w", err)
	}
	return VerifyMasterKey(masterKey, version, sealed)
}

// VerifyMasterKey returns a Sealer for masterKey at version if it opens the
// check envelope sealed. Errors: ErrWrongMasterKey.
func VerifyMasterKey(masterKey []byte, version uint32, sealed []byte) (*envelope.Sealer, error) {
	s, err := envelope.New(masterKey, version)
	if err != nil {
		return nil, ErrWrongMasterKey
	}
	if _, err := s.Open(sealed, checkAAD); err != nil {
		return nil, ErrWrongMasterKey
	}
	return s, nil
}

// Key is a verified, usable key held in memory.
type Key struct {
	ID              string
	EnvironmentID   int64
	EnvironmentSlug string
	Status          string
	material        []byte // raw HMAC key
	// confirmPending: a rotation delivered this key to a box's droplet and
	// awaits the first heartbeat signed with it, which revokes the
	// droplet's earlier keys (docs/operations.md, "Ingest keys").
	confirmPending bool
}

// Keyring issues, rotates and revokes ingest keys and resolves key ids for
// verification. Opened key material is cached in memory by key id; every
// lifecycle change goes through the Keyring and updates the cache in the same
// step, so revocation is immediate. The daemon is the database's only writer,
// so no other process can change a key behind the cache.
type Keyring struct {
	db     *storage.DB
	sealer *envelope.Sealer
	clock  clockwork.Clock

	mu    sync.RWMutex
	cache map[string]*Key
	// waits are the rotations waiting for a key's first heartbeat, by key
	// id: each receives the key ids that heartbeat revoked.
	waits map[string]chan []string
}

// NewKeyring returns a Keyring over db sealing with sealer. clock stamps
// issue, rotate and revoke times; nil means the real clock.
func NewKeyring(db *storage.DB, sealer *envelope.Sealer, clock clockwork.Clock) *Keyring {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Keyring{db: db, sealer: sealer, clock: clock, cache: map[string]*Key{}, waits: map[string]chan []string{}}
}

// newKeyID returns env_<slug>_<16 hex> (docs/operations.md, "Ingest keys").
func newKeyID(slug string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "env_" + slug + "_" + hex.EncodeToString(b)
}

// Issue creates a fresh active key for the environment. A re-issue is always
// a fresh key; existing keys are untouched. Errors: ErrEnvironmentNotFound.
func (k *Keyring) Issue(ctx context.Context, slug string) (adminapi.IssuedKey, error) {
	return k.issue(ctx, slug, false)
}

// Rotate marks every active key of the environment rotating (they keep
// verifying during the overlap) and issues a fresh active key, in one
// transaction. Errors: ErrEnvironmentNotFound.
func (k *Keyring) Rotate(ctx context.Context, slug string) (adminapi.IssuedKey, error) {
	return k.issue(ctx, slug, true)
}

func (k *Keyring) issue(ctx context.Context, slug string, rotate bool) (adminapi.IssuedKey, error) {
	material := protocol.NewKeyMaterial()
	raw, _ := protocol.DecodeKeyMaterial(material)
	out := adminapi.IssuedKey{KeyMaterial: material, EnvironmentSlug: slug, Status: storage.KeyActive}
	var environmentID int64
	now := k.clock.Now()
	err := k.db.Writer.Do(ctx, func(tx storage.Tx) error {
		environment, err := storage.EnvironmentBySlug(ctx, tx, slug)
		if errors.Is(err, storage.ErrNotFound) {
			return ErrEnvironmentNotFound
		}
		if err != nil {
			return err
		}
		environmentID = environment.ID
		if rotate {
			if out.RotatedKeyIDs, err = storage.RotateEnvironmentKeys(ctx, tx, environment.ID, now); err != nil {
				return err
			}
		}
		out.KeyID = newKeyID(slug)
		return storage.InsertIngestKey(ctx, tx, storage.IngestKey{
			KeyID:            out.KeyID,
			EnvironmentID:    environment.ID,
			MasterKeyVersion: k.sealer.Version(),
			Envelope:         k.sealer.Seal(raw, keyAAD(out.KeyID)),
		}, now)
	})
	if err != nil {
		return adminapi.IssuedKey{}, err
	}
	k.setStatus(out.RotatedKeyIDs, storage.KeyRotating)
	k.mu.Lock()
	k.cache[out.KeyID] = &Key{ID: out.KeyID, EnvironmentID: environmentID, EnvironmentSlug: slug, Status: storage.KeyActive, material: raw}
	k.mu.Unlock()
	return out, nil
}

// Revoke revokes keyID at once: the cache entry is dropped before Revoke
// returns, and the ingest write rechecks the status in its own transaction,
// so no request signed with it is accepted after this returns.
// Revoking a revoked key is a no-op. Errors: ErrKeyNotFound.
func (k *Keyring) Revoke(ctx context.Context, keyID string) (adminapi.RevokedKey, error) {
	var out adminapi.RevokedKey
	k.mu.Lock()
	delete(k.cache, keyID)
	k.mu.Unlock()
	err := k.db.Writer.Do(ctx, func(tx storage.Tx) error {
		key, err := storage.IngestKeyByID(ctx, tx, keyID)
		if errors.Is(err, storage.ErrNotFound) {
			return ErrKeyNotFound
		}
		if err != nil {
			return err
		}
		out = adminapi.RevokedKey{KeyID: keyID, EnvironmentSlug: key.EnvironmentSlug, Status: storage.KeyRevoked}
		return storage.RevokeIngestKey(ctx, tx, keyID, k.clock.Now())
	})
	k.mu.Lock()
	delete(k.cache, keyID) // a concurrent lookup may have refilled it
	k.mu.Unlock()
	return out, err
}

// Lookup resolves keyID. The result comes from the cache or, on a miss, from
// the database with its envelope opened. A revoked key is returned with
// Status "revoked" and no material (the caller refuses it); only active and
// rotating keys carry material. Errors: ErrKeyNotFound for an unknown id,
// envelope.ErrOpen (wrapped) for an envelope that does not open under the
// master key (tampered or moved).
func (k *Keyring) Lookup(ctx context.Context, keyID string) (*Key, error) {
	k.mu.RLock()
	c, ok := k.cache[keyID]
	k.mu.RUnlock()
	if ok {
		return c, nil
	}
	row, err := storage.IngestKeyByID(ctx, k.db.Read, keyID)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("look up ingest key: %w", err)
	}
	if row.Status == storage.KeyRevoked {
		return &Key{ID: keyID, EnvironmentID: row.EnvironmentID, EnvironmentSlug: row.EnvironmentSlug, Status: storage.KeyRevoked}, nil
	}
	raw, err := k.sealer.Open(row.Envelope, keyAAD(keyID))
	if err != nil {
		return nil, fmt.Errorf("open ingest key envelope: %w", err)
	}
	pending, err := storage.KeyAwaitsConfirmation(ctx, k.db.Read, keyID)
	if err != nil {
		return nil, err
	}
	key := &Key{ID: keyID, EnvironmentID: row.EnvironmentID, EnvironmentSlug: row.EnvironmentSlug, Status: row.Status, material: raw, confirmPending: pending}
	k.mu.Lock()
	k.cache[keyID] = key
	k.mu.Unlock()
	return key, nil
}

// RotateExcept is Rotate for the keys that are not a running box's: every
// active key of the environment but those in boxKeys becomes rotating, in
// one transaction with the fresh active key issued for those producers. No
// key is issued when the environment has running boxes (hasBoxes) and no
// active key outside boxKeys: its producers are all boxes, which a
// rotation reaches over SSH, and a key no producer holds would only wait
// to leak; the answer then has no KeyID. Errors: ErrEnvironmentNotFound
// (docs/operations.md, "Ingest keys").
func (k *Keyring) RotateExcept(ctx context.Context, slug string, boxKeys []string, hasBoxes bool) (adminapi.IssuedKey, error) {
	material := protocol.NewKeyMaterial()
	raw, _ := protocol.DecodeKeyMaterial(material)
	out := adminapi.IssuedKey{EnvironmentSlug: slug}
	var environmentID int64
	now := k.clock.Now()
	err := k.db.Writer.Do(ctx, func(tx storage.Tx) error {
		environment, err := storage.EnvironmentBySlug(ctx, tx, slug)
		if errors.Is(err, storage.ErrNotFound) {
			return ErrEnvironmentNotFound
		}
		if err != nil {
			return err
		}
		environmentID = environment.ID
		if out.RotatedKeyIDs, err = storage.RotateEnvironmentKeysExcept(ctx, tx, environment.ID, boxKeys, now); err != nil {
			return err
		}
		if hasBoxes && len(out.RotatedKeyIDs) == 0 {
			return nil
		}
		out.KeyID, out.KeyMaterial, out.Status = newKeyID(slug), material, storage.KeyActive
		return storage.InsertIngestKey(ctx, tx, storage.IngestKey{
			KeyID:            out.KeyID,
			EnvironmentID:    environment.ID,
			MasterKeyVersion: k.sealer.Version(),
			Envelope:         k.sealer.Seal(raw, keyAAD(out.KeyID)),
		}, now)
	})
	if err != nil {
		return adminapi.IssuedKey{}, err
	}
	k.setStatus(out.RotatedKeyIDs, storage.KeyRotating)
	if out.KeyID != "" {
		k.mu.Lock()
		k.cache[out.KeyID] = &Key{ID: out.KeyID, EnvironmentID: environmentID, EnvironmentSlug: slug, Status: storage.KeyActive, material: raw}
		k.mu.Unlock()
	}
	return out, nil
}

// setStatus updates the cached entries of ids to status (copy on write:
// a *Key handed out never changes).
func (k *Keyring) setStatus(ids []string, status string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		if c, ok := k.cache[id]; ok {
			c2 := *c
			c2.Status = status
			k.cache[id] = &c2
		}
	}
}

// MarkRotating updates the cache after the writer marked ids rotating
// (storage.MarkRotationKeyWritten).
func (k *Keyring) MarkRotating(ids []string) { k.setStatus(ids, storage.KeyRotating) }

// AwaitConfirmation is called once a rotation recorded keyID as awaiting
// its first heartbeat (storage.RecordRotationKeyIssued committed): the
// cached entry is marked so the heartbeat handler confirms it, and the
// returned channel receives the key ids the confirming heartbeat revoked.
// StopAwaiting drops the channel; the confirmation itself happens whether
// or not anyone waits (docs/operations.md, "Ingest keys").
func (k *Keyring) AwaitConfirmation(keyID string) <-chan []string {
	ch := make(chan []string, 1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.cache[keyID]; ok {
		c2 := *c
		c2.confirmPending = true
		k.cache[keyID] = &c2
	}
	k.waits[keyID] = ch
	return ch
}

// StopAwaiting drops the channel AwaitConfirmation returned for keyID.
func (k *Keyring) StopAwaiting(keyID string) {
	k.mu.Lock()
	delete(k.waits, keyID)
	k.mu.Unlock()
}

// confirmed runs after a heartbeat's unit that confirmed keyID committed
// (storage.ConfirmDeliveredKey): the key no longer awaits, the keys it
// revoked leave the cache, and a waiting rotation hears which.
func (k *Keyring) confirmed(keyID string, revoked []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.cache[keyID]; ok {
		c2 := *c
		c2.confirmPending = false
		k.cache[keyID] = &c2
	}
	for _, id := range revoked {
		delete(k.cache, id)
	}
	if ch, ok := k.waits[keyID]; ok {
		ch <- revoked
		delete(k.waits, keyID)
	}
}

// evict drops keyID from the cache (after the write path saw it revoked).
func (k *Keyring) evict(keyID string) {
	k.mu.Lock()
	delete(k.cache, keyID)
	k.mu.Unlock()
}
