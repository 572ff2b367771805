package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// steppedClock is a wall clock that can be stepped apart from the fake
// clock it reads, which stays the monotonic clock: Now is the fake time
// plus the steps so far.
type steppedClock struct {
	*clockwork.FakeClock
	mu     sync.Mutex
	offset time.Duration
}

func (c *steppedClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.FakeClock.Now().Add(c.offset)
}

func (c *steppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *steppedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// nonceRig is an ingest service on the shared-key path over a real
// database, whose wall clock steps apart from its monotonic clock.
type nonceRig struct {
	t    *testing.T
	db   *storage.DB
	mono *clockwork.FakeClock
	wall *steppedClock
	svc  *ingest.Service
	key  []byte
}

func newNonceRig(t *testing.T) *nonceRig {
	db := storagetest.NewDB(t)
	storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	mono := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	r := &nonceRig{t: t, db: db, mono: mono, wall: &steppedClock{FakeClock: mono}, key: []byte("a shared ingest key of the test rig")}
	r.restart()
	return r
}

// restart replaces the service, as a new process does: a new ledger.
func (r *nonceRig) restart() {
	r.svc = ingest.NewService(ingest.Config{DB: r.db, SharedKey: r.key, Clock: r.wall, Monotonic: r.mono, Log: zerolog.Nop()})
}

func (r *nonceRig) pruner() *ingest.NoncePruner {
	return &ingest.NoncePruner{DB: r.db, Clock: r.wall, Log: zerolog.Nop(), Ledger: r.svc.NonceLedger()}
}

// signed is a heartbeat signed at the wall clock's now with a fresh nonce:
// the same bytes sent twice are a replay.
type signedHeartbeat struct {
	body           []byte
	ts, nonce, sig string
}

func (r *nonceRig) heartbeat(dep string) signedHeartbeat {
	r.t.Helper()
	now := r.wall.Now()
	body, err := json.Marshal(protocol.HeartbeatV1{EnvironmentSlug: "demo-harbor", Deployment: protocol.HeartbeatDeploy{ID: dep},
		AgentVersion: "test/1", SentAt: now,
		Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now.Add(-time.Minute)}})
	if err != nil {
		r.t.Fatal(err)
	}
	h := signedHeartbeat{body: body, ts: strconv.FormatInt(now.Unix(), 10), nonce: protocol.NewNonce()}
	h.sig = protocol.Sign(r.key, h.ts, h.nonce, http.MethodPost, "/api/ingest/heartbeat", body)
	return h
}

// send delivers h and returns the status and refusal code ("" accepted).
func (r *nonceRig) send(h signedHeartbeat) (int, string) {
	r.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/api/ingest/heartbeat", bytes.NewReader(h.body))
	req.Header.Set(protocol.HeaderTimestamp, h.ts)
	req.Header.Set(protocol.HeaderNonce, h.nonce)
	req.Header.Set(protocol.HeaderSignature, h.sig)
	v, refusal := r.svc.Authenticate(req, ingest.MaxHeartbeatBody)
	resp := refusal
	if resp == nil {
		got := r.svc.Heartbeat(context.Background(), v)
		resp = &got
	}
	if resp.Refusal != nil {
		return resp.Status, resp.Refusal.Code
	}
	return resp.Status, ""
}

func (r *nonceRig) nonces() int {
	r.t.Helper()
	var n int
	if err := r.db.Read.QueryRow(`SELECT count(*) FROM nonces`).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

func (r *nonceRig) tick(want int64) {
	r.t.Helper()
	if n, err := r.pruner().Tick(context.Background()); err != nil || n != want {
		r.t.Fatalf("Tick deleted %d, %v; want %d", n, err, want)
	}
}

// TestNonceHeldAcrossWallSteps: a nonce is held NonceHold by the
// monotonic clock and by wall time (docs/operations.md, "Signed ingest"),
// so a replay is refused 409 across wall-clock steps either way.
func TestNonceHeldAcrossWallSteps(t *testing.T) {
	t.Run("forward then back", func(t *testing.T) {
		r := newNonceRig(t)
		r.mono.Advance(time.Hour) // a process that has run long
		h := r.heartbeat("dep-1")
		if code, rc := r.send(h); code != http.StatusAccepted {
			t.Fatalf("heartbeat: %d %s", code, rc)
		}
		// +10 min: by wall time alone the nonce is past the window.
		r.wall.Step(10 * time.Minute)
		r.tick(0)
		// Stepped back: the request is inside the window again, and
		// its nonce is still held.
		r.wall.Step(-10 * time.Minute)
		if code, rc := r.send(h); code != http.StatusConflict || rc != "nonce_replayed" {
			t.Fatalf("replay after the steps: %d %s, want 409 nonce_replayed", code, rc)
		}
		// Held NonceHold on both clocks (plus the ledger's bucket): pruned,
		// and the replay is now refused for its timestamp.
		r.mono.Advance(ingest.NonceHold + 10*time.Second)
		r.tick(1)
		if code, rc := r.send(h); code != http.StatusUnauthorized || rc != "timestamp_skew" {
			t.Fatalf("replay after the hold: %d %s, want 401 timestamp_skew", code, rc)
		}
	})
	t.Run("back", func(t *testing.T) {
		r := newNonceRig(t)
		r.mono.Advance(time.Hour)
		h := r.heartbeat("dep-2")
		if code, rc := r.send(h); code != http.StatusAccepted {
			t.Fatalf("heartbeat: %d %s", code, rc)
		}
		// −10 min, then held NonceHold by the monotonic clock: wall
		// time says the request is 200 s old, so it is kept.
		r.wall.Step(-10 * time.Minute)
		r.mono.Advance(ingest.NonceHold + 40*time.Second)
		r.tick(0)
		if code, rc := r.send(h); code != http.StatusConflict || rc != "nonce_replayed" {
			t.Fatalf("replay after the step: %d %s, want 409 nonce_replayed", code, rc)
		}
	})
}

// TestNoncePrunerHoldsAfterRestart: after a restart nothing is pruned
// until the process has run NonceHold (a nonce may have been claimed a
// moment before the stop, and the wall clock may have stepped meanwhile);
// then the old nonces go.
func TestNoncePrunerHoldsAfterRestart(t *testing.T) {
	r := newNonceRig(t)
	ctx := context.Background()
	err := r.db.Writer.Do(ctx, func(tx storage.Tx) error {
		for i := range 3 {
			if err := storage.ClaimNonce(ctx, tx, "shared", fmt.Sprintf("nonce-old-%012d", i), r.wall.Now().Add(-time.Hour)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r.restart()
	r.tick(0)
	r.mono.Advance(ingest.NonceHold - time.Second)
	r.tick(0)
	if n := r.nonces(); n != 3 {
		t.Fatalf("%d nonces within NonceHold of the restart, want 3", n)
	}
	r.mono.Advance(time.Second)
	r.tick(3)
}

// TestNonceLedgerClockSetBack: a claim recorded on a clock set back before
// the ledger's start (a fake clock in a test; never a real monotonic clock)
// is recorded, not a panic, and holds back the pruner's bound like any
// other claim.
func TestNonceLedgerClockSetBack(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	l := ingest.NewNonceLedger(clock)
	clock.Advance(-45 * time.Minute)
	signed := clock.Now()
	l.Claimed(signed)
	clock.Advance(45*time.Minute + ingest.NonceHold)
	cut, ok := l.Cutoff(clock.Now())
	if !ok || cut.After(signed) {
		t.Fatalf("Cutoff = %s, %v; want at or before the claim signed at %s", cut, ok, signed)
	}
}
