package proctest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/datadir"
)

// Defaults of `chalupa serve`, from the daemon itself.
const (
	// DefaultListen is where serve listens when CHALUPA_LISTEN is unset.
	DefaultListen = datadir.DefaultListen
	// SecretsFileName is the generated-secrets file in the data dir.
	SecretsFileName = datadir.SecretsFileName
	// DatabaseFileName is the SQLite file in the data dir.
	DatabaseFileName = datadir.DatabaseFileName
	// MinFreeBytesVar is the free-space guard's variable; Start and New
	// set it to 0 (off) unless the test sets it.
	MinFreeBytesVar = "CHALUPA_MIN_FREE_BYTES"
)

// Daemon timeouts.
const (
	// DefaultReadyTimeout bounds how long Start waits for GET /api/health
	// to answer 200.
	DefaultReadyTimeout = 60 * time.Second
	// DefaultWaitTimeout bounds Wait. Serve's own shutdown is bounded by a
	// 10 s drain plus a final replica sync of at most 30 s.
	DefaultWaitTimeout = 90 * time.Second
	// RequestTimeout bounds one Do request.
	RequestTimeout = 30 * time.Second
	// logTailBytes is how much of the daemon's output a failure prints.
	logTailBytes = 32 << 10
)

// Options configures Start.
type Options struct {
	// Env is added to the child's clean environment (PATH and HOME of the
	// test process). An entry with an empty value is left out, which also
	// suppresses the default Start would put there.
	Env map[string]string
	// Args follow "serve" on the command line (e.g. "--lag-limit", "5s").
	Args []string
	// Dir is the working directory; empty means a fresh t.TempDir().
	Dir string
	// NoDefaults, when true, adds nothing to Env: no generated secrets, no
	// CHALUPA_LISTEN (serve then listens on DefaultListen) and no
	// CHALUPA_DATA_DIR (serve then uses Dir/chalupa-data). This is the
	// embedded default. When false, Start fills in what Env lacks: the
	// secrets of NewSecrets, a free loopback port, a t.TempDir() data dir
	// and CHALUPA_MIN_FREE_BYTES=0 (the free-space guard off).
	NoDefaults bool
	// ReadyTimeout overrides DefaultReadyTimeout when non-zero.
	ReadyTimeout time.Duration
}

// Daemon is one `chalupa serve` process. Fields are set by Start and not
// changed afterwards.
type Daemon struct {
	// URL is the base URL, http://127.0.0.1:PORT (no trailing slash).
	URL string
	// DataDir is the absolute data directory the daemon uses.
	DataDir string
	// Dir is the process's working directory.
	Dir string
	// Env is every variable the process got besides PATH and HOME (the
	// defaults Start chose included). Copy it with EnvCopy to start another
	// daemon on the same data dir and secrets.
	Env map[string]string
	// Pid is the process id.
	Pid int

	t       testing.TB
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	code    int
	hc      *http.Client
}

// StartDaemon runs `chalupa serve extraArgs…` from bin with env on top of the
// defaults described at Options.NoDefaults, and returns once GET /api/health
// answers 200. See Start.
func StartDaemon(t testing.TB, bin string, env map[string]string, extraArgs ...string) *Daemon {
	t.Helper()
	return Start(t, bin, Options{Env: env, Args: extraArgs})
}

// Start runs `chalupa serve` as configured by opt, captures its stdout and
// stderr (Logs), and waits until GET /api/health answers 200. t.Cleanup kills
// the process if it still runs and, when the test failed, logs the tail of
// its output. Errors (start failure, exit before healthy, no 200 within the
// ready timeout) fail the test with that output.
func Start(t testing.TB, bin string, opt Options) *Daemon {
	t.Helper()
	env := map[string]string{}
	if !opt.NoDefaults {
		env = NewSecrets()
		env["CHALUPA_LISTEN"] = FreeAddr(t)
		env["CHALUPA_DATA_DIR"] = t.TempDir()
		// The free-space guard off: the test machine's disk must not
		// decide a test (docs/operations.md, "Quotas").
		env[MinFreeBytesVar] = "0"
	}
	for k, v := range opt.Env {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	dir := opt.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	// The daemon resolves relative paths with getcwd (no PWD in a clean
	// environment), i.e. without symlinks: do the same here.
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	dataDir := env["CHALUPA_DATA_DIR"]
	switch {
	case dataDir == "":
		dataDir = filepath.Join(dir, datadir.DefaultDir)
	case !filepath.IsAbs(dataDir):
		dataDir = filepath.Join(dir, dataDir)
	}
	listen := env["CHALUPA_LISTEN"]
	if listen == "" {
		listen = DefaultListen
	}
	base, err := baseURL(listen)
	if err != nil {
		t.Fatalf("proctest: CHALUPA_LISTEN: %v", err)
	}

	// The output goes straight into a file, not through a pipe and a
	// copying goroutine: whatever the daemon wrote before it answered a
	// request is in Logs when the answer arrives.
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("proctest: serve's log file: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"serve"}, opt.Args...)...)
	cmd.Dir = dir
	cmd.Env = childEnv(env)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logFile.Close() // the child has its own descriptor
	if err != nil {
		t.Fatalf("start %s serve: %v", bin, err)
	}
	d := &Daemon{
		URL: base, DataDir: dataDir, Dir: dir, Env: env, Pid: cmd.Process.Pid,
		t: t, cmd: cmd, logPath: logPath, done: make(chan struct{}), code: -1,
		hc: &http.Client{Timeout: RequestTimeout},
	}
	go func() {
		_ = cmd.Wait()
		d.code = cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	t.Cleanup(func() {
		if d.running() {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("chalupa serve (pid %d, %s) output:\n%s", d.Pid, d.URL, tail(d.Logs(), logTailBytes))
		}
	})
	timeout := opt.ReadyTimeout
	if timeout == 0 {
		timeout = DefaultReadyTimeout
	}
	d.waitHealthy(timeout)
	return d
}

// baseURL turns a listen address into the URL a local client dials.
func baseURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

func (d *Daemon) waitHealthy(timeout time.Duration) {
	d.t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		select {
		case <-d.done:
			d.t.Fatalf("chalupa serve exited with code %d before it was healthy; output:\n%s", d.code, tail(d.Logs(), logTailBytes))
		default:
		}
		resp, err := hc.Get(d.URL + "/api/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("chalupa serve not healthy within %s (last: %s); output:\n%s", timeout, last, tail(d.Logs(), logTailBytes))
		}
		time.Sleep(PollInterval)
	}
}

// Logs returns everything the process wrote to stdout and stderr so far
// (a line saying why, should its log file be unreadable).
func (d *Daemon) Logs() string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("proctest: read serve's output: %v\n", err)
	}
	return string(b)
}

// DatabasePath is DataDir/chalupa.db.
func (d *Daemon) DatabasePath() string { return filepath.Join(d.DataDir, DatabaseFileName) }

// EnvCopy returns a copy of Env, to start another daemon with the same
// configuration (delete CHALUPA_LISTEN from it for a fresh port).
func (d *Daemon) EnvCopy() map[string]string { return copyEnv(d.Env) }

// Signal sends sig to the process. A failure to deliver (the process has
// exited) fails the test.
func (d *Daemon) Signal(sig os.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatalf("signal %v to chalupa serve (pid %d): %v", sig, d.Pid, err)
	}
}

// Kill sends SIGKILL and waits for the process to be gone (a crash, as far
// as the daemon can tell). Killing an exited process does nothing.
func (d *Daemon) Kill() {
	d.t.Helper()
	if d.running() {
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
	}
	d.WaitTimeout(DefaultWaitTimeout)
}

// Wait blocks until the process exits and returns its exit code, -1 when a
// signal killed it. Not exiting within DefaultWaitTimeout fails the test.
func (d *Daemon) Wait() int {
	d.t.Helper()
	return d.WaitTimeout(DefaultWaitTimeout)
}

// WaitTimeout is Wait with its own bound.
func (d *Daemon) WaitTimeout(timeout time.Duration) int {
	d.t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(timeout):
		d.t.Fatalf("chalupa serve (pid %d) still running %s after being asked to stop; output:\n%s", d.Pid, timeout, tail(d.Logs(), logTailBytes))
		return -1
	}
}

// Done is closed when the process has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

func (d *Daemon) running() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// AdminToken returns CHALUPA_ADMIN_TOKEN from Env or, for the embedded
// default, from the generated secrets file in DataDir ("" if neither has it).
func (d *Daemon) AdminToken() string { return d.secret(AdminTokenVar) }

// ReadyToken returns CHALUPA_READY_TOKEN like AdminToken.
func (d *Daemon) ReadyToken() string { return d.secret(ReadyTokenVar) }

func (d *Daemon) secret(k string) string {
	if v := d.Env[k]; v != "" {
		return v
	}
	m, _ := datadir.ReadSecrets(filepath.Join(d.DataDir, SecretsFileName))
	return m[k]
}

// Admin returns a typed admin API client with AdminToken.
func (d *Daemon) Admin() *adminapi.Client {
	return &adminapi.Client{BaseURL: d.URL, Token: d.AdminToken(), HTTP: d.hc}
}

// Response is one HTTP answer read in full.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header is the response header.
	Header http.Header
	// Body is the whole body.
	Body []byte
}

// Bearer returns a header carrying "Authorization: Bearer token".
func Bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// Do sends method path (relative to URL, query allowed) with header and body
// (nil for none; a body gets Content-Type: application/json unless header
// sets one) and reads the whole answer. It is safe to call from any
// goroutine and never fails the test itself. Errors: transport failures
// (the daemon is down, the 30 s request timeout, ctx).
func (d *Daemon) Do(ctx context.Context, method, path string, header http.Header, body []byte) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.URL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s %s answer: %w", method, path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}
