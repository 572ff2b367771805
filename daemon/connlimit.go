package daemon

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxConnections is how many client connections the daemon holds
// open at once (--max-connections): a fleet's agents keep one keep-alive
// connection each, and an idle connection costs roughly 10–20 KiB (its
// goroutine and buffers; contrib/soak slowclients measures it), so 4,096
// stay under 100 MiB on a 1 GiB droplet. Beyond it new connections are
// refused at once (docs/operations.md, "HTTP surface and errors").
const DefaultMaxConnections = 4096

// connRefusal is written to a connection accepted beyond the cap before it
// is closed: a complete HTTP answer, so a client sees 503 and retries
// (agents retry 5xx) instead of a reset it might not.
var connRefusal = func() []byte {
	body := `{"error":{"code":"too_many_connections","message":"connection limit reached; retry later"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n" +
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// capListener accepts at most max connections open at a time; one beyond
// that gets connRefusal and is closed without being handed to the server.
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
}

// newCapListener wraps ln with a cap of max open connections (max <= 0:
// DefaultMaxConnections).
func newCapListener(ln net.Listener, max int) *capListener {
	if max <= 0 {
		max = DefaultMaxConnections
	}
	return &capListener{Listener: ln, max: int64(max)}
}

// Accept returns the next connection within the cap, refusing (and
// counting) any beyond it.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			// Never block Accept on a client: a short deadline, best effort.
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write(connRefusal)
			_ = c.Close()
			continue
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

// countedConn gives its slot back once, on Close.
type countedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

// Close closes the connection and frees its slot.
func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
