package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
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
		// The hang-up server's close and the capped server's 503 reach
		// the client when they do: wait until both have arrived, so that
		// silentCheck's 5 ms look finds them.
		testwait.Eventually(t, testwait.Short, "the hang-up's close and the capped server's 503 at the client", func() (bool, string) {
			var hungUp, answered bool
			conns[1], hungUp = arrived(t, conns[1])
			conns[2], answered = arrived(t, conns[2])
			return hungUp && answered, fmt.Sprintf("hang-up arrived %v, 503 arrived %v", hungUp, answered)
		})
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
		// Its closes reach the client when they do: wait until both have.
		testwait.Eventually(t, testwait.Short, "the server's closes at the client", func() (bool, string) {
			var closed1, closed2 bool
			c1, closed1 = arrived(t, c1)
			c2, closed2 = arrived(t, c2)
			return closed1 && closed2, fmt.Sprintf("first closed %v, second closed %v", closed1, closed2)
		})
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

// arrived reports whether the server has sent c anything, bytes or its
// close, without losing it: the bytes read are kept in the returned
// connection, which replays them before reading on (a close, once seen, is
// seen again by the next read).
func arrived(t *testing.T, c net.Conn) (net.Conn, bool) {
	t.Helper()
	if r, ok := c.(*replayConn); ok && len(r.buf) > 0 {
		return c, true
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, 1024)
	n, err := c.Read(b)
	var ne net.Error
	if n == 0 && errors.As(err, &ne) && ne.Timeout() {
		return c, false
	}
	if n == 0 {
		return c, true // closed (EOF or reset): the next read says so again
	}
	if r, ok := c.(*replayConn); ok {
		r.buf = append(r.buf, b[:n]...)
		return r, true
	}
	return &replayConn{Conn: c, buf: b[:n]}, true
}

// replayConn is a connection whose first reads return buf.
type replayConn struct {
	net.Conn
	buf []byte
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.buf) > 0 {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}
