package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// TestIngestShedsBeyondInFlightBound fills the signed-ingest in-flight bound
// (lowered to 2) with heartbeats that wait for SQLite's write lock, held by
// another connection as Litestream's checkpoint holds it, and checks that
// one more request is answered 503 overloaded with Retry-After, claims no
// nonce, writes nothing and is counted in chalupa_ingest_shed_total; and
// that once the lock is released the waiting heartbeats are accepted and
// the bound admits requests again.
func TestIngestShedsBeyondInFlightBound(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	srv := h.App.Server
	daemon.SetIngestInFlightLimit(srv, 2)
	hb := func(dep string) daemontest.SignedReq {
		return daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: dep})}
	}
	shedCount := func() float64 {
		t.Helper()
		r := h.Do("GET", "/metrics", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil)
		m := regexp.MustCompile(`(?m)^chalupa_ingest_shed_total (\S+)$`).FindSubmatch(r.Body)
		if r.Status != http.StatusOK || m == nil {
			t.Fatalf("chalupa_ingest_shed_total missing from /metrics: %s", r)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}

	// Hold the write lock; the writer polls BEGIN for up to 5 s, so the
	// rest of the test must take less.
	ctx := context.Background()
	conn, err := h.SQL().Conn(ctx) // the check pool's only connection, until unlock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	locked := true
	unlock := func() {
		if locked {
			locked = false
			_, err := conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	defer unlock()

	type answer struct {
		r   daemontest.Response
		err error
	}
	waiting := make(chan answer, 2)
	for _, dep := range []string{"dep-a", "dep-b"} {
		req, _ := h.Build(hb(dep))
		go func() {
			r, err := daemontest.DoRequest(h.HTTP, req)
			waiting <- answer{r, err}
		}()
	}
	testwait.Eventually(t, testwait.Short, "two requests in flight", func() (bool, string) {
		n := daemon.IngestInFlight(srv)
		return n >= 2, fmt.Sprintf("%d in flight", n)
	})

	shedReq, shed := h.Build(hb("dep-c"))
	r := h.RoundTrip(shedReq)
	if r.Status != http.StatusServiceUnavailable || r.Code != "overloaded" {
		t.Fatalf("request beyond the bound: %s, want 503 overloaded", r)
	}
	if got := r.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
	unlock()

	for range 2 {
		a := <-waiting
		if a.err != nil || a.r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat inside the bound: %v %s", a.err, a.r)
		}
	}
	if n := h.HeartbeatRows(); n != 2 {
		t.Fatalf("heartbeat rows = %d, want 2 (the shed request wrote nothing)", n)
	}
	if n := h.Count(`SELECT count(*) FROM nonces WHERE nonce = ?`, shed.Nonce); n != 0 {
		t.Fatal("the shed request claimed its nonce")
	}
	if v := shedCount(); v != 1 {
		t.Fatalf("chalupa_ingest_shed_total = %v, want 1", v)
	}
	// The bound is free again: the shed request, resent as is (its nonce
	// unclaimed), is accepted.
	if r := h.RoundTrip(mustRebuild(t, h, shed)); r.Status != http.StatusAccepted {
		t.Fatalf("after the bound freed: %s", r)
	}
}

// mustRebuild builds r again (a request body can be sent once).
func mustRebuild(t *testing.T, h *daemontest.Ingest, r daemontest.SignedReq) *http.Request {
	t.Helper()
	req, _ := h.Build(r)
	return req
}
