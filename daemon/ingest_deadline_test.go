package daemon_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestIngestDeadlineOnlyMovesForActivity is the review's reordering case
// (docs/operations.md, "Heartbeats and deadlines"): a heartbeat signed up to
// 300 s in the past carrying an older lastActivityAt is recorded but cannot
// pull the idle deadline back, and the 202 reports the stored deadline; an
// activity time more than 7 days old is refused 422; a heartbeat naming
// another droplet than its deployment's is 409 droplet_mismatch. Refusals
// write nothing.
func TestIngestDeadlineOnlyMovesForActivity(t *testing.T) {
	h := newIngestHarness(t, harnessOptions{})
	h.createEnv("demo-harbor")
	k := h.issue("demo-harbor")
	now := h.clock.Now()
	recent := now.Add(-time.Minute)
	deadline := recent.Add(30 * time.Minute)
	send := func(o hbOpts, ts time.Time) apiResponse {
		t.Helper()
		o.Env, o.Deployment = "demo-harbor", "dep-reorder"
		return h.send(signedReq{KeyID: k.ID, Key: k.Raw, TS: strconv.FormatInt(ts.Unix(), 10), Body: h.heartbeat(o)})
	}
	storedDeadline := func() time.Time {
		return time.UnixMilli(int64(h.count(`SELECT idle_deadline_at FROM deployments WHERE id = 'dep-reorder'`))).UTC()
	}
	answered := func(r apiResponse) time.Time {
		t.Helper()
		var acc struct{ IdleDeadlineAt time.Time }
		if err := json.Unmarshal(r.Body, &acc); err != nil {
			t.Fatal(err)
		}
		return acc.IdleDeadlineAt
	}
	if r := send(hbOpts{LastActivityAt: recent, DropletID: 555}, now); r.Status != http.StatusAccepted || !answered(r).Equal(deadline) {
		t.Fatalf("first heartbeat: %s", r)
	}
	// Delayed: signed 290 s ago, sent then, carrying activity from before.
	delayed := now.Add(-290 * time.Second)
	r := send(hbOpts{LastActivityAt: delayed.Add(-4 * time.Minute), SentAt: delayed, DropletID: 555}, delayed)
	if r.Status != http.StatusAccepted {
		t.Fatalf("delayed heartbeat: %s", r)
	}
	if got := answered(r); !got.Equal(deadline) {
		t.Fatalf("delayed heartbeat answered deadline %v, want the stored %v", got, deadline)
	}
	if got := storedDeadline(); !got.Equal(deadline) {
		t.Fatalf("delayed heartbeat moved the deadline to %v, want %v", got, deadline)
	}
	if n := h.heartbeatRows(); n != 2 {
		t.Fatalf("%d heartbeat rows: the delayed heartbeat must still be recorded", n)
	}
	for _, tc := range []struct {
		name   string
		o      hbOpts
		status int
		code   string
	}{
		{"activity in 1970", hbOpts{LastActivityAt: time.Unix(0, 0)}, http.StatusUnprocessableEntity, "invalid_body"},
		{"activity 7 days and a second before sentAt", hbOpts{LastActivityAt: now.Add(-7*24*time.Hour - time.Second)}, http.StatusUnprocessableEntity, "invalid_body"},
		{"old sentAt cannot carry old activity", hbOpts{LastActivityAt: now.Add(-30 * 24 * time.Hour), SentAt: now.Add(-30*24*time.Hour + time.Minute)}, http.StatusUnprocessableEntity, "invalid_body"},
		{"another droplet", hbOpts{LastActivityAt: now, DropletID: 556}, http.StatusConflict, "droplet_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.heartbeatRows()
			nonces := h.nonceRows()
			r := send(tc.o, now)
			if r.Status != tc.status || r.Code != tc.code {
				t.Fatalf("%s; want %d %s", r, tc.status, tc.code)
			}
			if h.heartbeatRows() != before || h.nonceRows() != nonces || !storedDeadline().Equal(deadline) {
				t.Fatal("a refused heartbeat wrote")
			}
		})
	}
	// Activity 7 days before sentAt exactly is accepted (and, being old,
	// leaves the deadline where it is).
	if r := send(hbOpts{LastActivityAt: now.Add(-7 * 24 * time.Hour), DropletID: 555}, now); r.Status != http.StatusAccepted || !storedDeadline().Equal(deadline) {
		t.Fatalf("activity exactly 7 days old: %s, deadline %v", r, storedDeadline())
	}
}
