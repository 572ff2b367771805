package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestOpenOneClassifies checks each way a connection attempt can end, as a
// connection cap could make it end: refused, closed without an answer,
// answered 503, or accepted and kept.
func TestOpenOneClassifies(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"status":"ok"}`) }))
	defer ok.Close()
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }))
	defer busy.Close()
	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hangup.Close()
	go func() {
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			c.Close() // over the cap: accept and close at once
		}
	}()
	// capped answers like chalupa's --max-connections: a complete 503 at
	// once, without reading a request, then close.
	capped, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Close()
	go func() {
		for {
			c, err := capped.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 5\r\n\r\nbusy\n")
			c.Close()
		}
	}()
	closedPort, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closedPort.Addr().String()
	closedPort.Close()
	host := func(u string) string { return strings.TrimPrefix(u, "http://") }

	for _, tc := range []struct {
		name, addr, mode string
		want             outcome
		status           int
	}{
		{"accepted", host(ok.URL), "keepalive", accepted, 200},
		{"accepted silent", host(ok.URL), "silent", accepted, 0},
		{"503", host(busy.URL), "keepalive", otherStatus, 503},
		{"closed at once", hangup.Addr().String(), "keepalive", closedEarly, 0},
		{"refused", refusedAddr, "keepalive", refused, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, status, conn := openOne(context.Background(), tc.addr, tc.mode, 2*time.Second)
			if conn != nil {
				defer conn.Close()
			}
			if o != tc.want || status != tc.status || (conn != nil) != (o == accepted) {
				t.Errorf("got %s %d (conn %v), want %s %d", outcomeNames[o], status, conn != nil, outcomeNames[tc.want], tc.status)
			}
		})
	}

	// With a request in flight, a cap's close can overtake its 503 (the
	// unread request makes the close a reset): either way, not accepted.
	t.Run("capped", func(t *testing.T) {
		o, status, conn := openOne(context.Background(), capped.Addr().String(), "keepalive", 2*time.Second)
		if conn != nil || !(o == otherStatus && status == 503 || o == closedEarly) {
			t.Errorf("got %s %d (conn %v), want answered 503 or closed", outcomeNames[o], status, conn != nil)
		}
	})

	// Silent connections are classified once all are open.
	t.Run("silent", func(t *testing.T) {
		var conns []net.Conn
		for _, addr := range []string{host(ok.URL), hangup.Addr().String(), capped.Addr().String()} {
			o, _, conn := openOne(context.Background(), addr, "silent", 2*time.Second)
			if o != accepted || conn == nil {
				t.Fatalf("%s: silent connect: %s", addr, outcomeNames[o])
			}
			conns = append(conns, conn)
		}
		time.Sleep(50 * time.Millisecond)
		outcomes, statuses := make([]outcome, len(conns)), map[int]int{}
		silentCheck(conns, outcomes, statuses, 2)
		want := []outcome{accepted, closedEarly, otherStatus}
		for i := range want {
			if outcomes[i] != want[i] || (conns[i] != nil) != (want[i] == accepted) {
				t.Errorf("connection %d: %s (conn %v), want %s", i, outcomeNames[outcomes[i]], conns[i] != nil, outcomeNames[want[i]])
			}
		}
		if len(statuses) != 1 || statuses[503] != 1 {
			t.Errorf("statuses %v, want one 503", statuses)
		}
		if conns[0] != nil {
			conns[0].Close()
		}
	})

	t.Run("stillOpen", func(t *testing.T) {
		_, _, c1 := openOne(context.Background(), host(ok.URL), "keepalive", 2*time.Second)
		_, _, c2 := openOne(context.Background(), host(ok.URL), "keepalive", 2*time.Second)
		if c1 == nil || c2 == nil {
			t.Fatal("not accepted")
		}
		defer c1.Close()
		defer c2.Close()
		ok.CloseClientConnections() // the server lets go of both
		time.Sleep(50 * time.Millisecond)
		_, _, c3 := openOne(context.Background(), host(ok.URL), "keepalive", 2*time.Second)
		if c3 == nil {
			t.Fatal("not accepted")
		}
		defer c3.Close()
		open, closed := stillOpen([]net.Conn{c1, nil, c2, c3}, 2)
		if open != 1 || closed != 2 {
			t.Errorf("open %d closed %d, want 1 and 2", open, closed)
		}
	})
}
