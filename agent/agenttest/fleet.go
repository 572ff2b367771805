// Package agenttest is the fleet fixture the agent's tests (agent, against
// a daemon assembled in process) and the end-to-end agent tests (against
// the built `chalupa serve`) share: a proxy in front of the daemon that can
// refuse (503) or lose an answer, a fake metadata service, fake /proc, /dev
// and /run trees and the key files in t.TempDir(), and the agent's fake
// clock (docs/operations.md, "Agent"). What each side asserts stays in its
// own tests; only the fixture is here.
package agenttest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
)

// Env is the environment slug every fleet uses.
const Env = "demo-harbor"

// Proxy modes (Fleet.SetMode).
const (
	// Up forwards every request.
	Up = "up"
	// Down answers 503 overloaded with Retry-After: 1.
	Down = "down"
	// Lose forwards, then drops the connection without the answer: the
	// control plane stored the request, the agent never learns it.
	Lose = "lose"
)

// Fleet is one droplet's agent in front of a daemon.
type Fleet struct {
	T *testing.T
	// Clock is the agent's clock.
	Clock *clockwork.FakeClock
	// Proxy is the agent's control plane URL; Meta is the metadata
	// service.
	Proxy, Meta *httptest.Server
	// Key is the environment's ingest key, written to Root/keys.
	Key adminapi.IssuedKey
	// Root holds the fake /proc, /dev and /run, the keys and the state
	// dir.
	Root string
	// Advance moves the clocks one step moves (Step, RunFor); New sets
	// it to Clock.Advance.
	Advance func(time.Duration)
	// Record, when set, sees every JSON request the proxy forwards while
	// Up, before it is forwarded, under the fleet's lock.
	Record func(path string, body []byte)
	// DB is the daemon's read pool Count queries.
	DB *sql.DB
	// Logs, when set, is added to a failed Heartbeat's message.
	Logs func() string
	// WireIn and WireOut count the bytes the proxy read and wrote.
	WireIn, WireOut atomic.Int64

	upstream string
	mu       sync.Mutex
	mode     string
	requests map[string]int // by path, every request the proxy saw
	accepted [][]byte       // telemetry bodies the daemon answered 2xx
	busy     uint64         // fake /proc/stat counters
	idle     uint64
	rx       uint64
}

// New starts the proxy in front of upstream (the daemon's URL) and a
// metadata service answering dropletID, writes key's files and the fake
// /proc; clock is the agent's.
func New(t *testing.T, upstream string, key adminapi.IssuedKey, dropletID int, clock *clockwork.FakeClock) *Fleet {
	t.Helper()
	f := &Fleet{T: t, Clock: clock, Key: key, Root: t.TempDir(), upstream: upstream, mode: Up, requests: map[string]int{}}
	f.Advance = clock.Advance
	f.Proxy = httptest.NewUnstartedServer(http.HandlerFunc(f.forward))
	f.Proxy.Listener = countingListener{Listener: f.Proxy.Listener, in: &f.WireIn, out: &f.WireOut}
	f.Proxy.Start()
	t.Cleanup(f.Proxy.Close)
	f.Meta = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metadata/v1/id":
			io.WriteString(w, strconv.Itoa(dropletID))
		case "/metadata/v1/region":
			io.WriteString(w, "nyc3\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Meta.Close)
	f.WriteKeys(filepath.Join(f.Root, "keys"))
	f.Write("proc/net/tcp", "  sl  local_address rem_address   st tx_queue\n", 0o644)
	f.SetProc()
	return f
}

// forward is the proxy in front of the daemon.
func (f *Fleet) forward(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	mode := f.mode
	f.requests[r.URL.Path]++
	if mode == Up && f.Record != nil && json.Valid(body) {
		f.Record(r.URL.Path, body)
	}
	f.mu.Unlock()
	if mode == Down {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"overloaded","message":"down for the test"}}`)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, f.upstream+r.URL.Path, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if r.URL.Path == agent.TelemetryRoute && resp.StatusCode/100 == 2 {
		f.mu.Lock()
		f.accepted = append(f.accepted, body)
		f.mu.Unlock()
	}
	if mode == Lose {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// Locked runs fn under the fleet's lock (the one Record runs under).
func (f *Fleet) Locked(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// SetMode sets the proxy's mode (Up, Down, Lose).
func (f *Fleet) SetMode(m string) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

// Seen is how many requests for path the proxy saw, in any mode.
func (f *Fleet) Seen(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[path]
}

// Accepted is a copy of the telemetry bodies the daemon answered 2xx.
func (f *Fleet) Accepted() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.accepted...)
}

// Write writes content to Root/rel with mode, making its directories.
func (f *Fleet) Write(rel, content string, mode os.FileMode) {
	f.T.Helper()
	p := filepath.Join(f.Root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.T.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		f.T.Fatal(err)
	}
}

// WriteKeys writes key-id and ingest.key (mode 0600) into dir (0700).
func (f *Fleet) WriteKeys(dir string) {
	f.T.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		f.T.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key-id"), []byte(f.Key.KeyID+"\n"), 0o600); err != nil {
		f.T.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ingest.key"), []byte(f.Key.KeyMaterial+"\n"), 0o600); err != nil {
		f.T.Fatal(err)
	}
}

// SetProc writes the fake /proc: every 5 s step the CPU is 30 % busy,
// eth0 receives 1,000 bytes, memory is 3 of 4 GiB used, load 0.5.
func (f *Fleet) SetProc() {
	f.Write("proc/stat", fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\n", f.busy, f.idle), 0o644)
	f.Write("proc/meminfo", "MemTotal:       4194304 kB\nMemAvailable:   1048576 kB\n", 0o644)
	f.Write("proc/loadavg", "0.50 0.40 0.30 1/99 100\n", 0o644)
	f.Write("proc/net/dev", fmt.Sprintf("Inter-|\n face |\n    lo: 5 0 0 0 0 0 0 0 5 0 0 0 0 0 0 0\n  eth0: %d 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0\n", f.rx), 0o644)
}

// Config is the agent's configuration over the fixture: the proxy, the
// fake trees, a 30-minute limit, the fake clock, no replay pacing.
func (f *Fleet) Config() agent.Config {
	return agent.Config{
		URL: f.Proxy.URL, KeyFile: filepath.Join(f.Root, "keys", "ingest.key"), Environment: Env,
		LimitMinutes: 30, StateDir: filepath.Join(f.Root, "state"), MetadataURL: f.Meta.URL + "/metadata/v1",
		ProcRoot: filepath.Join(f.Root, "proc"), DevRoot: filepath.Join(f.Root, "dev"), RunRoot: filepath.Join(f.Root, "run"),
		DiskPath: f.Root, Clock: f.Clock, Log: zerolog.Nop(), ReplayRate: rate.Inf,
	}
}

// Start starts an agent with cfg within a minute.
func (f *Fleet) Start(cfg agent.Config) *agent.Agent {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	return a
}

// Step is one sampling period: the fake /proc moves on, the clocks
// advance 5 s (Advance), the agent samples; a window it closes is
// delivered at once.
func (f *Fleet) Step(a *agent.Agent) {
	f.T.Helper()
	f.busy += 30
	f.idle += 70
	f.rx += 1000
	f.SetProc()
	f.Advance(agent.SampleInterval)
	w, err := a.Sample(context.Background())
	if err != nil {
		f.T.Fatal(err)
	}
	if w != nil {
		a.Deliver(context.Background())
	}
}

// Heartbeat sends one heartbeat and fails the test unless it is 202.
func (f *Fleet) Heartbeat(a *agent.Agent) {
	f.T.Helper()
	if status, err := a.Heartbeat(context.Background()); err != nil || status != http.StatusAccepted {
		logs := ""
		if f.Logs != nil {
			logs = f.Logs()
		}
		f.T.Fatalf("heartbeat: %d %v\n%s", status, err, logs)
	}
}

// Count is the single integer query returns on DB.
func (f *Fleet) Count(query string, args ...any) int {
	f.T.Helper()
	var n int
	if err := f.DB.QueryRow(query, args...).Scan(&n); err != nil {
		f.T.Fatalf("%s: %v", query, err)
	}
	return n
}

// countingListener counts the bytes its connections read and write.
type countingListener struct {
	net.Listener
	in, out *atomic.Int64
}

// Accept wraps the connection in a countingConn.
func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, in: l.in, out: l.out}, nil
}

type countingConn struct {
	net.Conn
	in, out *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}
