package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Server is one child process under test (chalupa or the reference).
type Server struct {
	// Name names it in messages ("chalupa", "reference").
	Name string
	// URL is its base URL, http://127.0.0.1:PORT.
	URL     string
	cmd     *exec.Cmd
	log     *os.File
	logPath string
	exited  chan struct{}
	waitErr error
}

// NewServer watches cmd, already started, whose output goes to log (at
// logPath). The caller sets URL once the child listens.
func NewServer(name string, cmd *exec.Cmd, log *os.File, logPath string) *Server {
	s := &Server{Name: name, cmd: cmd, log: log, logPath: logPath, exited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	return s
}

// PID is the child's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Exited is closed once the child has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// CPUSeconds returns the user+system CPU time the child has used so far, all
// its threads included, or -1 where /proc is not available.
func (s *Server) CPUSeconds() float64 { return ProcCPUSeconds(strconv.Itoa(s.PID())) }

// Stop sends SIGTERM, waits up to grace, then kills. It is bounded by
// grace plus a few seconds whatever the child does.
func (s *Server) Stop(grace time.Duration) error {
	defer s.log.Close()
	select {
	case <-s.exited:
		return s.waitErr
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return s.waitErr
	case <-time.After(grace):
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
	}
	return fmt.Errorf("%s did not stop within %s; killed", s.Name, grace)
}

// WaitHealthy polls GET /api/health until 200, the child exits, or timeout.
func (s *Server) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	if err := CheckLoopback(s.URL); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited during start: %v\n%s", s.Name, s.waitErr, s.LogTail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := hc.Get(s.URL + "/api/health")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer /api/health within %s\n%s", s.Name, timeout, s.LogTail())
}

// LogTail returns the last few KiB of the child's log.
func (s *Server) LogTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	const n = 4 << 10
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// BaseEnv is the clean environment children start with: PATH, HOME and
// TMPDIR only, so no stray CHALUPA_*, AWS_* or proxy variable of the caller
// changes what is measured.
func BaseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// FreeLoopbackAddr returns 127.0.0.1:PORT for a port that was free a moment
// ago.
func FreeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// CheckLoopback refuses any base URL whose host is not 127.0.0.1: this tool
// sends load to loopback only.
func CheckLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	if u.Hostname() != "127.0.0.1" {
		return errors.New("refusing to send load to a non-loopback address")
	}
	return nil
}

// RandomToken returns n random bytes, base64url.
func RandomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
