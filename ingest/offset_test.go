package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// The clock offset's estimate (docs/operations.md, "Heartbeats and
// deadlines", the offset): an in-process Service on a fake server clock and
// agents whose clocks are behind it by an injected offset, stamping sentAt
// to the millisecond and signing its whole second as protocol.Client does.

// offsetHarness is one Service over a fresh database with one issued key
// per environment.
type offsetHarness struct {
	t     *testing.T
	db    *storage.DB
	clock *clockwork.FakeClock
	svc   *ingest.Service
	keys  map[string][2]string // slug -> key id, raw key
	rng   *rand.Rand
}

func newOffsetHarness(t *testing.T, envs ...string) *offsetHarness {
	t.Helper()
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	sealer, err := ingest.OpenSealer(ctx, db, masterKey(t), clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	keys := ingest.NewKeyring(db, sealer, clock)
	h := &offsetHarness{t: t, db: db, clock: clock, keys: map[string][2]string{}, rng: rand.New(rand.NewPCG(1, 2))}
	for _, env := range envs {
		storagetest.Environment(t, db, storage.Environment{Slug: env})
		issued, err := keys.Issue(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := protocol.DecodeKeyMaterial(issued.KeyMaterial)
		if err != nil {
			t.Fatal(err)
		}
		h.keys[env] = [2]string{issued.KeyID, string(raw)}
	}
	h.svc = ingest.NewService(ingest.Config{DB: db, Keys: keys, Clock: clock, Log: zerolog.Nop()})
	return h
}

// beat sends a heartbeat of dep in env from an agent whose clock is behind
// the server's by offset, arriving after a transit of up to 300 ms (which
// the estimate includes, as a real one does); it must be accepted.
func (h *offsetHarness) beat(env, dep string, offset time.Duration) {
	h.t.Helper()
	// Agents send at any millisecond: the server's clock moves on by up
	// to a second between heartbeats.
	h.clock.Advance(time.Duration(h.rng.IntN(1000)) * time.Millisecond)
	transit := time.Duration(h.rng.IntN(300)) * time.Millisecond
	sentAt := h.clock.Now().Add(-offset - transit)
	body, err := json.Marshal(protocol.HeartbeatV1{
		EnvironmentSlug: env, Deployment: protocol.HeartbeatDeploy{ID: dep}, AgentVersion: "chalupa-agent/test",
		SentAt: sentAt, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: sentAt.Add(-time.Minute)},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, ingest.HeartbeatRoute, bytes.NewReader(body))
	k := h.keys[env]
	protocol.Attach(r.Header, k[0], []byte(k[1]), strconv.FormatInt(sentAt.Unix(), 10), protocol.NewNonce(), http.MethodPost, ingest.HeartbeatRoute, body)
	v, refusal := h.svc.Authenticate(r, ingest.MaxHeartbeatBody)
	if refusal != nil {
		h.t.Fatalf("%s/%s refused: %+v", env, dep, refusal.Refusal)
	}
	if resp := h.svc.Heartbeat(context.Background(), v); resp.Status != http.StatusAccepted {
		h.t.Fatalf("%s/%s: %d %+v", env, dep, resp.Status, resp.Refusal)
	}
}

// within fails unless got is within 1 s of want.
func within(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d > time.Second || d < -time.Second {
		t.Errorf("%s: estimate %s, injected %s: more than 1 s off", what, got, want)
	} else {
		t.Logf("%s: estimate %s, injected %s, error %s", what, got, want, d)
	}
}

// TestClockOffsetEstimate: the estimate is within 1 s of the injected
// offset, for one environment and for three with offsets of their own
// (each environment's, and the fleet's median over all); four deployments
// are not enough, and a deployment not heard for 10 min no longer counts.
func TestClockOffsetEstimate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offsets map[string]time.Duration // environment -> its agents' offset
		fleet   time.Duration
	}{
		{"one environment", map[string]time.Duration{"demo-one": 4*time.Minute + 250*time.Millisecond}, 4*time.Minute + 250*time.Millisecond},
		{"three environments", map[string]time.Duration{"demo-a": 42 * time.Second, "demo-b": -17*time.Second - 400*time.Millisecond, "demo-c": 90 * time.Second},
			42 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var envs []string
			for env := range tc.offsets {
				envs = append(envs, env)
			}
			h := newOffsetHarness(t, envs...)
			for _, env := range envs {
				for i := range 4 {
					h.beat(env, fmt.Sprintf("dep-%d", i), tc.offsets[env])
				}
			}
			if est := h.svc.ClockOffset(); (est.Measured && len(envs) == 1) || len(est.Environments) != 0 {
				t.Fatalf("four deployments measured: %+v", est)
			}
			for _, env := range envs {
				for i := range 7 {
					h.beat(env, fmt.Sprintf("dep-%d", i), tc.offsets[env])
				}
			}
			est := h.svc.ClockOffset()
			if !est.Measured || est.Fleet.Deployments != 7*len(envs) || len(est.Environments) != len(envs) {
				t.Fatalf("estimate %+v", est)
			}
			within(t, "fleet", est.Fleet.Offset, tc.fleet)
			for _, e := range est.Environments {
				if e.Deployments != 7 {
					t.Errorf("%s: %d deployments, want 7", e.Environment, e.Deployments)
				}
				within(t, e.Environment, e.Offset, tc.offsets[e.Environment])
			}
			h.clock.Advance(ingest.OffsetWindow + time.Second)
			if est := h.svc.ClockOffset(); est.Measured {
				t.Fatalf("measured from heartbeats older than the window: %+v", est)
			}
		})
	}
}

// TestClockOffsetEvent: a clock-offset event when the fleet's offset
// passes 30 s, none while it stays, and one when it is back within 25 s
// (OffsetAlarm − OffsetHysteresis).
func TestClockOffsetEvent(t *testing.T) {
	ctx := context.Background()
	h := newOffsetHarness(t, "demo-events")
	w := &ingest.OffsetWatch{Service: h.svc, DB: h.db, Clock: h.clock, Log: zerolog.Nop()}
	fleet := func(offset time.Duration) {
		for i := range 5 {
			h.beat("demo-events", fmt.Sprintf("dep-%d", i), offset)
		}
	}
	for _, step := range []struct {
		offset time.Duration
		event  bool
		text   string
	}{
		{29 * time.Second, false, ""},
		{31 * time.Second, true, "more than 30s"},
		{45 * time.Second, false, ""},
		{-31 * time.Second, false, ""},
		{2 * time.Second, true, "back within 25s"},
		{1 * time.Second, false, ""},
	} {
		// Sequential: each step's state follows from the one before.
		fleet(step.offset)
		kind, err := w.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if (kind != "") != step.event {
			t.Fatalf("offset %s: event %q, want one: %t", step.offset, kind, step.event)
		}
		if !step.event {
			continue
		}
		evs, err := storage.ListLifecycleEvents(ctx, h.db.Read, storage.EventFilter{Kind: ingest.KindClockOffset, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || !bytes.Contains([]byte(evs[0].Message), []byte(step.text)) {
			t.Fatalf("offset %s: events %+v, want one saying %q", step.offset, evs, step.text)
		}
		h.clock.Advance(time.Second)
	}
	evs, err := storage.ListLifecycleEvents(ctx, h.db.Read, storage.EventFilter{Kind: ingest.KindClockOffset, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d clock-offset events, want 2", len(evs))
	}
}

// TestClockOffsetEventDoesNotFlap: a fleet whose offset hovers at the
// alarm (30.5 s, 29.5 s, … as a drifting clock does for hours, the median
// moving by its transits) records one clock-offset event, not one a
// minute: it is back only once within OffsetAlarm − OffsetHysteresis.
func TestClockOffsetEventDoesNotFlap(t *testing.T) {
	ctx := context.Background()
	h := newOffsetHarness(t, "demo-flap")
	w := &ingest.OffsetWatch{Service: h.svc, DB: h.db, Clock: h.clock, Log: zerolog.Nop()}
	fleet := func(offset time.Duration) {
		for i := range 5 {
			h.beat("demo-flap", fmt.Sprintf("dep-%d", i), offset)
		}
	}
	events := 0
	for i := range 10 {
		offset := ingest.OffsetAlarm + 500*time.Millisecond
		if i%2 == 1 {
			offset = ingest.OffsetAlarm - time.Second
		}
		fleet(offset)
		kind, err := w.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if kind != "" {
			events++
		}
		h.clock.Advance(time.Minute)
	}
	if events != 1 {
		t.Fatalf("%d clock-offset events while the offset hovered at %s, want 1", events, ingest.OffsetAlarm)
	}
	fleet(ingest.OffsetAlarm - ingest.OffsetHysteresis - 2*time.Second)
	if kind, err := w.Check(ctx); err != nil || kind != ingest.KindClockOffset {
		t.Fatalf("offset within %s: event %q (%v), want the one saying it is back", ingest.OffsetAlarm-ingest.OffsetHysteresis, kind, err)
	}
	evs, err := storage.ListLifecycleEvents(ctx, h.db.Read, storage.EventFilter{Kind: ingest.KindClockOffset, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || !bytes.Contains([]byte(evs[0].Message), []byte("back within 25s")) {
		t.Fatalf("events %+v, want two, the newest saying it is back within 25s", evs)
	}
}

// TestOffsetWatchRun: the loop waits, without a timer, for a heartbeat,
// then checks a minute later and records the event.
func TestOffsetWatchRun(t *testing.T) {
	h := newOffsetHarness(t, "demo-run")
	w := &ingest.OffsetWatch{Service: h.svc, DB: h.db, Clock: h.clock, Log: zerolog.Nop()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	count := func() int {
		evs, err := storage.ListLifecycleEvents(context.Background(), h.db.Read, storage.EventFilter{Kind: ingest.KindClockOffset, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	// No heartbeat: no timer.
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if err := h.clock.BlockUntilContext(short, 1); err == nil {
		t.Fatal("a timer with no heartbeat")
	}
	for i := range 5 {
		h.beat("demo-run", fmt.Sprintf("dep-%d", i), 40*time.Second)
	}
	if err := h.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if count() != 0 {
		t.Fatal("an event before the minute passed")
	}
	h.clock.Advance(time.Minute)
	deadline := time.Now().Add(5 * time.Second)
	for count() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no clock-offset event a minute after the heartbeats")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
