package ingest_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// TestIngestDeadlineOnlyMovesForActivity is the review's reordering case
// (docs/operations.md, "Heartbeats and deadlines"): a heartbeat signed up to
// 300 s in the past carrying an older lastActivityAt is recorded but cannot
// pull the idle deadline back, and the 202 reports the stored deadline; an
// activity time more than 7 days old is refused 422; a heartbeat naming
// another droplet than its deployment's is 409 droplet_mismatch. Refusals
// write nothing.
func TestIngestDeadlineOnlyMovesForActivity(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	now := h.Clock.Now()
	recent := now.Add(-time.Minute)
	deadline := recent.Add(30 * time.Minute)
	send := func(o daemontest.HeartbeatOpts, ts time.Time) daemontest.Response {
		t.Helper()
		o.Env, o.Deployment = "demo-harbor", "dep-reorder"
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, TS: strconv.FormatInt(ts.Unix(), 10), Body: h.Heartbeat(o)})
	}
	storedDeadline := func() time.Time {
		return time.UnixMilli(int64(h.Count(`SELECT idle_deadline_at FROM deployments WHERE id = 'dep-reorder'`))).UTC()
	}
	answered := func(r daemontest.Response) time.Time {
		t.Helper()
		var acc struct{ IdleDeadlineAt time.Time }
		if err := json.Unmarshal(r.Body, &acc); err != nil {
			t.Fatal(err)
		}
		return acc.IdleDeadlineAt
	}
	if r := send(daemontest.HeartbeatOpts{LastActivityAt: recent, DropletID: 555}, now); r.Status != http.StatusAccepted || !answered(r).Equal(deadline) {
		t.Fatalf("first heartbeat: %s", r)
	}
	// Delayed: signed 290 s ago, sent then, carrying activity from before.
	delayed := now.Add(-290 * time.Second)
	r := send(daemontest.HeartbeatOpts{LastActivityAt: delayed.Add(-4 * time.Minute), SentAt: delayed, DropletID: 555}, delayed)
	if r.Status != http.StatusAccepted {
		t.Fatalf("delayed heartbeat: %s", r)
	}
	if got := answered(r); !got.Equal(deadline) {
		t.Fatalf("delayed heartbeat answered deadline %v, want the stored %v", got, deadline)
	}
	if got := storedDeadline(); !got.Equal(deadline) {
		t.Fatalf("delayed heartbeat moved the deadline to %v, want %v", got, deadline)
	}
	if n := h.HeartbeatRows(); n != 2 {
		t.Fatalf("%d heartbeat rows: the delayed heartbeat must still be recorded", n)
	}
	for _, tc := range []struct {
		name   string
		o      daemontest.HeartbeatOpts
		status int
		code   string
	}{
		{"activity in 1970", daemontest.HeartbeatOpts{LastActivityAt: time.Unix(0, 0)}, http.StatusUnprocessableEntity, "invalid_body"},
		{"activity 7 days and a second before sentAt", daemontest.HeartbeatOpts{LastActivityAt: now.Add(-7*24*time.Hour - time.Second)}, http.StatusUnprocessableEntity, "invalid_body"},
		{"old sentAt cannot carry old activity", daemontest.HeartbeatOpts{LastActivityAt: now.Add(-30 * 24 * time.Hour), SentAt: now.Add(-30*24*time.Hour + time.Minute)}, http.StatusUnprocessableEntity, "invalid_body"},
		{"another droplet", daemontest.HeartbeatOpts{LastActivityAt: now, DropletID: 556}, http.StatusConflict, "droplet_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.HeartbeatRows()
			nonces := h.NonceRows()
			r := send(tc.o, now)
			if r.Status != tc.status || r.Code != tc.code {
				t.Fatalf("%s; want %d %s", r, tc.status, tc.code)
			}
			if h.HeartbeatRows() != before || h.NonceRows() != nonces || !storedDeadline().Equal(deadline) {
				t.Fatal("a refused heartbeat wrote")
			}
		})
	}
	// Activity 7 days before sentAt exactly is accepted (and, being old,
	// leaves the deadline where it is).
	if r := send(daemontest.HeartbeatOpts{LastActivityAt: now.Add(-7 * 24 * time.Hour), DropletID: 555}, now); r.Status != http.StatusAccepted || !storedDeadline().Equal(deadline) {
		t.Fatalf("activity exactly 7 days old: %s, deadline %v", r, storedDeadline())
	}
}
