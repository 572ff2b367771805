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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/agent/agenttest"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/protocol"
)

// fleetStart is the clocks' start: 23 s into a minute, so the first
// window is the next whole minute.
var fleetStart = time.Date(2026, 12, 1, 10, 41, 23, 0, time.UTC)

type fleet struct {
	*agenttest.Fleet
	daemonClock *clockwork.FakeClock
	d           *daemontest.InProcess
	// sent keeps every signed request the proxy forwarded, in order, with
	// the daemon's clock when it arrived (TestAgentRequestsAreRecorded);
	// read it under Locked.
	sent []recordedRequest
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{daemonClock: clockwork.NewFakeClockAt(fleetStart)}
	f.d = daemontest.NewInProcess(t, daemontest.AppOptions{Clock: f.daemonClock})
	ctx := context.Background()
	if _, err := f.d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: agenttest.Env}); err != nil {
		t.Fatal(err)
	}
	k, err := f.d.Admin.IssueIngestKey(ctx, agenttest.Env)
	if err != nil {
		t.Fatal(err)
	}
	f.Fleet = agenttest.New(t, f.d.URL, k, 4242, clockwork.NewFakeClockAt(fleetStart))
	f.Advance = f.advance
	f.DB = f.d.App.DB.Read
	f.Record = func(path string, body []byte) {
		f.sent = append(f.sent, recordedRequest{Path: path, At: f.daemonClock.Now().UTC(), Body: json.RawMessage(body)})
	}
	return f
}

// start starts an agent with the fixture's configuration.
func (f *fleet) start() *agent.Agent { return f.Start(f.Config()) }

// advance moves both clocks.
func (f *fleet) advance(d time.Duration) {
	f.Clock.Advance(d)
	f.daemonClock.Advance(d)
}

// runFor runs a (agent.Run) for n sampling periods, both clocks advancing
// together, then stops it (SIGTERM's path: the final window and the
// shutdown event).
func (f *fleet) runFor(a *agent.Agent, n int) {
	f.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	bctx, bcancel := context.WithTimeout(context.Background(), time.Minute)
	defer bcancel()
	// Two waiters while running: the sampler and the heartbeat loop.
	for range n {
		if err := f.Clock.BlockUntilContext(bctx, 2); err != nil {
			f.T.Fatal(err)
		}
		f.advance(agent.SampleInterval)
	}
	if err := f.Clock.BlockUntilContext(bctx, 2); err != nil {
		f.T.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		f.T.Fatal(err)
	}
}

// TestAgentDropsOldWindows: windows spooled during an outage longer than
// the control plane's 2-hour age limit are dropped unsent and counted.
func TestAgentDropsOldWindows(t *testing.T) {
	f := newFleet(t)
	a := f.start()
	f.Heartbeat(a)
	f.SetMode(agenttest.Down)
	for range 12 * 4 {
		f.Step(a)
	}
	held, _ := a.Spool().Depth()
	if held == 0 {
		t.Fatal("nothing spooled")
	}
	f.SetMode(agenttest.Up)
	f.advance(protocol.MaxWindowAge)
	before := f.Seen(agent.TelemetryRoute)
	res := a.Deliver(context.Background())
	if res.Dropped != held || res.Sent != 0 || f.Seen(agent.TelemetryRoute) != before {
		t.Fatalf("pass %+v over %d old windows (%d requests)", res, held, f.Seen(agent.TelemetryRoute)-before)
	}
	rep, err := agent.Status(f.Config())
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
	cfg := f.Config()
	cfg.KeyFile = filepath.Join(f.Root, "later", "ingest.key")
	type result struct {
		a   *agent.Agent
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { a, err := agent.Start(ctx, cfg); done <- result{a, err} }()
	for range 3 {
		if err := f.Clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			t.Fatalf("started without keys: %v", r.err)
		default:
		}
		f.Clock.Advance(agent.KeyPollInterval)
	}
	// Waiting again, having found no keys: now they arrive.
	if err := f.Clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.WriteKeys(filepath.Join(f.Root, "later"))
	f.Clock.Advance(agent.KeyPollInterval)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	f.Heartbeat(r.a)

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
	if hb := f.Count(`SELECT count(*) FROM heartbeats`); hb < 3 {
		t.Fatalf("%d heartbeats in 100 s", hb)
	}
	if w, fin := f.Count(`SELECT count(*) FROM telemetry_windows`), f.Count(`SELECT count(*) FROM telemetry_windows WHERE final = 1`); w != 2 || fin != 1 {
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
		f.Heartbeat(a)
		for range 24 {
			f.Step(a)
		}
		if n := f.Count(`SELECT count(*) FROM telemetry_windows WHERE session_id = ?`, a.SessionID()); n == 0 {
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
	if n := f.Count(`SELECT count(*) FROM telemetry_sessions WHERE ended_at IS NULL`); n != 1 {
		t.Fatalf("%d open sessions after %d crashes, want 1", n, crashes)
	}
	if n := f.Count(`SELECT count(*) FROM telemetry_sessions WHERE id = ? AND ended_at IS NULL`, sessions[crashes-1]); n != 1 {
		t.Fatal("the running session is not the open one")
	}
	if n := f.Count(`SELECT count(*) FROM telemetry_sessions WHERE end_reason = 'final'`); n != crashes-1 {
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
	f.Heartbeat(a)
	cfg := f.Config()
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	report := func(id string) protocol.RunReportV1 {
		now := f.Clock.Now().UTC()
		return protocol.RunReportV1{RunID: id, Suite: "e2e", Status: "passed", StartedAt: now.Add(-time.Minute), FinishedAt: now,
			Artifacts: []protocol.ArtifactRefV1{{V: 1, Name: "log", MediaType: "text/plain", SizeBytes: 3, SHA256: strings.Repeat("ab", 32),
				Locator: protocol.LocalLocator("log-" + id)}}}
	}
	f.SetMode(agenttest.Down)
	res, err := agent.ReportRun(context.Background(), cfg, creds, report("run-1"))
	if err != nil || res.Delivered != 0 || res.Spooled != 1 {
		t.Fatalf("report while down: %+v, %v", res, err)
	}
	if n := f.Count(`SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("%d runs stored while down", n)
	}
	f.SetMode(agenttest.Up)
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
	if n := f.Count(`SELECT count(*) FROM runs WHERE deployment_id = ?`, a.Identity().DeploymentID); n != 2 {
		t.Fatalf("%d runs stored, want 2", n)
	}
	if n := f.Count(`SELECT count(*) FROM run_artifacts`); n != 2 {
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
	f.Heartbeat(a)
	cfg := f.Config()
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	report := func(dep, id string) protocol.RunReportV1 {
		now := f.Clock.Now().UTC()
		return protocol.RunReportV1{DeploymentID: dep, RunID: id, Suite: "e2e", Status: "passed", StartedAt: now.Add(-time.Minute), FinishedAt: now,
			Artifacts: []protocol.ArtifactRefV1{}}
	}
	res, err := agent.ReportRun(context.Background(), cfg, creds, report("dep-typo", "run-1"))
	if err != nil || res.Refused != "deployment_not_found" || res.Spooled != 1 {
		t.Fatalf("report for an unknown deployment: %+v, %v", res, err)
	}
	if st, err := agent.Status(cfg); err != nil || st.Reports.Records != 1 {
		t.Fatalf("agent status shows %+v report records (%v), want 1", st.Reports, err)
	}
	f.Clock.Advance(agent.MaxReportAge)
	f.daemonClock.Advance(agent.MaxReportAge)
	res, err = agent.ReportRun(context.Background(), cfg, creds, report(a.Identity().DeploymentID, "run-2"))
	if err != nil || res.Delivered != 1 || res.Dropped != 1 || res.Spooled != 0 || res.Refused != "" {
		t.Fatalf("the next report after MaxReportAge: %+v, %v", res, err)
	}
	if n := f.Count(`SELECT count(*) FROM runs`); n != 1 {
		t.Fatalf("%d runs stored, want 1", n)
	}
}

// TestWaitForCredentialsSettles: key files that exist but are not usable
// yet — a key half written, an empty key id, a key the agent cannot read
// yet — are waited on (they are being copied into place), up to
// KeySettleTime; a key still unusable after that fails.
func TestWaitForCredentialsSettles(t *testing.T) {
	good := func(t *testing.T, f *fleet, dir string) { f.WriteKeys(dir) }
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
				cfg := f.Config()
				dir := filepath.Join(f.Root, "keys-"+strconv.FormatBool(heals))
				cfg.KeyFile = filepath.Join(dir, "ingest.key")
				f.WriteKeys(dir)
				tc.prepare(t, &cfg)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				done := make(chan error, 1)
				go func() { _, err := agent.WaitForCredentials(ctx, &cfg, f.Clock, nil); done <- err }()
				if err := f.Clock.BlockUntilContext(ctx, 1); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					t.Fatalf("gave up at once on a key being put in place: %v", err)
				default:
				}
				if heals {
					tc.fix(t, f, dir)
					f.Clock.Advance(agent.KeyPollInterval)
					if err := <-done; err != nil {
						t.Fatalf("the key in place was not taken: %v", err)
					}
				} else {
					polls := int(agent.KeySettleTime / agent.KeyPollInterval)
					blocked := func() <-chan struct{} {
						ch := make(chan struct{})
						go func() { _ = f.Clock.BlockUntilContext(ctx, 1); close(ch) }()
						return ch
					}
				wait:
					for i := 1; ; i++ {
						if i > polls+1 {
							t.Fatal("still waiting after KeySettleTime")
						}
						f.Clock.Advance(agent.KeyPollInterval)
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
	f.T.Helper()
	done := make(chan agent.PassResult, 1)
	go func() { done <- pass() }()
	for {
		select {
		case res := <-done:
			return res
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := f.Clock.BlockUntilContext(ctx, 1)
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
	cfg := f.Config()
	cfg.ReplayRate = agent.ReplayRate
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.Heartbeat(a)
	creds, err := agent.ReadCredentials(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.SetMode(agenttest.Down)
	for i := range 720 { // one hour of 5 s samples
		f.Step(a)
		if i%60 == 59 { // a CI job's report every five minutes
			now := f.Clock.Now().UTC()
			if _, err := agent.ReportRun(context.Background(), cfg, creds, protocol.RunReportV1{RunID: fmt.Sprintf("run-%d", i), Suite: "e2e", Status: "passed",
				StartedAt: now.Add(-4 * time.Minute), FinishedAt: now, Artifacts: []protocol.ArtifactRefV1{}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	spooled, _ := a.Spool().Depth()
	if spooled < 59 { // the first minute began 23 s into the hour
		t.Fatalf("%d records spooled in an hour, want an hour of windows", spooled)
	}
	f.SetMode(agenttest.Up)
	resume := a.NotUntil().Sub(f.Clock.Now())
	if resume > agent.RetryMax {
		t.Fatalf("delivery resumes %s after the outage, more than RetryMax", resume)
	}
	f.advance(max(resume, 0))
	began := f.Clock.Now()
	windows := f.drive(func() agent.PassResult { return a.Deliver(context.Background()) })
	tookWindows := f.Clock.Now().Sub(began)
	began = f.Clock.Now()
	reports := f.drive(func() agent.PassResult { return a.DeliverReports(context.Background()) })
	tookReports := f.Clock.Now().Sub(began)
	if windows.Paused || windows.Delivered != spooled || reports.Paused || reports.Delivered != 12 {
		t.Fatalf("drain: windows %+v, reports %+v; want %d and 12 delivered without a pause", windows, reports, spooled)
	}
	if n := f.Count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'quota-exceeded'`); n != 0 {
		t.Fatalf("%d quota warnings during the drain", n)
	}
	if n := f.Count(`SELECT count(*) FROM runs`); n != 12 {
		t.Fatalf("%d runs stored, want 12", n)
	}
	if tookWindows > 12*time.Second || tookReports > 3*time.Second {
		t.Fatalf("drain took %s (windows) and %s (reports)", tookWindows, tookReports)
	}
	t.Logf("one-hour outage: delivery resumed %s after it, %d windows drained in %s, 12 reports in %s, no refusal", resume, spooled, tookWindows, tookReports)
}
