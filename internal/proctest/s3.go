package proctest

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
)

// S3 timeouts.
const (
	// S3StartTimeout bounds how long Start waits for versitygw to answer.
	S3StartTimeout = 30 * time.Second
	// s3StopGrace is how long Stop waits after SIGTERM before SIGKILL.
	s3StopGrace = 10 * time.Second
)

// S3 is a running (or stopped) versitygw server with a posix backend: the
// test's S3, standing in for DigitalOcean Spaces. Its methods must be called
// from the test goroutine.
type S3 struct {
	// Endpoint is http://127.0.0.1:PORT.
	Endpoint string
	// Bucket is the one bucket created at start.
	Bucket string
	// AccessKey and SecretKey are the root credentials (random per server).
	AccessKey, SecretKey string
	// Root is the posix root directory; Root/Bucket holds the objects.
	Root string
	// Addr is the listen address, 127.0.0.1:PORT; it stays the same across
	// Stop and Start.
	Addr string

	t    testing.TB
	bin  string
	logs *SyncBuffer
	cmd  *exec.Cmd
	done chan struct{}
}

// StartVersityGW starts versitygw (from ToolPath) on a free 127.0.0.1 port
// with static random credentials and a posix root in t.TempDir(), creates the
// bucket by making its directory, and returns once the port answers HTTP.
// t.Cleanup stops it. Errors (tool missing, no answer within
// S3StartTimeout) skip or fail the test as ToolPath and Start do.
func StartVersityGW(t testing.TB) *S3 {
	t.Helper()
	bin := ToolPath(t, "versitygw")
	root := t.TempDir()
	s := &S3{
		Bucket:    "chalupa-test",
		AccessKey: "AK" + RandomToken(12),
		SecretKey: RandomToken(30),
		Root:      root,
		Addr:      FreeAddr(t),
		t:         t,
		bin:       bin,
		logs:      &SyncBuffer{},
	}
	s.Endpoint = "http://" + s.Addr
	if err := os.Mkdir(filepath.Join(root, s.Bucket), 0o755); err != nil {
		t.Fatalf("create bucket dir: %v", err)
	}
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("versitygw output:\n%s", tail(s.logs.String(), 16<<10))
		}
	})
	s.Start()
	return s
}

// Start (re)starts the server on the same address, root and credentials and
// waits until it answers HTTP. Starting a running server, an exit before it
// answers, or no answer within S3StartTimeout fail the test.
func (s *S3) Start() {
	s.t.Helper()
	if s.running() {
		s.t.Fatalf("versitygw on %s is already running", s.Addr)
	}
	cmd := exec.Command(s.bin, "--port", s.Addr, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--quiet", "posix", s.Root)
	cmd.Env = childEnv(nil)
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start versitygw: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done

	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(S3StartTimeout)
	for {
		select {
		case <-done:
			s.t.Fatalf("versitygw exited before answering (%s); output:\n%s", cmd.ProcessState, tail(s.logs.String(), 8<<10))
		default:
		}
		// Any HTTP answer (an unsigned request gets 403) means it serves.
		if resp, err := hc.Get(s.Endpoint + "/"); err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw on %s did not answer within %s; output:\n%s", s.Addr, S3StartTimeout, tail(s.logs.String(), 8<<10))
		}
		time.Sleep(PollInterval)
	}
}

// Stop ends the server (SIGTERM, SIGKILL after 10 s) and returns once the
// process has exited and the port refuses connections: an outage. The data
// under Root stays for Start. Stopping a stopped server does nothing.
func (s *S3) Stop() {
	s.t.Helper()
	if !s.running() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(s3StopGrace):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	testwait.Eventually(s.t, testwait.Short, "versitygw's port to close", func() (bool, string) {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err != nil {
			return true, ""
		}
		c.Close()
		return false, "port still accepts connections"
	})
}

// ReplicaURL returns the Litestream replica URL of path in the bucket:
// s3://BUCKET/PATH?endpoint=http://127.0.0.1:PORT&region=us-east-1 (a custom
// endpoint implies path-style addressing).
func (s *S3) ReplicaURL(path string) string {
	return "s3://" + s.Bucket + "/" + path + "?endpoint=" + s.Endpoint + "&region=us-east-1"
}

// DaemonEnv returns the variables that make chalupa replicate to path in this
// server: CHALUPA_REPLICA_URL, CHALUPA_SPACES_KEY and CHALUPA_SPACES_SECRET.
func (s *S3) DaemonEnv(path string) map[string]string {
	return map[string]string{
		"CHALUPA_REPLICA_URL":   s.ReplicaURL(path),
		"CHALUPA_SPACES_KEY":    s.AccessKey,
		"CHALUPA_SPACES_SECRET": s.SecretKey,
	}
}

// Credentials returns LITESTREAM_ACCESS_KEY_ID and LITESTREAM_SECRET_ACCESS_KEY
// for the litestream CLI (pass it to Restore).
func (s *S3) Credentials() map[string]string {
	return map[string]string{
		"LITESTREAM_ACCESS_KEY_ID":     s.AccessKey,
		"LITESTREAM_SECRET_ACCESS_KEY": s.SecretKey,
	}
}

// Port returns the TCP port of Addr.
func (s *S3) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Logs returns everything versitygw wrote to stdout and stderr so far, over
// every Start.
func (s *S3) Logs() string { return s.logs.String() }

func (s *S3) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *S3) kill() {
	if s.running() {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
