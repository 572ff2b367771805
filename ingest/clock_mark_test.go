package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// guardClock is the rig's stepped wall clock as the clock guard sees it:
// its fake clock is the monotonic clock.
type guardClock struct {
	*steppedClock
	origin time.Time
}

func (c guardClock) Monotonic() time.Duration { return c.FakeClock.Now().Sub(c.origin) }

// markRig is ingest over a real database with environment keys, the clock
// guard's high-water mark wired as the daemon wires it, and a wall clock
// that steps apart from the monotonic clock. start is a new process.
type markRig struct {
	t     *testing.T
	db    *storage.DB
	mono  *clockwork.FakeClock
	wall  *steppedClock
	keys  *ingest.Keyring
	raw   map[string][]byte // environment slug → HMAC key
	ids   map[string]string // environment slug → key id
	guard *clockguard.Guard
	svc   *ingest.Service
}

func newMarkRig(t *testing.T, envs ...string) *markRig {
	t.Helper()
	ctx := context.Background()
	db := storagetest.NewDB(t)
	mono := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	r := &markRig{t: t, db: db, mono: mono, wall: &steppedClock{FakeClock: mono}, raw: map[string][]byte{}, ids: map[string]string{}}
	sealer, err := ingest.OpenSealer(ctx, db, masterKey(t), mono.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.keys = ingest.NewKeyring(db, sealer, r.wall)
	for _, slug := range envs {
		storagetest.Environment(t, db, storage.Environment{Slug: slug})
		k, err := r.keys.Issue(ctx, slug)
		if err != nil {
			t.Fatal(err)
		}
		if r.raw[slug], err = protocol.DecodeKeyMaterial(k.KeyMaterial); err != nil {
			t.Fatal(err)
		}
		r.ids[slug] = k.KeyID
	}
	r.start()
	return r
}

// start is a new process, as daemon.openClockMark starts one: the guard
// reads the mark the database holds, then ingest serves.
func (r *markRig) start() {
	r.t.Helper()
	r.guard = clockguard.New(guardClock{steppedClock: r.wall, origin: r.mono.Now()})
	mark, err := storage.ClockMark(context.Background(), r.db.Read)
	if err != nil {
		r.t.Fatal(err)
	}
	r.guard.RestoreMark(mark)
	r.db.Writer.SetEventTime(r.guard.EventTime)
	r.svc = ingest.NewService(ingest.Config{DB: r.db, Keys: r.keys, Clock: r.wall, Monotonic: r.mono, Log: zerolog.Nop(),
		Contact: r.guard, Mark: r.guard})
}

func (r *markRig) pruner() *ingest.NoncePruner {
	return &ingest.NoncePruner{DB: r.db, Clock: r.wall, Log: zerolog.Nop(), Ledger: r.svc.NonceLedger()}
}

// beat is a heartbeat of env's deployment dep signed at the wall clock's
// now (its agent's clock agrees with the server's).
func (r *markRig) beat(env, dep string) signedHeartbeat {
	r.t.Helper()
	now := r.wall.Now()
	body, err := json.Marshal(protocol.HeartbeatV1{EnvironmentSlug: env, Deployment: protocol.HeartbeatDeploy{ID: dep},
		AgentVersion: "test/1", SentAt: now,
		Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now.Add(-time.Minute)}})
	if err != nil {
		r.t.Fatal(err)
	}
	h := signedHeartbeat{body: body, ts: strconv.FormatInt(now.Unix(), 10), nonce: protocol.NewNonce()}
	h.sig = protocol.Sign(r.raw[env], h.ts, h.nonce, http.MethodPost, ingest.HeartbeatRoute, body)
	return h
}

// send delivers env's heartbeat h: the status and refusal code ("" accepted).
func (r *markRig) send(env string, h signedHeartbeat) (int, string) {
	r.t.Helper()
	req := httptest.NewRequest(http.MethodPost, ingest.HeartbeatRoute, bytes.NewReader(h.body))
	req.Header.Set(protocol.HeaderKeyID, r.ids[env])
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

func (r *markRig) nonceStored(h signedHeartbeat) bool {
	r.t.Helper()
	var n int
	if err := r.db.Read.QueryRow(`SELECT count(*) FROM nonces WHERE nonce = ?`, h.nonce).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n == 1
}

func (r *markRig) storedMark() time.Time {
	r.t.Helper()
	m, err := storage.ClockMark(context.Background(), r.db.Read)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// TestReplayAfterStepBack: a heartbeat is accepted; the fleet heartbeats
// on for ten minutes and the pruner deletes its nonce; the process stops
// without a clean shutdown and restarts with its wall clock 541 s behind,
// where the captured request is inside the signing window again. It is
// refused 401 timestamp_skew, never 202: it was signed before the
// persisted high-water mark minus the window (docs/operations.md, "Signed
// ingest"). A fleet that went quiet right after it keeps its nonce
// instead: the replay is 409.
func TestReplayAfterStepBack(t *testing.T) {
	t.Run("nonce pruned", func(t *testing.T) {
		r := newMarkRig(t, "harbor")
		r.mono.Advance(time.Hour) // a process that has run long
		captured := r.beat("harbor", "dep-1")
		if code, rc := r.send("harbor", captured); code != http.StatusAccepted {
			t.Fatalf("heartbeat: %d %s", code, rc)
		}
		for range 20 { // ten minutes of the fleet's heartbeats
			r.mono.Advance(clockguard.HeartbeatInterval)
			if code, rc := r.send("harbor", r.beat("harbor", "dep-2")); code != http.StatusAccepted {
				t.Fatalf("heartbeat: %d %s", code, rc)
			}
		}
		if _, err := r.pruner().Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r.nonceStored(captured) {
			t.Fatal("the captured request's nonce was not pruned: the test proves nothing")
		}
		if m := r.storedMark(); m.Before(r.wall.Now().Add(-clockguard.MarkPersistEvery)) {
			t.Fatalf("persisted mark %s, want within %s of %s", m, clockguard.MarkPersistEvery, r.wall.Now())
		}

		signed := r.wall.Now().Add(-10 * time.Minute)
		r.mono.Advance(time.Minute) // restarted a minute later, 541 s behind
		r.wall.Step(-541 * time.Second)
		r.start()
		if age := r.wall.Now().Sub(signed); age > ingest.SkewWindow {
			t.Fatalf("the captured request is %s old by the stepped clock: outside the window, the test proves nothing", age)
		}
		if code, rc := r.send("harbor", captured); code == http.StatusAccepted || rc != "timestamp_skew" {
			t.Fatalf("the replay after the step back: %d %q, want 401 timestamp_skew", code, rc)
		}
		if st := r.guard.Evaluate(); st.Global == nil || st.Global.Reason != clockguard.ReasonBehindMark {
			t.Fatalf("guard %+v, want the fleet held for the start behind the mark", st.Global)
		}
	})
	t.Run("fleet quiet", func(t *testing.T) {
		r := newMarkRig(t, "harbor")
		r.mono.Advance(time.Hour)
		captured := r.beat("harbor", "dep-1")
		if code, rc := r.send("harbor", captured); code != http.StatusAccepted {
			t.Fatalf("heartbeat: %d %s", code, rc)
		}
		r.mono.Advance(20 * time.Minute)
		if _, err := r.pruner().Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !r.nonceStored(captured) {
			t.Fatal("a nonce not below the persisted mark minus the window was pruned")
		}
		r.wall.Step(-20*time.Minute + 59*time.Second) // 59 s after it, by the stepped clock
		r.start()
		if code, rc := r.send("harbor", captured); code != http.StatusConflict || rc != "nonce_replayed" {
			t.Fatalf("the replay after the step back: %d %q, want 409 nonce_replayed", code, rc)
		}
	})
}

// TestMarkOverride: a mark two hours ahead (written under a wrong clock)
// refuses every agent on the right one. Once agents of three environments
// have heartbeated on the server's clock for a heartbeat interval, their
// agreement overrides the mark: it is set back to the server clock and
// written with a clock-mark-override event, and their heartbeats are
// accepted. Two environments never override it.
func TestMarkOverride(t *testing.T) {
	for _, tc := range []struct {
		name     string
		envs     []string
		override bool
	}{
		{"three environments", []string{"harbor", "quay", "dock"}, true},
		{"two environments", []string{"harbor", "quay"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMarkRig(t, tc.envs...)
			ctx := context.Background()
			ahead := r.wall.Now().Add(2 * time.Hour)
			if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error { return storage.SetClockMark(ctx, tx, ahead) }); err != nil {
				t.Fatal(err)
			}
			r.start()
			accepted := 0
			for beat := range 5 {
				for i, env := range tc.envs {
					code, rc := r.send(env, r.beat(env, fmt.Sprintf("dep-%d", i)))
					switch {
					case code == http.StatusAccepted:
						accepted++
					case rc != "timestamp_skew":
						t.Fatalf("beat %d of %s: %d %s, want 202 or 401 timestamp_skew", beat, env, code, rc)
					}
				}
				r.mono.Advance(clockguard.HeartbeatInterval)
			}
			events, err := storage.ListLifecycleEvents(ctx, r.db.Read, storage.EventFilter{Kind: ingest.KindClockMarkOverride, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.override {
				if accepted != 0 || len(events) != 0 || !r.storedMark().Equal(ahead) {
					t.Fatalf("%d accepted, events %+v, mark %s: want nothing overridden", accepted, events, r.storedMark())
				}
				return
			}
			if accepted == 0 || len(events) != 1 {
				t.Fatalf("%d accepted, events %+v: want the override and its event", accepted, events)
			}
			if m := r.storedMark(); !m.Before(ahead) || m.After(r.wall.Now()) {
				t.Fatalf("persisted mark %s, want set back to the server clock (was %s)", m, ahead)
			}
		})
	}
}

// TestAgreeEnvironmentsMatchesTheGuard: ingest's copy of the override's
// environment count (its event message) is the guard's.
func TestAgreeEnvironmentsMatchesTheGuard(t *testing.T) {
	if ingest.AgreeEnvironments != clockguard.AgreeEnvironments {
		t.Fatalf("ingest says %d environments, the guard %d", ingest.AgreeEnvironments, clockguard.AgreeEnvironments)
	}
}
