package agent_test

// The agent against a real chalupa daemon assembled in process
// (daemontest.NewInProcess), behind a proxy that can refuse (503); with a
// fake metadata service and fake /proc, /dev and /run trees in
// t.TempDir(). The agent's and the daemon's clocks are fake and advanced
// together: no test waits for time. These are the cases that need the
// daemon's clock hours ahead (window age, report age) or a key file that
// appears later; idle detection, the CI marker, window aggregates, an
// outage and the lost final response run against the built `chalupa
// serve` (e2e_agent_fleet_test.go in the repository root).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
)

// fleetStart is the clocks' start: 23 s into a minute, so the first
// window is the next whole minute.
var fleetStart = time.Date(2026, 12, 1, 10, 41, 23, 0, time.UTC)

// Proxy modes.
const (
	modeUp   = "up"   // forward
	modeDown = "down" // answer 503 overloaded with Retry-After: 1
)

type fleet struct {
	t           *testing.T
	clock       *clockwork.FakeClock // the agent's
	daemonClock *clockwork.FakeClock
	d           *daemontest.InProcess
	proxy       *httptest.Server
	meta        *httptest.Server
	key         adminapi.IssuedKey
	root        string // fake /proc, /dev, /run and the state dir live under it

	mu       sync.Mutex
	mode     string
	requests map[string]int // by path, every request the proxy saw
	// sent keeps every signed request the proxy forwarded, in order, with
	// the daemon's clock when it arrived (TestAgentRequestsAreRecorded).
	sent []recordedRequest
	// wireIn and wireOut count the bytes the proxy read and wrote.
	wireIn, wireOut atomic.Int64
	busy            uint64 // fake /proc/stat counters
	idle            uint64
	rx              uint64
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{t: t, clock: clockwork.NewFakeClockAt(fleetStart), daemonClock: clockwork.NewFakeClockAt(fleetStart),
		mode: modeUp, requests: map[string]int{}, root: t.TempDir()}
	f.d = daemontest.NewInProcess(t, daemontest.AppOptions{Clock: f.daemonClock})
	ctx := context.Background()
	if _, err := f.d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
		t.Fatal(err)
	}
	k, err := f.d.Admin.IssueIngestKey(ctx, "demo-harbor")
	if err != nil {
		t.Fatal(err)
	}
	f.key = k
	f.proxy = httptest.NewUnstartedServer(http.HandlerFunc(f.forward))
	f.proxy.Listener = countingListener{Listener: f.proxy.Listener, in: &f.wireIn, out: &f.wireOut}
	f.proxy.Start()
	t.Cleanup(f.proxy.Close)
	f.meta = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metadata/v1/id":
			io.WriteString(w, "4242")
		case "/metadata/v1/region":
			io.WriteString(w, "nyc3\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.meta.Close)
	f.writeKeys(filepath.Join(f.root, "keys"))
	f.write("proc/net/tcp", "  sl  local_address rem_address   st tx_queue\n")
	f.setProc()
	return f
}

// forward is the proxy in front of the daemon.
func (f *fleet) forward(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	mode := f.mode
	f.requests[r.URL.Path]++
	if mode == modeUp && json.Valid(body) {
		f.sent = append(f.sent, recordedRequest{Path: r.URL.Path, At: f.daemonClock.Now().UTC(), Body: json.RawMessage(body)})
	}
	f.mu.Unlock()
	if mode == modeDown {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"overloaded","message":"down for the test"}}`)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, f.d.URL+r.URL.Path, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

func (f *fleet) setMode(m string) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

func (f *fleet) seen(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[path]
}

func (f *fleet) write(rel, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) writeKeys(dir string) {
	f.t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key-id"), []byte(f.key.KeyID+"\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ingest.key"), []byte(f.key.KeyMaterial+"\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// setProc writes the fake /proc: every 5 s step the CPU is 30 % busy,
// eth0 receives 1,000 bytes, memory is 3 of 4 GiB used, load 0.5.
func (f *fleet) setProc() {
	f.write("proc/stat", fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\n", f.busy, f.idle))
	f.write("proc/meminfo", "MemTotal:       4194304 kB\nMemAvailable:   1048576 kB\n")
	f.write("proc/loadavg", "0.50 0.40 0.30 1/99 100\n")
	f.write("proc/net/dev", fmt.Sprintf("Inter-|\n face |\n    lo: 5 0 0 0 0 0 0 0 5 0 0 0 0 0 0 0\n  eth0: %d 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0\n", f.rx))
}

func (f *fleet) config() agent.Config {
	return agent.Config{
		URL: f.proxy.URL, KeyFile: filepath.Join(f.root, "keys", "ingest.key"), Environment: "demo-harbor",
		LimitMinutes: 30, StateDir: filepath.Join(f.root, "state"), MetadataURL: f.meta.URL + "/metadata/v1",
		ProcRoot: filepath.Join(f.root, "proc"), DevRoot: filepath.Join(f.root, "dev"), RunRoot: filepath.Join(f.root, "run"),
		DiskPath: f.root, Clock: f.clock, Log: zerolog.Nop(), ReplayRate: rate.Inf,
	}
}

func (f *fleet) start() *agent.Agent {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := agent.Start(ctx, f.config())
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// advance moves both clocks.
func (f *fleet) advance(d time.Duration) {
	f.clock.Advance(d)
	f.daemonClock.Advance(d)
}

// step is one sampling period: the fake /proc moves on, both clocks
// advance 5 s, the agent samples; a window it closes is delivered at once.
func (f *fleet) step(a *agent.Agent) {
	f.t.Helper()
	f.busy += 30
	f.idle += 70
	f.rx += 1000
	f.setProc()
	f.advance(agent.SampleInterval)
	w, err := a.Sample(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	if w != nil {
		a.Deliver(context.Background())
	}
}

func (f *fleet) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.d.App.DB.Read.QueryRow(query, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// runFor runs a (agent.Run) for n sampling periods, both clocks advancing
// together, then stops it (SIGTERM's path: the final window and the
// shutdown event).
func (f *fleet) runFor(a *agent.Agent, n int) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	bctx, bcancel := context.WithTimeout(context.Background(), time.Minute)
	defer bcancel()
	// Two waiters while running: the sampler and the heartbeat loop.
	for range n {
		if err := f.clock.BlockUntilContext(bctx, 2); err != nil {
			f.t.Fatal(err)
		}
		f.advance(agent.SampleInterval)
	}
	if err := f.clock.BlockUntilContext(bctx, 2); err != nil {
		f.t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) heartbeat(a *agent.Agent) {
	f.t.Helper()
	if status, err := a.Heartbeat(context.Background()); err != nil || status != http.StatusAccepted {
		f.t.Fatalf("heartbeat: %d %v", status, err)
	}
}

// TestAgentDropsOldWindows: windows spooled during an outage longer than
// the control plane's 2-hour age limit are dropped unsent and counted.
func TestAgentDropsOldWindows(t *testing.T) {
	f := newFleet(t)
	a := f.start()
	f.heartbeat(a)
	f.setMode(modeDown)
	for range 12 * 4 {
		f.step(a)
	}
	held, _ := a.Spool().Depth()
	if held == 0 {
		t.Fatal("nothing spooled")
	}
	f.setMode(modeUp)
	f.advance(agent.MaxWindowAge)
	before := f.seen(agent.TelemetryRoute)
	res := a.Deliver(context.Background())
	if res.Dropped != held || res.Sent != 0 || f.seen(agent.TelemetryRoute) != before {
		t.Fatalf("pass %+v over %d old windows (%d requests)", res, held, f.seen(agent.TelemetryRoute)-before)
	}
	rep, err := agent.Status(f.config())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Dropped[agent.DropTooOld] != int64(held) || rep.Spool.Records != 0 {
		t.Fatalf("status: dropped %v, spool %+v", rep.Dropped, rep.Spool)
	}
}

// TestAgentWaitsForKeys: without key files the agent waits (polling on
// its clock) instead of failing, and starts when they appear; an exposed
// key file is refused at once.
func TestAgentWaitsForKeys(t *testing.T) {
	f := newFleet(t)
	cfg := f.config()
	cfg.KeyFile = filepath.Join(f.root, "later", "ingest.key")
	type result struct {
		a   *agent.Agent
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { a, err := agent.Start(ctx, cfg); done <- result{a, err} }()
	for range 3 {
		if err := f.clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			t.Fatalf("started without keys: %v", r.err)
		default:
		}
		f.clock.Advance(agent.KeyPollInterval)
	}
	// Waiting again, having found no keys: now they arrive.
	if err := f.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.writeKeys(filepath.Join(f.root, "later"))
	f.clock.Advance(agent.KeyPollInterval)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	f.heartbeat(r.a)

	os.Chmod(cfg.KeyFile, 0o640)
	if _, err := agent.Start(ctx, cfg); !errors.Is(err, agent.ErrKeyExposed) {
		t.Fatalf("exposed key: %v, want ErrKeyExposed", err)
	}
}

// TestAgentRun drives Run on the fake clock: heartbeats, a window a minute,
// and on cancellation (SIGTERM) the final window.
func TestAgentRun(t *testing.T) {
	f := newFleet(t)
	a := f.start()
	f.runFor(a, 20) // 100 s: 10:41:23 → 10:43:03
	if hb := f.count(`SELECT count(*) FROM heartbeats`); hb < 3 {
		t.Fatalf("%d heartbeats in 100 s", hb)
	}
	if w, fin := f.count(`SELECT count(*) FROM telemetry_windows`), f.count(`SELECT count(*) FROM telemetry_windows WHERE final = 1`); w != 2 || fin != 1 {
		t.Fatalf("%d windows (%d final), want 10:42 and the final 10:43", w, fin)
	}
}

// TestAgentClosesCrashedSessions: an agent that stops without its final
// window (a crash or a kill) leaves its telemetry session open; the next
// start closes it first, so any number of crashes leaves one session open
// (the running one) and the open-session quota (8) is never met. The runs
// are 8 minutes apart: every start opens a session, and a deployment may
// open at most 8 in an hour (docs/operations.md, "Quotas").
func TestAgentClosesCrashedSessions(t *testing.T) {
	f := newFleet(t)
	const crashes = 10
	var sessions []string
	for i := range crashes {
		a := f.start()
		sessions = append(sessions, a.SessionID())
		f.heartbeat(a)
		for range 24 {
			f.step(a)
		}
		if n := f.count(`SELECT count(*) FROM telemetry_windows WHERE session_id = ?`, a.SessionID()); n == 0 {
			t.Fatalf("run %d stored no window", i)
		}
		if res := a.Deliver(context.Background()); res.Paused {
			t.Fatalf("run %d: delivery paused: %+v", i, res)
		}
		if n, _ := a.Spool().Depth(); n != 0 {
			t.Fatalf("run %d: %d records undelivered", i, n)
		}
		// No Stop: the process dies here; the next start is 6 minutes later.
		f.advance(6 * time.Minute)
	}
	if n := f.count(`SELECT count(*) FROM telemetry_sessions WHERE ended_at IS NULL`); n != 1 {
		t.Fatalf("%d open sessions after %d crashes, want 1", n, crashes)
	}
	if n := f.count(`SELECT count(*) FROM telemetry_sessions WHERE id = ? AND ended_at IS NULL`, sessions[crashes-1]); n != 1 {
		t.Fatal("the running session is not the open one")
	}
	if n := f.count(`SELECT count(*) FROM telemetry_sessions WHERE end_reason = 'final'`); n != crashes-1 {
		t.Fatalf("%d sessions closed by a final window, want %d", n, crashes-1)
	}
}

// TestAgentReportRunThroughSpool: `agent report-run` while the control
// plane is down spools the report and exits without it; the running agent's
// pass over the report spool delivers it once the control plane is back,
// and the next report-run delivers its own — each run stored once, a
// retried body deduplicated.
func TestAgentReportRunThroughSpool(t *testing.T) {
	f := newFleet(t)
	a := f.start()
	f.heartbeat(a)
	cfg := f.config()
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	report := func(id string) ingest.RunReportV1 {
		now := f.clock.Now().UTC()
		return ingest.RunReportV1{RunID: id, Suite: "e2e", Status: "passed", StartedAt: now.Add(-time.Minute), FinishedAt: now,
			Artifacts: []ingest.ArtifactRefV1{{V: 1, Name: "log", MediaType: "text/plain", SizeBytes: 3, SHA256: strings.Repeat("ab", 32),
				Locator: ingest.LocalLocator("log-" + id)}}}
	}
	f.setMode(modeDown)
	res, err := agent.ReportRun(context.Background(), cfg, creds, report("run-1"))
	if err != nil || res.Delivered != 0 || res.Spooled != 1 {
		t.Fatalf("report while down: %+v, %v", res, err)
	}
	if n := f.count(`SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("%d runs stored while down", n)
	}
	f.setMode(modeUp)
	if r := a.DeliverReports(context.Background()); r.Delivered != 1 {
		t.Fatalf("the agent's pass over the report spool: %+v", r)
	}
	res, err = agent.ReportRun(context.Background(), cfg, creds, report("run-2"))
	if err != nil || res.Delivered != 1 || res.Spooled != 0 {
		t.Fatalf("report while up: %+v, %v", res, err)
	}
	// The same report again (a CI retry): deduplicated, not a conflict.
	res, err = agent.ReportRun(context.Background(), cfg, creds, report("run-2"))
	if err != nil || res.Delivered != 1 || res.Dropped != 0 {
		t.Fatalf("retried report: %+v, %v", res, err)
	}
	if n := f.count(`SELECT count(*) FROM runs WHERE deployment_id = ?`, a.Identity().DeploymentID); n != 2 {
		t.Fatalf("%d runs stored, want 2", n)
	}
	if n := f.count(`SELECT count(*) FROM run_artifacts`); n != 2 {
		t.Fatalf("%d artifacts stored, want 2", n)
	}
}

// TestAgentReportForUnknownDeployment: a report for a deployment no
// heartbeat created is refused (deployment_not_found) and report-run says
// so; it stays spooled for at most MaxReportAge, then is dropped, so it
// never holds the reports behind it.
func TestAgentReportForUnknownDeployment(t *testing.T) {
	f := newFleet(t)
	a := f.start()
	f.heartbeat(a)
	cfg := f.config()
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	report := func(dep, id string) ingest.RunReportV1 {
		now := f.clock.Now().UTC()
		return ingest.RunReportV1{DeploymentID: dep, RunID: id, Suite: "e2e", Status: "passed", StartedAt: now.Add(-time.Minute), FinishedAt: now,
			Artifacts: []ingest.ArtifactRefV1{}}
	}
	res, err := agent.ReportRun(context.Background(), cfg, creds, report("dep-typo", "run-1"))
	if err != nil || res.Refused != "deployment_not_found" || res.Spooled != 1 {
		t.Fatalf("report for an unknown deployment: %+v, %v", res, err)
	}
	if st, err := agent.Status(cfg); err != nil || st.Reports.Records != 1 {
		t.Fatalf("agent status shows %+v report records (%v), want 1", st.Reports, err)
	}
	f.clock.Advance(agent.MaxReportAge)
	f.daemonClock.Advance(agent.MaxReportAge)
	res, err = agent.ReportRun(context.Background(), cfg, creds, report(a.Identity().DeploymentID, "run-2"))
	if err != nil || res.Delivered != 1 || res.Dropped != 1 || res.Spooled != 0 || res.Refused != "" {
		t.Fatalf("the next report after MaxReportAge: %+v, %v", res, err)
	}
	if n := f.count(`SELECT count(*) FROM runs`); n != 1 {
		t.Fatalf("%d runs stored, want 1", n)
	}
}

// TestWaitForCredentialsSettles: key files that exist but are not usable
// yet — a key half written, an empty key id, a key the agent cannot read
// yet — are waited on (they are being copied into place), up to
// KeySettleTime; a key still unusable after that fails.
func TestWaitForCredentialsSettles(t *testing.T) {
	good := func(t *testing.T, f *fleet, dir string) { f.writeKeys(dir) }
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, cfg *agent.Config)
		fix     func(t *testing.T, f *fleet, dir string)
	}{
		{"half-written key", func(t *testing.T, cfg *agent.Config) {
			b, _ := os.ReadFile(cfg.KeyFile)
			if err := os.WriteFile(cfg.KeyFile, b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}, good},
		{"empty key id", func(t *testing.T, cfg *agent.Config) {
			if err := os.WriteFile(filepath.Join(filepath.Dir(cfg.KeyFile), "key-id"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, good},
		{"key not readable yet", func(t *testing.T, cfg *agent.Config) {
			if os.Geteuid() == 0 {
				t.Skip("root reads a mode-0000 file: the permission case needs an unprivileged user")
			}
			if err := os.Chmod(cfg.KeyFile, 0o000); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, f *fleet, dir string) { os.Chmod(filepath.Join(dir, "ingest.key"), 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, heals := range []bool{true, false} {
				f := newFleet(t)
				cfg := f.config()
				dir := filepath.Join(f.root, "keys-"+strconv.FormatBool(heals))
				cfg.KeyFile = filepath.Join(dir, "ingest.key")
				f.writeKeys(dir)
				tc.prepare(t, &cfg)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				done := make(chan error, 1)
				go func() { _, err := agent.WaitForCredentials(ctx, &cfg, f.clock, nil); done <- err }()
				if err := f.clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					t.Fatalf("gave up at once on a key being put in place: %v", err)
				default:
				}
				if heals {
					tc.fix(t, f, dir)
					f.clock.Advance(agent.KeyPollInterval)
					if err := <-done; err != nil {
						t.Fatalf("the key in place was not taken: %v", err)
					}
				} else {
					polls := int(agent.KeySettleTime / agent.KeyPollInterval)
					blocked := func() <-chan struct{} {
						ch := make(chan struct{})
						go func() { _ = f.clock.BlockUntilContext(ctx, 1); close(ch) }()
						return ch
					}
				wait:
					for i := 1; ; i++ {
						if i > polls+1 {
							t.Fatal("still waiting after KeySettleTime")
						}
						f.clock.Advance(agent.KeyPollInterval)
						select {
						case err := <-done:
							if err == nil {
								t.Fatal("an unusable key was accepted")
							}
							if i < polls {
								t.Fatalf("gave up after %d polls, before KeySettleTime: %v", i, err)
							}
							break wait
						case <-blocked():
						}
					}
				}
				cancel()
			}
		})
	}
}

// drive runs pass (a delivery pass paced at agent.ReplayRate on the fake
// clock) to its end, advancing both clocks by one pacing interval each time
// the pass waits on them, and returns its result.
func (f *fleet) drive(pass func() agent.PassResult) agent.PassResult {
	f.t.Helper()
	done := make(chan agent.PassResult, 1)
	go func() { done <- pass() }()
	for {
		select {
		case res := <-done:
			return res
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := f.clock.BlockUntilContext(ctx, 1)
		cancel()
		if err == nil {
			f.advance(time.Second / agent.ReplayRate)
		}
	}
}

// TestAgentSpoolDrainUnderDefaultQuotas: the spool of a one-hour outage
// (60 telemetry windows, and 12 run reports of a CI job every five minutes)
// is delivered against a daemon with the default quotas at the agent's
// pace of 5 a second without one 429: delivery resumes when the back-off
// of the outage ends (at most RetryMax, 5 minutes), then the windows take
// 12 s and the reports 2.4 s (docs/operations.md, "Quotas").
func TestAgentSpoolDrainUnderDefaultQuotas(t *testing.T) {
	f := newFleet(t)
	cfg := f.config()
	cfg.ReplayRate = agent.ReplayRate
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.heartbeat(a)
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.setMode(modeDown)
	for i := range 720 { // one hour of 5 s samples
		f.step(a)
		if i%60 == 59 { // a CI job's report every five minutes
			now := f.clock.Now().UTC()
			if _, err := agent.ReportRun(context.Background(), cfg, creds, ingest.RunReportV1{RunID: fmt.Sprintf("run-%d", i), Suite: "e2e", Status: "passed",
				StartedAt: now.Add(-4 * time.Minute), FinishedAt: now, Artifacts: []ingest.ArtifactRefV1{}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	spooled, _ := a.Spool().Depth()
	if spooled < 59 { // the first minute began 23 s into the hour
		t.Fatalf("%d records spooled in an hour, want an hour of windows", spooled)
	}
	f.setMode(modeUp)
	resume := a.NotUntil().Sub(f.clock.Now())
	if resume > agent.RetryMax {
		t.Fatalf("delivery resumes %s after the outage, more than RetryMax", resume)
	}
	f.advance(max(resume, 0))
	began := f.clock.Now()
	windows := f.drive(func() agent.PassResult { return a.Deliver(context.Background()) })
	tookWindows := f.clock.Now().Sub(began)
	began = f.clock.Now()
	reports := f.drive(func() agent.PassResult { return a.DeliverReports(context.Background()) })
	tookReports := f.clock.Now().Sub(began)
	if windows.Paused || windows.Delivered != spooled || reports.Paused || reports.Delivered != 12 {
		t.Fatalf("drain: windows %+v, reports %+v; want %d and 12 delivered without a pause", windows, reports, spooled)
	}
	if n := f.count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'quota-exceeded'`); n != 0 {
		t.Fatalf("%d quota warnings during the drain", n)
	}
	if n := f.count(`SELECT count(*) FROM runs`); n != 12 {
		t.Fatalf("%d runs stored, want 12", n)
	}
	if tookWindows > 12*time.Second || tookReports > 3*time.Second {
		t.Fatalf("drain took %s (windows) and %s (reports)", tookWindows, tookReports)
	}
	t.Logf("one-hour outage: delivery resumed %s after it, %d windows drained in %s, 12 reports in %s, no refusal", resume, spooled, tookWindows, tookReports)
}
