package proctest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	mrand "math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/randtoken"
)

// PollInterval is the pause between two attempts of every readiness wait
// in this package (a process's first answer).
const PollInterval = 100 * time.Millisecond

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// chosen at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range). A port the kernel picks for a
// listener comes from that range, which every outgoing connection's source
// port also comes from: a test that stops a daemon and restarts it on the
// same port could find the port taken by some other test's client
// connection in between ("address already in use"). Ports below the range
// are never handed out that way. Errors fail the test.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	for range 200 {
		p := freePortFloor + mrand.IntN(low-freePortFloor)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	t.Fatalf("find a free port: none of 200 random ports in [%d, %d) was free", freePortFloor, low)
	return 0
}

// freePortFloor is the lowest port FreePort picks: above the well-known and
// most registered services' ports.
const freePortFloor = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read, Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > freePortFloor+1000 {
				return n
			}
		}
	}
	return 32768
}

// FreeAddr is FreePort as a "127.0.0.1:PORT" listen address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// AgentRelease is a pinned agent release that passes the configuration's
// checks (CHALUPA_AGENT_VERSION, CHALUPA_AGENT_RELEASE_URL and both
// digests; docs/operations.md, "Agent install") without existing anywhere:
// its URL is under .invalid, so a converge test renders user data that no
// machine ever runs. The map is new on every call.
func AgentRelease() map[string]string {
	return map[string]string{
		"CHALUPA_AGENT_VERSION":      "v0.0.0-test",
		"CHALUPA_AGENT_RELEASE_URL":  "https://releases.invalid/chalupa-agent/v0.0.0-test",
		"CHALUPA_AGENT_SHA256_AMD64": strings.Repeat("a0", 32),
		"CHALUPA_AGENT_SHA256_ARM64": strings.Repeat("b0", 32),
	}
}

// Secret variable names NewSecrets fills in.
const (
	AdminTokenVar = "CHALUPA_ADMIN_TOKEN"
	ReadyTokenVar = "CHALUPA_READY_TOKEN"
	MasterKeyVar  = "CHALUPA_INGEST_MASTER_KEY"
)

// NewSecrets returns fresh strong secrets for a daemon: CHALUPA_ADMIN_TOKEN and
// CHALUPA_READY_TOKEN as 32 random bytes in unpadded base64url (43
// characters), and CHALUPA_INGEST_MASTER_KEY as 32 random bytes in padded
// standard base64 (44 characters). The map is new on every call.
func NewSecrets() map[string]string {
	return map[string]string{
		AdminTokenVar: RandomToken(32),
		ReadyTokenVar: RandomToken(32),
		MasterKeyVar:  base64.StdEncoding.EncodeToString(randomBytes(32)),
	}
}

// RandomToken returns n random bytes as unpadded base64url.
func RandomToken(n int) string { return randtoken.New(n) }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}

// childEnv is a clean environment: PATH and HOME from this process, then env
// (which may override them). Empty values are left out.
func childEnv(env map[string]string) []string {
	m := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME")}
	for k, v := range env {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

// copyEnv returns a shallow copy of m (nil stays an empty map).
func copyEnv(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a child process's
// stdout and stderr copiers, or a logger written from many goroutines.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes returns a copy of everything written so far.
func (b *SyncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// Truncate keeps the first n bytes (as bytes.Buffer.Truncate).
func (b *SyncBuffer) Truncate(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Truncate(n)
}

// tail returns at most the last n bytes of s, marking a cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…(earlier output cut)…\n" + s[len(s)-n:]
}
