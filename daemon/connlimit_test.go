package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
)

// TestCapListenerRefusesBeyondTheCap: with a cap of 2, two connections are
// served while a third gets an immediate 503 too_many_connections and is
// closed; once one of the two closes, a new connection is served again.
func TestCapListenerRefusesBeyondTheCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	capped := newCapListener(ln, 2)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(capped) }()
	t.Cleanup(func() { _ = srv.Close() })

	get := func(c net.Conn) string {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return "write: " + err.Error()
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "read: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + strings.TrimSpace(string(b))
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := dial(), dial()
	if got := get(a); got != "200 OK ok" {
		t.Fatalf("first connection: %s", got)
	}
	if got := get(b); got != "200 OK ok" {
		t.Fatalf("second connection: %s", got)
	}
	c := dial()
	if got := get(c); !strings.HasPrefix(got, "503 ") || !strings.HasSuffix(got, `retry later"}}`) {
		t.Fatalf("third connection beyond the cap: %s", got)
	}
	if n := capped.refused.Load(); n != 1 {
		t.Errorf("refused %d, want 1", n)
	}
	_ = a.Close()
	testwait.Eventually(t, testwait.Short, "the closed connection to leave the count", func() (bool, string) {
		n := capped.open.Load()
		return n <= 1, fmt.Sprintf("%d open", n)
	})
	if got := get(dial()); got != "200 OK ok" {
		t.Fatalf("a connection after one closed: %s", got)
	}
}
