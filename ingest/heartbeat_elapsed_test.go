package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
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

// The tests of deadlines from elapsed time (docs/operations.md, "Heartbeats
// and deadlines"): an in-process Service on a fake server clock, and
// agents whose clocks are offset from it, signing as protocol.Client does.

// elapsedEnv is the environment every test here reports to.
const elapsedEnv = "demo-elapsed"

// elapsedHarness is one Service over a fresh database, its fake server
// clock and one issued key of elapsedEnv.
type elapsedHarness struct {
	t     *testing.T
	db    *storage.DB
	clock *clockwork.FakeClock
	svc   *ingest.Service
	keyID string
	key   []byte
}

func newElapsedHarness(t *testing.T) *elapsedHarness {
	t.Helper()
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	sealer, err := ingest.OpenSealer(ctx, db, masterKey(t), clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	keys := ingest.NewKeyring(db, sealer, clock)
	storagetest.Environment(t, db, storage.Environment{Slug: elapsedEnv})
	issued, err := keys.Issue(ctx, elapsedEnv)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := protocol.DecodeKeyMaterial(issued.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	svc := ingest.NewService(ingest.Config{DB: db, Keys: keys, Clock: clock, Log: zerolog.Nop()})
	return &elapsedHarness{t: t, db: db, clock: clock, svc: svc, keyID: issued.KeyID, key: raw}
}

// answer is what the service answered one heartbeat.
type answer struct {
	status   int
	code     string
	deadline time.Time // the 202's idleDeadlineAt
}

// post sends body signed at signedAt (whole seconds, as the header
// carries them) with nonce, arriving now on the server's clock.
func (h *elapsedHarness) post(body []byte, signedAt time.Time, nonce string) answer {
	h.t.Helper()
	r := httptest.NewRequest(http.MethodPost, ingest.HeartbeatRoute, bytes.NewReader(body))
	protocol.Attach(r.Header, h.keyID, h.key, strconv.FormatInt(signedAt.Unix(), 10), nonce, http.MethodPost, ingest.HeartbeatRoute, body)
	v, refusal := h.svc.Authenticate(r, ingest.MaxHeartbeatBody)
	resp := refusal
	if resp == nil {
		out := h.svc.Heartbeat(context.Background(), v)
		resp = &out
	}
	a := answer{status: resp.Status}
	if resp.Refusal != nil {
		a.code = resp.Refusal.Code
	}
	if acc, ok := resp.Body.(protocol.HeartbeatAccepted); ok {
		a.deadline = acc.IdleDeadlineAt
	}
	return a
}

// beat is a heartbeat body of deployment dep.
func beat(dep string, sentAt, activity time.Time, limitMinutes int64) []byte {
	b, err := json.Marshal(protocol.HeartbeatV1{
		EnvironmentSlug: elapsedEnv,
		Deployment:      protocol.HeartbeatDeploy{ID: dep},
		AgentVersion:    "chalupa-agent/test",
		SentAt:          sentAt,
		Reaper:          protocol.ReaperObservation{LimitMinutes: limitMinutes, LastActivityAt: activity},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// due reports whether the reaper's own due query names dep at at.
func (h *elapsedHarness) due(dep string, at time.Time) bool {
	h.t.Helper()
	cs, err := storage.ReaperDue(context.Background(), h.db.Read, at, 10*time.Minute, 100)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, c := range cs {
		if c.DeploymentID == dep {
			return true
		}
	}
	return false
}

// deployment reads dep's stored idle deadline and CI flag.
func (h *elapsedHarness) deployment(dep string) (deadline time.Time, ci bool) {
	h.t.Helper()
	var d int64
	if err := h.db.Read.QueryRow(`SELECT idle_deadline_at, ci_active FROM deployments WHERE id = ?`, dep).Scan(&d, &ci); err != nil {
		h.t.Fatalf("read deployment %s: %v", dep, err)
	}
	return time.UnixMilli(d).UTC(), ci
}

// count is a count(*) query's answer.
func (h *elapsedHarness) count(query string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.db.Read.QueryRow(query, args...).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// agent is one droplet's agent: its clock is the server's plus offset; it
// tracks its last activity as the agent does (whole seconds, on its own
// clock) and sends sentAt and the signature from the same instant.
type agent struct {
	h        *elapsedHarness
	dep      string
	offset   time.Duration
	limit    int64
	activity time.Time // on the agent's clock
}

func (a *agent) now() time.Time { return a.h.clock.Now().Add(a.offset).UTC() }

// active records activity now.
func (a *agent) active() { a.activity = a.now().Truncate(time.Second) }

// send sends one heartbeat.
func (a *agent) send() answer {
	now := a.now()
	return a.h.post(beat(a.dep, now, a.activity, a.limit), now, protocol.NewNonce())
}

// TestHeartbeatDeadlineFromElapsedTime: agents whose own clocks are 4
// minutes behind and 4 minutes ahead of the server's, heartbeating every
// 30 s with a 2-minute limit. While their users are active, the stored
// deadline always lies a whole limit ahead of the server's clock (never
// reapable); once idle, the deadline is the moment of their last activity
// on the server's clock plus the limit, within one heartbeat interval. On
// today's code the agent behind had every deadline 4 minutes in the past
// and the agent ahead kept its droplet 4 minutes too long.
func TestHeartbeatDeadlineFromElapsedTime(t *testing.T) {
	const interval = 30 * time.Second
	const limit = 2
	for _, offset := range []time.Duration{-4 * time.Minute, 4 * time.Minute} {
		t.Run("agent clock "+offset.String(), func(t *testing.T) {
			h := newElapsedHarness(t)
			a := &agent{h: h, dep: "dep-" + offset.String(), offset: offset, limit: limit}
			// Active for 5 minutes: a person at the terminal at every beat.
			for range 10 {
				a.active()
				if r := a.send(); r.status != http.StatusAccepted {
					t.Fatalf("heartbeat: %+v", r)
				}
				d, _ := h.deployment(a.dep)
				if min := h.clock.Now().Add(limit*time.Minute - time.Second); d.Before(min) {
					t.Fatalf("active agent's deadline %s is less than a limit ahead of the server's clock %s", d, h.clock.Now())
				}
				if h.due(a.dep, h.clock.Now().Add(interval)) {
					t.Fatalf("active agent's deployment is due before its next heartbeat (deadline %s)", d)
				}
				h.clock.Advance(interval)
			}
			// The person leaves right after this beat's activity.
			a.active()
			left := h.clock.Now().Truncate(time.Second)
			right := left.Add(limit * time.Minute)
			for h.clock.Now().Before(right) {
				if r := a.send(); r.status != http.StatusAccepted {
					t.Fatalf("heartbeat: %+v", r)
				}
				h.clock.Advance(interval)
			}
			d, _ := h.deployment(a.dep)
			if d.Before(right) || d.After(right.Add(interval)) {
				t.Fatalf("idle agent's deadline %s, want within one interval after %s (activity on the server's clock + the limit)", d, right)
			}
			if h.due(a.dep, right.Add(-time.Second)) || !h.due(a.dep, right.Add(interval)) {
				t.Fatalf("idle agent's deployment (deadline %s) is due before %s or not due an interval after it", d, right)
			}
		})
	}
}

// TestHeartbeatAgentClockStep: an agent whose clock steps after its first
// heartbeat. Idle, a step of +4 minutes (inside the signing window) leaves
// its deadline exactly where it was; active, it gets the deadline a twin
// agent without the step gets; +10 minutes is refused timestamp_skew and
// leaves the deadline too. On today's code the active agent's deadline
// moved 4 minutes later with its clock.
func TestHeartbeatAgentClockStep(t *testing.T) {
	for _, tc := range []struct {
		name   string
		step   time.Duration
		active bool
		status int
	}{
		{"idle, +4m", 4 * time.Minute, false, http.StatusAccepted},
		{"active, +4m", 4 * time.Minute, true, http.StatusAccepted},
		{"idle, +10m", 10 * time.Minute, false, http.StatusUnauthorized},
		{"active, +10m", 10 * time.Minute, true, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newElapsedHarness(t)
			stepped := &agent{h: h, dep: "dep-stepped", limit: 30}
			twin := &agent{h: h, dep: "dep-twin", limit: 30}
			for _, a := range []*agent{stepped, twin} {
				a.active()
				if r := a.send(); r.status != http.StatusAccepted {
					t.Fatalf("first heartbeat: %+v", r)
				}
			}
			before, _ := h.deployment(stepped.dep)
			h.clock.Advance(30 * time.Second)
			stepped.offset = tc.step
			for _, a := range []*agent{stepped, twin} {
				if tc.active {
					a.active()
				}
				r := a.send()
				if a == twin && r.status != http.StatusAccepted {
					t.Fatalf("twin's heartbeat: %+v", r)
				}
				if a == stepped && r.status != tc.status {
					t.Fatalf("stepped agent's heartbeat: %+v, want status %d", r, tc.status)
				}
			}
			got, _ := h.deployment(stepped.dep)
			want := before
			if tc.active && tc.status == http.StatusAccepted {
				want, _ = h.deployment(twin.dep)
			}
			if !got.Equal(want) {
				t.Fatalf("stepped agent's deadline %s, want %s (first deadline %s)", got, want, before)
			}
		})
	}
}

// TestHeartbeatReplayAndLateDelivery: with a history of heartbeats on time,
// none of these extends the deadline, and each is still answered 202 and
// stored: the body of an accepted heartbeat sent again 10 minutes later
// with a fresh nonce and signature; a heartbeat stamped and signed at once
// but delivered 4 minutes later (inside the signing window; its transit is
// late, so it moves nothing — not its CI flag either); a spooled body
// stamped 10 minutes before it is signed and sent (its age is taken
// against the signed timestamp, so the activity it reports, already
// stored, lands where it was). The same bytes again are 409, and 10
// minutes later timestamp_skew.
func TestHeartbeatReplayAndLateDelivery(t *testing.T) {
	h := newElapsedHarness(t)
	a := &agent{h: h, dep: "dep-replay", limit: 30}
	a.active()
	var first []byte
	var firstAt time.Time
	var firstNonce string
	for i := range 5 {
		now := a.now()
		body := beat(a.dep, now, a.activity, a.limit)
		nonce := protocol.NewNonce()
		if r := h.post(body, now, nonce); r.status != http.StatusAccepted {
			t.Fatalf("heartbeat %d: %+v", i, r)
		}
		if i == 0 {
			first, firstAt, firstNonce = body, now, nonce
		}
		h.clock.Advance(30 * time.Second)
	}
	stored, _ := h.deployment(a.dep)
	if r := h.post(first, firstAt, firstNonce); r.status != http.StatusConflict || r.code != "nonce_replayed" {
		t.Fatalf("the same bytes again: %+v, want 409 nonce_replayed", r)
	}
	rows := h.count(`SELECT count(*) FROM heartbeats`)

	// Delayed in transit: made and signed 4 minutes before it arrives,
	// reporting activity at that moment and CI.
	made := a.now()
	delayed, _ := json.Marshal(protocol.HeartbeatV1{
		EnvironmentSlug: elapsedEnv, Deployment: protocol.HeartbeatDeploy{ID: a.dep}, AgentVersion: "chalupa-agent/test", SentAt: made,
		Reaper: protocol.ReaperObservation{LimitMinutes: a.limit, LastActivityAt: made.Truncate(time.Second), CIActive: true},
	})
	h.clock.Advance(4 * time.Minute)
	if r := h.post(delayed, made, protocol.NewNonce()); r.status != http.StatusAccepted || !r.deadline.Equal(stored) {
		t.Fatalf("heartbeat delivered 4 minutes late: %+v, want 202 with the stored deadline %s", r, stored)
	}
	if d, ci := h.deployment(a.dep); !d.Equal(stored) || ci {
		t.Fatalf("heartbeat delivered 4 minutes late moved the deployment: deadline %s (was %s), CI %v", d, stored, ci)
	}
	if n := h.count(`SELECT count(*) FROM heartbeats WHERE deployment_id = ? AND late = 1`, a.dep); n != 1 {
		t.Fatalf("%d heartbeat rows marked late, want the delayed one", n)
	}

	h.clock.Advance(6 * time.Minute) // 10 minutes after the delayed one was made
	for _, tc := range []struct {
		name   string
		body   []byte
		signed time.Time
		status int
		code   string
	}{
		{"an accepted body 10 minutes later, signed afresh", first, a.now(), http.StatusAccepted, ""},
		{"a spooled body stamped 10 minutes before it is signed", beat(a.dep, made, a.activity, a.limit), a.now(), http.StatusAccepted, ""},
		{"an accepted request's bytes 10 minutes later", first, firstAt, http.StatusUnauthorized, "timestamp_skew"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.post(tc.body, tc.signed, protocol.NewNonce())
			if r.status != tc.status || r.code != tc.code {
				t.Fatalf("%+v, want %d %q", r, tc.status, tc.code)
			}
			if d, _ := h.deployment(a.dep); !d.Equal(stored) {
				t.Fatalf("deadline moved from %s to %s", stored, d)
			}
		})
	}
	if n := h.count(`SELECT count(*) FROM heartbeats`); n != rows+3 {
		t.Fatalf("%d heartbeat rows, want %d: every accepted one is stored", n, rows+3)
	}
}

// TestHeartbeatSentAtAgainstSignedTimestamp: the age is taken against
// sentAt when it lies within 5 s of the signed timestamp, and against the
// signed timestamp beyond (a retry protocol.Client signed afresh, a body
// stamped before it was signed). The agent's clock is 2 minutes behind the
// server's, so today's deadline (its lastActivityAt + the limit) shows.
func TestHeartbeatSentAtAgainstSignedTimestamp(t *testing.T) {
	const limit = 30
	for _, tc := range []struct {
		name     string
		sentAt   time.Duration // from the signed timestamp
		wantAged time.Duration // the age the deadline is taken back by
	}{
		{"sentAt with the signature", 0, time.Minute},
		{"sentAt 5 s before the signature", -5 * time.Second, time.Minute},
		{"sentAt 6 s before the signature", -6 * time.Second, time.Minute + 6*time.Second},
		{"sentAt 5 s after the signature", 5 * time.Second, time.Minute},
		{"sentAt 6 s after the signature", 6 * time.Second, time.Minute - 6*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newElapsedHarness(t)
			signed := h.clock.Now().Add(-2 * time.Minute)
			sentAt := signed.Add(tc.sentAt)
			activity := sentAt.Add(-time.Minute)
			r := h.post(beat("dep-sent", sentAt, activity, limit), signed, protocol.NewNonce())
			want := h.clock.Now().Add(-tc.wantAged + limit*time.Minute)
			if r.status != http.StatusAccepted || !r.deadline.Equal(want) {
				t.Fatalf("%+v, want 202 with deadline %s", r, want)
			}
			if d, _ := h.deployment("dep-sent"); !d.Equal(want) {
				t.Fatalf("stored deadline %s, want %s", d, want)
			}
		})
	}
}

// TestHeartbeatActivityAge: an activity more than 10 minutes after sentAt
// (MaxActivityAhead) or more than 7 days before it is 422 invalid_body with
// nothing written — no heartbeat, no deployment, no nonce; within those
// bounds it is accepted, an activity after sentAt (an agent clock that
// stepped back) as activity at the arrival, never later. The age is the
// one heartbeatReference measures: a sentAt 6 s from the signature cannot
// move the bound.
func TestHeartbeatActivityAge(t *testing.T) {
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		name     string
		sentAt   time.Duration // from the signed timestamp (the server's now)
		activity time.Duration // from sentAt
		status   int
	}{
		{"activity a second after sentAt (a clock stepped back)", 0, time.Second, http.StatusAccepted},
		{"activity 10 minutes after sentAt", 0, ingest.MaxActivityAhead, http.StatusAccepted},
		{"activity 10 minutes and a millisecond after sentAt", 0, ingest.MaxActivityAhead + time.Millisecond, http.StatusUnprocessableEntity},
		{"activity a year after sentAt", 0, 365 * 24 * time.Hour, http.StatusUnprocessableEntity},
		{"activity at sentAt", 0, 0, http.StatusAccepted},
		{"activity 7 days before sentAt", 0, -week, http.StatusAccepted},
		{"activity 7 days and a second before sentAt", 0, -week - time.Second, http.StatusUnprocessableEntity},
		{"activity 11 minutes after the signature, before a sentAt 6 s ahead", 6 * time.Second, 11*time.Minute - 6*time.Second - time.Second, http.StatusUnprocessableEntity},
		{"activity a minute before a sentAt a week and 2 minutes before the signature", -week - 2*time.Minute, -time.Minute, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newElapsedHarness(t)
			signed := h.clock.Now()
			sentAt := signed.Add(tc.sentAt)
			r := h.post(beat("dep-age", sentAt, sentAt.Add(tc.activity), 30), signed, protocol.NewNonce())
			if r.status != tc.status {
				t.Fatalf("%+v, want %d", r, tc.status)
			}
			if r.status == http.StatusAccepted {
				// Never later than its arrival: an activity after sentAt
				// is taken as activity now.
				if want := signed.Add(30 * time.Minute); r.deadline.After(want) {
					t.Fatalf("deadline %s, want at most the arrival + the limit %s", r.deadline, want)
				}
				return
			}
			if r.code != "invalid_body" {
				t.Fatalf("code %q, want invalid_body", r.code)
			}
			for _, table := range []string{"heartbeats", "deployments", "nonces"} {
				if n := h.count(`SELECT count(*) FROM ` + table); n != 0 {
					t.Fatalf("a refused heartbeat wrote %d rows to %s", n, table)
				}
			}
		})
	}
}

// TestHeartbeatDeadlineCappedAtArrival: a deployment whose stored activity
// lies ahead of the server's clock (written before a step back, or by
// today's code from an agent clock ahead) gets a deadline of no more than
// the heartbeat's arrival plus its limit.
func TestHeartbeatDeadlineCappedAtArrival(t *testing.T) {
	h := newElapsedHarness(t)
	a := &agent{h: h, dep: "dep-cap", limit: 30}
	a.active()
	if r := a.send(); r.status != http.StatusAccepted {
		t.Fatalf("first heartbeat: %+v", r)
	}
	ahead := h.clock.Now().Add(2 * time.Hour).UnixMilli()
	if err := h.db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		_, err := tx.Exec(`UPDATE deployments SET last_activity_at = ?, idle_deadline_at = ? WHERE id = ?`, ahead, ahead+30*60_000, a.dep)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(30 * time.Second)
	r := a.send()
	want := h.clock.Now().Add(30 * time.Minute)
	if r.status != http.StatusAccepted || !r.deadline.Equal(want) {
		t.Fatalf("%+v, want 202 with deadline %s (arrival + limit)", r, want)
	}
	if d, _ := h.deployment(a.dep); !d.Equal(want) {
		t.Fatalf("stored deadline %s, want %s", d, want)
	}
}

// TestHeartbeatAgentClockStepBack: an agent whose clock steps back while
// its user is active keeps reporting the activity its tracker saw on the
// old, later clock (it only moves forward), so its ages are negative until
// the new clock catches up, and its transits jump by the step. Every
// heartbeat is accepted, and the deployment is never due before the next
// one, with limits as short as 1 minute and steps of 45 s, 90 s and
// 5 minutes. An idle agent's deadline moves no more than the step later:
// its age, measured from its old clock's activity to its new clock's
// sentAt, is short by the step, which its transit filter holds off until
// the deployment's median follows the new clock (docs/operations.md,
// "Heartbeats and deadlines"). Before, the active ones were refused 422 and then filtered as
// late: the 1-minute droplet was reaped under an active user.
func TestHeartbeatAgentClockStepBack(t *testing.T) {
	const interval = 30 * time.Second
	for _, tc := range []struct {
		name   string
		step   time.Duration
		limit  int64
		active bool
	}{
		{"active, -45s, limit 1", -45 * time.Second, 1, true},
		{"active, -90s, limit 2", -90 * time.Second, 2, true},
		{"active, -5m, limit 2", -5 * time.Minute, 2, true},
		{"idle, -90s, limit 30", -90 * time.Second, 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newElapsedHarness(t)
			a := &agent{h: h, dep: "dep-step-back", limit: tc.limit}
			// track is the agent's activity tracker: it only moves forward.
			track := func() {
				if now := a.now().Truncate(time.Second); now.After(a.activity) {
					a.activity = now
				}
			}
			for i := range 6 {
				// An idle user left two minutes before the step (more than
				// the step ago).
				if tc.active || i < 2 {
					track()
				}
				if r := a.send(); r.status != http.StatusAccepted {
					t.Fatalf("heartbeat before the step: %+v", r)
				}
				h.clock.Advance(interval)
			}
			before, _ := h.deployment(a.dep)
			a.offset = tc.step
			for i := range 20 {
				if tc.active {
					track()
				}
				r := a.send()
				if r.status != http.StatusAccepted {
					t.Fatalf("heartbeat %d after a step of %s: %+v", i+1, tc.step, r)
				}
				if tc.active && h.due(a.dep, h.clock.Now().Add(interval)) {
					d, _ := h.deployment(a.dep)
					t.Fatalf("heartbeat %d after a step of %s: an active agent's deployment is due before its next heartbeat (deadline %s, now %s)", i+1, tc.step, d, h.clock.Now())
				}
				if !tc.active {
					if d, _ := h.deployment(a.dep); d.Before(before) || d.After(before.Add(-tc.step)) {
						t.Fatalf("idle agent's deadline moved from %s to %s with its clock's step back of %s", before, d, tc.step)
					}
				}
				h.clock.Advance(interval)
			}
		})
	}
}
