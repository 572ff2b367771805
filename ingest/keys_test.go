package ingest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

func masterKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// envelopes returns key id -> envelope of every ingest key.
func envelopes(t *testing.T, db *storage.DB) map[string][]byte {
	t.Helper()
	ks, err := storage.ListIngestKeyEnvelopes(context.Background(), db.Read)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, k := range ks {
		out[k.KeyID] = k.Envelope
	}
	return out
}

func setEnvelope(t *testing.T, db *storage.DB, keyID string, env []byte) {
	t.Helper()
	err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		_, err := tx.Exec(`UPDATE ingest_keys SET envelope = ? WHERE key_id = ?`, env, keyID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenSealerProvesTheMasterKey(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	key := masterKey(t)
	s, err := ingest.OpenSealer(ctx, db, key, time.Now())
	if err != nil || s.Version() != 1 {
		t.Fatalf("first OpenSealer: version %v, %v", s, err)
	}
	v, check, err := storage.MasterKeyCheck(ctx, db.Read)
	if err != nil || v != 1 || bytes.Contains(check, key) {
		t.Fatalf("check value: version %d, %v", v, err)
	}
	if _, err := ingest.OpenSealer(ctx, db, key, time.Now()); err != nil {
		t.Fatalf("second OpenSealer with the same key: %v", err)
	}
	if _, err := ingest.OpenSealer(ctx, db, masterKey(t), time.Now()); !errors.Is(err, ingest.ErrWrongMasterKey) {
		t.Fatalf("OpenSealer with another key: %v, want ErrWrongMasterKey", err)
	}
	if _, err := ingest.OpenSealer(ctx, db, key[:31], time.Now()); !errors.Is(err, ingest.ErrWrongMasterKey) {
		t.Fatalf("OpenSealer with a short key on an existing database: %v, want ErrWrongMasterKey", err)
	}
	// The check value was not replaced by the failed attempts.
	_, check2, _ := storage.MasterKeyCheck(ctx, db.Read)
	if !bytes.Equal(check, check2) {
		t.Fatal("a refused OpenSealer changed the check value")
	}
}

func TestKeyringRefusesMovedAndTamperedEnvelopes(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	key := masterKey(t)
	s, err := ingest.OpenSealer(ctx, db, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kr := ingest.NewKeyring(db, s, nil)
	a, err := kr.Issue(ctx, "demo-harbor")
	if err != nil {
		t.Fatal(err)
	}
	b, err := kr.Issue(ctx, "demo-harbor")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kr.Issue(ctx, "demo-harbor")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Issue(ctx, "no-such-env"); !errors.Is(err, ingest.ErrEnvironmentNotFound) {
		t.Fatalf("issue for a missing environment: %v", err)
	}
	envs := envelopes(t, db)
	for id, e := range envs {
		if bytes.Contains(e, []byte(id)) {
			t.Fatalf("envelope of %s holds its key id in the clear", id)
		}
	}
	setEnvelope(t, db, a.KeyID, envs[b.KeyID])
	setEnvelope(t, db, b.KeyID, envs[a.KeyID])
	tampered := bytes.Clone(envs[c.KeyID])
	tampered[len(tampered)-1] ^= 0x80
	setEnvelope(t, db, c.KeyID, tampered)

	fresh := ingest.NewKeyring(db, s, nil) // nothing cached: material comes from envelopes
	for _, id := range []string{a.KeyID, b.KeyID, c.KeyID} {
		if k, err := fresh.Lookup(ctx, id); !errors.Is(err, envelope.ErrOpen) || k != nil {
			t.Errorf("Lookup(%s) after moving/tampering its envelope: %v, %v; want envelope.ErrOpen", id, k, err)
		}
	}
	// Restored envelopes open again.
	setEnvelope(t, db, a.KeyID, envs[a.KeyID])
	if k, err := fresh.Lookup(ctx, a.KeyID); err != nil || k.Status != storage.KeyActive || k.EnvironmentSlug != "demo-harbor" {
		t.Fatalf("Lookup after restoring the envelope: %+v, %v", k, err)
	}
	if _, err := fresh.Lookup(ctx, "env_demo-harbor_0000000000000000"); !errors.Is(err, ingest.ErrKeyNotFound) {
		t.Fatalf("Lookup of an unknown key: %v", err)
	}
}

func TestRewrap(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	oldKey, newKey := masterKey(t), masterKey(t)
	s, err := ingest.OpenSealer(ctx, db, oldKey, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kr := ingest.NewKeyring(db, s, nil)
	rotating, _ := kr.Issue(ctx, "demo-harbor")
	active, err := kr.Rotate(ctx, "demo-harbor")
	if err != nil || len(active.RotatedKeyIDs) != 1 || active.RotatedKeyIDs[0] != rotating.KeyID {
		t.Fatalf("rotate: %+v, %v", active, err)
	}
	revoked, _ := kr.Issue(ctx, "demo-harbor")
	if _, err := kr.Revoke(ctx, revoked.KeyID); err != nil {
		t.Fatal(err)
	}
	before := envelopes(t, db)
	_, checkBefore, _ := storage.MasterKeyCheck(ctx, db.Read)
	unchanged := func(what string) {
		t.Helper()
		after := envelopes(t, db)
		for id, e := range before {
			if !bytes.Equal(after[id], e) {
				t.Fatalf("%s changed the envelope of %s", what, id)
			}
		}
		_, check, _ := storage.MasterKeyCheck(ctx, db.Read)
		if !bytes.Equal(check, checkBefore) {
			t.Fatalf("%s changed the check value", what)
		}
	}

	if _, err := ingest.Rewrap(ctx, db, oldKey, oldKey, time.Now()); !errors.Is(err, ingest.ErrSameMasterKey) {
		t.Fatalf("rewrap to the same key: %v", err)
	}
	if _, err := ingest.Rewrap(ctx, db, masterKey(t), newKey, time.Now()); !errors.Is(err, ingest.ErrWrongMasterKey) {
		t.Fatalf("rewrap from a wrong key: %v", err)
	}
	unchanged("a refused rewrap")

	// One envelope that does not open: the whole rewrap rolls back.
	bad := bytes.Clone(before[revoked.KeyID])
	bad[10] ^= 1
	setEnvelope(t, db, revoked.KeyID, bad)
	if _, err := ingest.Rewrap(ctx, db, oldKey, newKey, time.Now()); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("rewrap over a tampered envelope: %v, want envelope.ErrOpen", err)
	}
	setEnvelope(t, db, revoked.KeyID, before[revoked.KeyID])
	unchanged("a rewrap that hit a tampered envelope")

	res, err := ingest.Rewrap(ctx, db, oldKey, newKey, time.Now())
	if err != nil || res.Keys != 3 || res.FromVersion != 1 || res.ToVersion != 2 {
		t.Fatalf("rewrap: %+v, %v", res, err)
	}
	after := envelopes(t, db)
	for id := range before {
		if v, err := envelope.Version(after[id]); err != nil || v != 2 || bytes.Equal(after[id], before[id]) {
			t.Fatalf("%s after rewrap: version %d, %v", id, v, err)
		}
	}
	if _, err := ingest.OpenSealer(ctx, db, oldKey, time.Now()); !errors.Is(err, ingest.ErrWrongMasterKey) {
		t.Fatalf("old key after rewrap: %v, want ErrWrongMasterKey", err)
	}
	s2, err := ingest.OpenSealer(ctx, db, newKey, time.Now())
	if err != nil || s2.Version() != 2 {
		t.Fatalf("new key after rewrap: %v", err)
	}
	kr2 := ingest.NewKeyring(db, s2, nil)
	for id, st := range map[string]string{rotating.KeyID: storage.KeyRotating, active.KeyID: storage.KeyActive, revoked.KeyID: storage.KeyRevoked} {
		k, err := kr2.Lookup(ctx, id)
		if err != nil || k.Status != st {
			t.Fatalf("Lookup(%s) under the new key: %+v, %v; want status %s", id, k, err, st)
		}
	}
	// A second rewrap moves to version 3.
	if res, err := ingest.Rewrap(ctx, db, newKey, oldKey, time.Now()); err != nil || res.ToVersion != 3 {
		t.Fatalf("second rewrap: %+v, %v", res, err)
	}
}

// The pruner deletes only nonces whose signed time is older than the skew
// window plus its margin: anything younger could still be replayed.
func TestNoncePrunerKeepsTheWindow(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	now := time.Unix(1767225600, 0)
	clock := clockwork.NewFakeClockAt(now)
	ages := map[string]time.Duration{
		"nonce-future-000001": -ingest.SkewWindow,
		"nonce-now-000000001": 0,
		"nonce-edge-00000001": ingest.SkewWindow,
		"nonce-margin-000001": ingest.SkewWindow + 59*time.Second,
		"nonce-old-000000001": ingest.SkewWindow + 61*time.Second,
		"nonce-old-000000002": 24 * time.Hour,
	}
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for n, age := range ages {
			for _, part := range []string{"env_a_0000000000000001", "shared"} {
				if err := storage.ClaimNonce(ctx, tx, part, n, now.Add(-age)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &ingest.NoncePruner{DB: db, Clock: clock, Log: zerolog.Nop(), Ledger: heldLedger()}
	n, err := p.Tick(ctx)
	if err != nil || n != 4 {
		t.Fatalf("Tick deleted %d, %v; want 4 (two old nonces in two partitions)", n, err)
	}
	var left int
	if err := db.Read.QueryRow(`SELECT count(*) FROM nonces WHERE nonce LIKE 'nonce-old-%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d old nonces left (%v)", left, err)
	}
	if err := db.Read.QueryRow(`SELECT count(*) FROM nonces`).Scan(&left); err != nil || left != 8 {
		t.Fatalf("%d nonces left, want 8 (%v)", left, err)
	}
	if n, err := p.Tick(ctx); err != nil || n != 0 {
		t.Fatalf("second Tick deleted %d, %v", n, err)
	}
}

// heldLedger is a nonce ledger of a process that has run NonceHold and
// recorded no claim: only the wall rule decides.
func heldLedger() *ingest.NonceLedger {
	mono := clockwork.NewFakeClock()
	l := ingest.NewNonceLedger(mono)
	mono.Advance(ingest.NonceHold)
	return l
}

// One tick drains a backlog larger than many batches (a busy fleet expires
// far more than a fixed batch count per tick).
func TestNoncePrunerDrainsBacklog(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	now := time.Unix(1767225600, 0)
	const old = 3*ingest.PruneBatch + 7
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for i := 0; i < old; i++ {
			if err := storage.ClaimNonce(ctx, tx, "env_a_0000000000000001", fmt.Sprintf("nonce-old-%012d", i), now.Add(-time.Hour)); err != nil {
				return err
			}
		}
		return storage.ClaimNonce(ctx, tx, "env_a_0000000000000001", "nonce-fresh-0000001", now)
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &ingest.NoncePruner{DB: db, Clock: clockwork.NewFakeClockAt(now), Log: zerolog.Nop(), Ledger: heldLedger()}
	if n, err := p.Tick(ctx); err != nil || n != old {
		t.Fatalf("Tick deleted %d, %v; want %d", n, err, old)
	}
	var left int
	if err := db.Read.QueryRow(`SELECT count(*) FROM nonces`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d nonces left, want the fresh one (%v)", left, err)
	}
}
