package alerter_test

// Faults of a real receiver (docs/operations.md, "Alerts", delivery): the
// alerter with the real webhook sink, posting to a local https server that
// verifies every request with the Standard Webhooks reference library. The
// alerter runs on an injected clock; the receiver's faults are real (an
// answer of 500, a request never answered, a connection reset).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// hookGuard bounds a wait that must end by itself: a hang guard, not a speed
// goal.
const hookGuard = 2 * time.Minute

// hookReceiver is a local https webhook receiver. Every request's
// signature is verified with the reference library; fault, when it
// returns true for a request, has answered it (or not) itself; any other
// request is accepted with 204, counted by its webhook-id as a receiver
// that drops duplicates would.
type hookReceiver struct {
	*httptest.Server
	t        *testing.T
	verifier *standardwebhooks.Webhook

	mu       sync.Mutex
	tries    []string // the webhook-id of every request, in order
	accepted map[string]int
	bodies   []webhook.Body // accepted, in order
	fault    func(w http.ResponseWriter, r *http.Request) bool
	hung     chan string
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	t.Helper()
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := &hookReceiver{t: t, verifier: v, accepted: map[string]int{}, hung: make(chan string, 100)}
	h.Server = httptest.NewTLSServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if err := h.verifier.Verify(b, r.Header); err != nil {
		h.t.Errorf("the reference library refuses a request's signature: %v", err)
	}
	var body webhook.Body
	if err := json.Unmarshal(b, &body); err != nil || body.ID != r.Header.Get("webhook-id") {
		h.t.Errorf("a request's body (%v) does not carry its webhook-id %q", err, r.Header.Get("webhook-id"))
	}
	h.mu.Lock()
	h.tries = append(h.tries, body.ID)
	fault := h.fault
	h.mu.Unlock()
	if fault != nil && fault(w, r) {
		return
	}
	h.mu.Lock()
	h.accepted[body.ID]++
	h.bodies = append(h.bodies, body)
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookReceiver) setFault(f func(w http.ResponseWriter, r *http.Request) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fault = f
}

func (h *hookReceiver) snapshot() (tries []string, accepted map[string]int, bodies []webhook.Body) {
	h.mu.Lock()
	defer h.mu.Unlock()
	acc := map[string]int{}
	for k, v := range h.accepted {
		acc[k] = v
	}
	return append([]string(nil), h.tries...), acc, append([]webhook.Body(nil), h.bodies...)
}

// answer500 answers 500, as a receiver with a failing backend does.
func answer500(w http.ResponseWriter, _ *http.Request) bool {
	w.WriteHeader(http.StatusInternalServerError)
	return true
}

// hang never answers: the request ends when the sender gives up.
func (h *hookReceiver) hang(_ http.ResponseWriter, r *http.Request) bool {
	h.hung <- r.Header.Get("webhook-id")
	<-r.Context().Done()
	return true
}

// resetConn takes the request and resets the TCP connection under the TLS
// session (SO_LINGER 0 sends RST) without answering.
func resetConn(w http.ResponseWriter, _ *http.Request) bool {
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := c.(*tls.Conn); ok {
		_ = tc.NetConn().(*net.TCPConn).SetLinger(0)
	}
	c.Close()
	return true
}

func hookSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// hookAlerter is an alerter on db and clock whose one sink is the real
// webhook sink posting to a new receiver.
func hookAlerter(t *testing.T, db *storage.DB, clock clockwork.Clock) (*alerter.Alerter, *hookReceiver) {
	t.Helper()
	secret := hookSecret(t)
	rcv := newHookReceiver(t, secret)
	sink, err := webhook.New(webhook.Config{URL: rcv.URL + "/hooks/T0KEN", Secret: secret, Client: rcv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return newAlerter(t, db, clock, nil, sink), rcv
}

// lockedBuffer is a log destination the send goroutines may write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// hookAlerterLogged is hookAlerter logging into the returned buffer.
func hookAlerterLogged(t *testing.T, db *storage.DB, clock clockwork.Clock) (*alerter.Alerter, *hookReceiver, *lockedBuffer) {
	t.Helper()
	secret := hookSecret(t)
	rcv := newHookReceiver(t, secret)
	sink, err := webhook.New(webhook.Config{URL: rcv.URL + "/hooks/T0KEN", Secret: secret, Client: rcv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	buf := &lockedBuffer{}
	a, err := alerter.New(alerter.Config{DB: db, Sinks: []alerts.Sink{sink}, Clock: clock, Log: zerolog.New(buf), Rand: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	return a, rcv, buf
}

// waitHookSends waits for the sends a tick started, with a guard against a
// hang.
func waitHookSends(t *testing.T, a *alerter.Alerter) {
	t.Helper()
	done := make(chan struct{})
	go func() { a.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(hookGuard):
		t.Fatal("the sends did not return")
	}
}

// TestRealReceiverFaults: a receiver that answers 500, one that never
// answers and one that resets the connection each cost the message one
// failed attempt, recorded as its kind (refused, timeout); the message is
// retried after its back-off with the same webhook-id and accepted once.
// The hung request ends at alerter.SendTimeout on the alerter's clock.
func TestRealReceiverFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   func(h *hookReceiver) func(http.ResponseWriter, *http.Request) bool
		errKind string
		// status is the log line's "status" field, "" when it has none.
		status string
	}{
		{"500", func(*hookReceiver) func(http.ResponseWriter, *http.Request) bool { return answer500 }, "refused", `"status":500`},
		{"timeout", func(h *hookReceiver) func(http.ResponseWriter, *http.Request) bool { return h.hang }, "timeout", ""},
		{"connection reset", func(*hookReceiver) func(http.ResponseWriter, *http.Request) bool { return resetConn }, "refused", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := storagetest.NewDB(t)
			clock := clockwork.NewFakeClockAt(t0)
			a, rcv, logs := hookAlerterLogged(t, db, clock)
			rcv.setFault(tc.fault(rcv))
			set(t, a, alerts.KindReaperTokenRefused, platform, true)
			rows, err := storage.PendingOutbox(ctx, db.Read, webhook.Name, 10)
			if err != nil || len(rows) != 1 {
				t.Fatalf("pending %v %v, want the fired message", rows, err)
			}
			id := rows[0].ID

			clock.Advance(alerter.Settle)
			if _, err := a.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.errKind == "timeout" {
				select {
				case <-rcv.hung:
				case <-time.After(hookGuard):
					t.Fatal("the receiver got no request")
				}
				if err := clock.BlockUntilContext(ctx, 1); err != nil { // the send's timeout timer
					t.Fatal(err)
				}
				clock.Advance(alerter.SendTimeout)
			}
			waitHookSends(t, a)
			row, err := storage.OutboxByID(ctx, db.Read, id)
			if err != nil || row.Attempts != 1 || row.LastError != tc.errKind || !row.DeliveredAt.IsZero() {
				t.Fatalf("after the fault: %d attempts, error %q, delivered %v (%v); want 1, %s, not delivered",
					row.Attempts, row.LastError, row.DeliveredAt, err, tc.errKind)
			}
			line := logs.String()
			if !strings.Contains(line, `"message":"alert delivery failed"`) || !strings.Contains(line, `"error":"`+tc.errKind+`"`) {
				t.Errorf("log %q, want an alert delivery failed line of kind %s", line, tc.errKind)
			}
			if got := strings.Contains(line, `"status":`); tc.status == "" && got || tc.status != "" && !strings.Contains(line, tc.status) {
				t.Errorf("log %q, want the status field %q (none when empty)", line, tc.status)
			}

			rcv.setFault(nil)
			for i := 0; i < 10 && pending(t, db) > 0; i++ {
				clock.Advance(alerter.BackoffBase)
				if _, err := a.Tick(ctx); err != nil {
					t.Fatal(err)
				}
				waitHookSends(t, a)
			}
			tries, accepted, bodies := rcv.snapshot()
			if len(tries) != 2 || tries[0] != id || tries[1] != id {
				t.Fatalf("webhook-ids of the requests %v, want %s twice (the fault, then the retry)", tries, id)
			}
			if len(accepted) != 1 || accepted[id] != 1 || bodies[0].Event != alerts.Fired || bodies[0].Kind != alerts.KindReaperTokenRefused {
				t.Fatalf("accepted %v, want the fired reaper-token-refused message %s once", accepted, id)
			}
			if row, err := storage.OutboxByID(ctx, db.Read, id); err != nil || row.DeliveredAt.IsZero() {
				t.Fatalf("the message after its retry: %+v %v, want delivered", row, err)
			}
		})
	}
}

// TestRealReceiverDownTenMinutes: the receiver answers 503 for the first
// 10 minutes on the alerter's clock while conditions start and end on two
// subjects; once it is back, it has accepted every message exactly once
// per webhook-id, and each subject's messages in the order their
// conditions changed.
func TestRealReceiverDownTenMinutes(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	a, rcv := hookAlerter(t, db, clock)
	back := t0.Add(10 * time.Minute)
	rcv.setFault(func(w http.ResponseWriter, _ *http.Request) bool {
		if clock.Now().Before(back) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	b1, b2 := alerts.Subject{Kind: alerts.SubjectBox, ID: "b1"}, alerts.Subject{Kind: alerts.SubjectBox, ID: "b2"}
	steps := []struct {
		kind    string
		subject alerts.Subject
		holds   bool
	}{
		{alerts.KindAgentUpgradeFailed, b1, true},
		{alerts.KindJobFailed, b2, true},
		{alerts.KindJobFailed, b1, true},
		{alerts.KindAgentUpgradeFailed, b1, false},
		{alerts.KindAgentUpgradeFailed, b2, true},
		{alerts.KindJobFailed, b2, false},
	}
	for _, s := range steps {
		set(t, a, s.kind, s.subject, s.holds)
		tick(t, a, clock)
		clock.Advance(90 * time.Second)
	}
	if !clock.Now().Before(back) {
		t.Fatalf("the conditions changed until %v, not all while the receiver was down", clock.Now())
	}
	if _, accepted, _ := rcv.snapshot(); len(accepted) != 0 {
		t.Fatalf("the receiver accepted %v while down", accepted)
	}
	for i := 0; i < 200 && pending(t, db) > 0; i++ {
		clock.Advance(30 * time.Second)
		tick(t, a, clock)
	}
	if n := pending(t, db); n != 0 {
		t.Fatalf("%d messages pending 100 minutes after the receiver came back", n)
	}
	tries, accepted, bodies := rcv.snapshot()
	for id, n := range accepted {
		if n != 1 {
			t.Errorf("message %s accepted %d times", id, n)
		}
	}
	if len(tries) <= len(accepted) {
		t.Errorf("%d requests for %d messages: the receiver was never down", len(tries), len(accepted))
	}
	order := map[alerts.Subject][]string{}
	for _, b := range bodies {
		for _, s := range b.Subjects {
			order[s] = append(order[s], string(b.Event)+" "+b.Kind)
		}
	}
	want := map[alerts.Subject][]string{}
	for _, s := range steps {
		ev := alerts.Fired
		if !s.holds {
			ev = alerts.Resolved
		}
		want[s.subject] = append(want[s.subject], string(ev)+" "+s.kind)
	}
	for _, s := range []alerts.Subject{b1, b2} {
		if fmt.Sprint(order[s]) != fmt.Sprint(want[s]) {
			t.Errorf("%s's messages as accepted %v, want %v", s, order[s], want[s])
		}
	}
}

// TestRealReceiverExpiry: a receiver down for 24 hours on the alerter's
// clock never gets the message accepted; it expires and raises
// alert-delivery-failing, whose fired and resolved messages the receiver
// accepts once it is back (each once), never the expired one.
func TestRealReceiverExpiry(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	a, rcv := hookAlerter(t, db, clock)
	rcv.setFault(answer500)
	set(t, a, alerts.KindReplicaFailing, platform, true)
	rows, _ := storage.PendingOutbox(ctx, db.Read, webhook.Name, 10)
	id := rows[0].ID
	for clock.Now().Before(t0.Add(alerter.MaxAge)) {
		tick(t, a, clock)
		clock.Advance(10 * time.Minute)
	}
	tick(t, a, clock)
	if row, err := storage.OutboxByID(ctx, db.Read, id); err != nil || row.ExpiredAt.IsZero() {
		t.Fatalf("the message after 24 h: %+v %v, want expired", row, err)
	}
	if _, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindAlertDeliveryFailing, alerts.SubjectPlatform, ""); err != nil {
		t.Fatalf("alert-delivery-failing after the expiry: %v, want open", err)
	}
	rcv.setFault(nil)
	for i := 0; i < 20 && pending(t, db) > 0; i++ {
		clock.Advance(alerter.BackoffMax)
		tick(t, a, clock)
	}
	clock.Advance(alerter.Coalesce)
	tick(t, a, clock)
	_, accepted, bodies := rcv.snapshot()
	if accepted[id] != 0 {
		t.Errorf("the expired message %s was accepted", id)
	}
	for mid, n := range accepted {
		if n != 1 {
			t.Errorf("message %s accepted %d times", mid, n)
		}
	}
	var got []string
	for _, b := range bodies {
		if b.Kind == alerts.KindAlertDeliveryFailing { // the open replica-failing alert repeats hourly meanwhile
			got = append(got, string(b.Event)+" "+b.Kind)
		}
	}
	if fmt.Sprint(got) != "[fired alert-delivery-failing resolved alert-delivery-failing]" {
		t.Errorf("alert-delivery-failing's messages accepted after the receiver came back: %v, want fired then resolved", got)
	}
}
