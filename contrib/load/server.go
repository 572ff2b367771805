package main

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
	"strings"
	"syscall"
	"time"
)

// server is one child process under test (chalupa or the reference).
type server struct {
	name    string
	url     string // http://127.0.0.1:PORT
	cmd     *exec.Cmd
	log     *os.File
	logPath string
	exited  chan struct{}
	waitErr error
}

func newServer(name string, cmd *exec.Cmd, log *os.File, logPath string) *server {
	s := &server{name: name, cmd: cmd, log: log, logPath: logPath, exited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	return s
}

// pid is the child's process id.
func (s *server) pid() int { return s.cmd.Process.Pid }

// stop sends SIGTERM, waits up to grace, then kills. It is bounded by
// grace plus a few seconds whatever the child does.
func (s *server) stop(grace time.Duration) error {
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
	return fmt.Errorf("%s did not stop within %s; killed", s.name, grace)
}

// waitHealthy polls GET /api/health until 200, the child exits, or timeout.
func (s *server) waitHealthy(ctx context.Context, timeout time.Duration) error {
	if err := checkLoopback(s.url); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited during start: %v\n%s", s.name, s.waitErr, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := hc.Get(s.url + "/api/health")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer /api/health within %s\n%s", s.name, timeout, s.logTail())
}

// logTail returns the last few KiB of the child's log.
func (s *server) logTail() string {
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

// cpuSeconds returns the user+system CPU time the child has used so far, or
// -1 where /proc is not available.
func (s *server) cpuSeconds() float64 { return procCPUSeconds(strconv.Itoa(s.pid())) }

// procCPUSeconds reads utime+stime of /proc/<pid>/stat ("self" for this
// process), in seconds; -1 when it cannot.
func procCPUSeconds(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')': state is field 3, so utime (14) and stime (15) are at 11, 12.
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const clkTck = 100 // USER_HZ on Linux
	return (ut + st) / clkTck
}

// machineCPUSeconds returns the busy CPU time of the whole machine (every
// field of /proc/stat's "cpu" line but idle and iowait), in seconds; -1 when
// it cannot. Compared with the server's and the client's own CPU it shows how
// much other processes took during a phase: on a shared machine a run is only
// meaningful when that is near zero.
func machineCPUSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var busy float64
	// user nice system idle iowait irq softirq [steal guest guest_nice]:
	// idle and iowait are not busy; steal is the hypervisor's, not a
	// process's; guest time is already counted in user.
	for i, v := range f[1:8] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return -1
		}
		busy += n
	}
	const clkTck = 100
	return busy / clkTck
}

// baseEnv is the clean environment children start with: PATH, HOME and
// TMPDIR only, so no stray CHALUPA_*, AWS_* or proxy variable of the caller
// changes what is measured.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// freeLoopbackAddr returns 127.0.0.1:PORT for a port that was free a moment
// ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// checkLoopback refuses any base URL whose host is not 127.0.0.1: this tool
// sends load to loopback only.
func checkLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	if u.Hostname() != "127.0.0.1" {
		return errors.New("refusing to send load to a non-loopback address")
	}
	return nil
}

// randomToken returns n random bytes, base64url.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
