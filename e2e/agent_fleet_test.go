package e2e

// The fleet agent against a real `chalupa serve` (the built binary):
// idle detection, the CI marker deferring a reap
// (through the reaper and the DigitalOcean API test server), window
// aggregates with a fake nvidia-smi, an outage and its replay, and the
// final response lost at shutdown (docs/operations.md, "Agent").
//
// The agent runs in this test process (agent, the code `chalupa
// agent run` runs) so that its clock can be injected: the tests step it
// through minutes of sampling without waiting. The daemon's clock is the
// real one and it checks every signed timestamp against it (±300 s,
// docs/operations.md, "Signed ingest"), so each test starts the agent's
// clock a few minutes in the past and keeps every signed request within
// that window. Between the two sits a proxy that can refuse (503) or lose
// an answer; fake /proc, /dev and /run trees and a fake metadata service
// live in t.TempDir(). State is read from the daemon's admin API and, for
// row counts, its database file opened read-only.

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/agent/agenttest"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
)

// agentFleetEnv is the environment every test here uses.
const agentFleetEnv = agenttest.Env

// Proxy modes of agentFleet.
const (
	fleetUp   = agenttest.Up
	fleetDown = agenttest.Down
	fleetLose = agenttest.Lose
)

// agentFleet is the shared fleet fixture (agent/agenttest) in front of the
// built daemon, with the daemon's database opened read-only.
type agentFleet struct {
	*agenttest.Fleet
	bin string
	d   *proctest.Daemon
	db  *storage.DB
}

// newAgentFleet starts the built daemon with env, an environment and its
// key, the proxy and a metadata service answering dropletID. The agent's
// clock starts back before now, at 23 s into a minute (so its first window
// is the next whole minute).
func newAgentFleet(t *testing.T, env map[string]string, dropletID int, back time.Duration) *agentFleet {
	t.Helper()
	f := &agentFleet{bin: proctest.BuildBinary(t)}
	f.d = proctest.StartDaemon(t, f.bin, env)
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, f.d.Admin(), agentFleetEnv)
	db, err := storage.OpenReadOnly(ctx, f.d.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f.db = db
	clock := clockwork.NewFakeClockAt(time.Now().UTC().Add(-back).Truncate(time.Minute).Add(23 * time.Second))
	f.Fleet = agenttest.New(t, f.d.URL, k, dropletID, clock)
	f.DB = db.Read
	f.Logs = f.d.Logs
	return f
}

// deployment is the deployment as `admin fleet` shows it.
func (f *agentFleet) deployment(id string) adminapi.FleetDeployment {
	f.T.Helper()
	fl, err := f.d.Admin().ListFleet(context.Background())
	if err != nil {
		f.T.Fatal(err)
	}
	for _, e := range fl.Environments {
		for _, d := range e.Deployments {
			if e.Slug == agentFleetEnv && d.ID == id {
				return d
			}
		}
	}
	f.T.Fatalf("admin fleet has no deployment %s", id)
	return adminapi.FleetDeployment{}
}

// TestAgentE2EWindowsAndGPU: an agent identified by the metadata service
// sends one window a minute from its first whole minute, with the
// aggregates of the fake /proc samples and the GPU metrics of a fake
// nvidia-smi; on stop the partial minute arrives final:true, ends the
// session, and the shutdown event is stored once.
func TestAgentE2EWindowsAndGPU(t *testing.T) {
	t.Parallel()
	f := newAgentFleet(t, nil, 4242, 200*time.Second)
	bin := t.TempDir()
	script := "#!/bin/sh\nprintf '55, 2048, 16384, 65, 120.5\\n[N/A], 1024, 16384, 70, [N/A]\\n'\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := f.Config()
	cfg.NvidiaSMI = filepath.Join(bin, "nvidia-smi")
	a := f.Start(cfg)
	if got := a.Identity(); got.DeploymentID != "droplet-4242" || got.DropletID != 4242 || got.Region != "nyc3" {
		t.Fatalf("identity %+v, want droplet-4242 in nyc3 from the metadata service", got)
	}
	start := f.Clock.Now()
	f.Heartbeat(a)
	// :23 → +2:40: the partial first minute is not sent; the next two are.
	for range 32 {
		f.Step(a)
	}
	if n := f.Count(`SELECT count(*) FROM telemetry_windows`); n != 2 {
		t.Fatalf("%d windows stored, want 2", n)
	}
	var first int64
	var cpuN, memN, rxN int64
	var cpuSum, cpuMin, cpuMax, memLast, memTotal, rxSum, load, gpuUtil, gpuMem, gpuTemp, gpuPower, diskTotal float64
	err := f.db.Read.QueryRow(`SELECT window_start, cpu_pct_n, cpu_pct_sum, cpu_pct_min, cpu_pct_max,
		mem_used_bytes_n, mem_used_bytes_last, mem_total_bytes_max, net_rx_bytes_n, net_rx_bytes_sum, load1_last,
		gpu_util_pct_max, gpu_mem_used_bytes_last, gpu_temp_c_max, gpu_power_w_last, disk_total_bytes_last
		FROM telemetry_windows ORDER BY window_start LIMIT 1`).Scan(&first, &cpuN, &cpuSum, &cpuMin, &cpuMax,
		&memN, &memLast, &memTotal, &rxN, &rxSum, &load, &gpuUtil, &gpuMem, &gpuTemp, &gpuPower, &diskTotal)
	if err != nil {
		t.Fatal(err)
	}
	if want := start.Truncate(time.Minute).Add(time.Minute).UnixMilli(); first != want {
		t.Errorf("first window starts %s, want %s", time.UnixMilli(first).UTC(), time.UnixMilli(want).UTC())
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"cpu n", float64(cpuN), 12}, {"cpu sum", cpuSum, 360}, {"cpu min", cpuMin, 30}, {"cpu max", cpuMax, 30},
		{"mem n", float64(memN), 12}, {"mem used", memLast, 3 << 30}, {"mem total", memTotal, 4 << 30},
		{"rx n", float64(rxN), 12}, {"rx sum", rxSum, 12000}, {"load", load, 0.5},
		{"gpu util (busiest)", gpuUtil, 55}, {"gpu mem (summed)", gpuMem, 3072 << 20}, {"gpu temp (hottest)", gpuTemp, 70},
		{"gpu power (N/A skipped)", gpuPower, 120.5},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if math.Abs(c.got-c.want) > 1e-6 {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		})
	}
	if diskTotal <= 0 {
		t.Errorf("disk total %v", diskTotal)
	}
	if res := a.Stop(); res.Delivered != 2 {
		t.Fatalf("stop: %+v (want the final window and the shutdown event)", res)
	}
	if n := f.Count(`SELECT count(*) FROM telemetry_windows WHERE final = 1`); n != 1 {
		t.Fatalf("%d final windows", n)
	}
	if n := f.Count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'shutdown' AND id LIKE ?`, "%:"+a.ShutdownEventID()); n != 1 {
		t.Fatalf("%d shutdown events, want 1", n)
	}
	if n := f.Count(`SELECT count(*) FROM telemetry_sessions WHERE id = ? AND ended_at IS NOT NULL`, a.SessionID()); n != 1 {
		t.Fatal("the final window did not end the session")
	}
	if n, _ := a.Spool().Depth(); n != 0 {
		t.Fatalf("spool holds %d after a clean stop", n)
	}
}

// TestAgentE2EIdleDetection: heartbeats with no new activity leave the
// daemon's idle deadline where it is, as does a connection to the SSH port
// that never authenticated; an authenticated SSH session process moves it; the CI marker sets ciActive; `agent status`
// reports the same without sending.
func TestAgentE2EIdleDetection(t *testing.T) {
	t.Parallel()
	f := newAgentFleet(t, nil, 4242, 200*time.Second)
	a := f.Start(f.Config())
	// The agent's clock is 200 s behind the daemon's; the deadline is in
	// the daemon's frame all the same: receipt − the activity's age on the
	// agent's clock (0 at its start) + 30 min (docs/operations.md,
	// "Heartbeats and deadlines").
	before := time.Now()
	f.Heartbeat(a)
	d0 := f.deployment("droplet-4242").IdleDeadlineAt
	idleFromNow(t, "first deadline", d0, before, 30*time.Minute)
	for range 3 {
		f.Clock.Advance(agent.HeartbeatInterval)
		f.Heartbeat(a)
		if d := f.deployment("droplet-4242").IdleDeadlineAt; !d.Equal(d0) {
			t.Fatalf("deadline moved to %s with no activity", d)
		}
	}
	// A connection that never authenticated (a scanner) is not a person:
	// the deadline stays.
	f.Write("proc/net/tcp", "  sl  local_address rem_address   st tx_queue\n   0: 0A000002:0016 0A000001:D431 01 00000000:00000000 00:00000000 00000000 0 0 1\n", 0o644)
	f.Write("proc/900/comm", "sshd\n", 0o644)
	f.Write("proc/900/cmdline", "sshd: unknown [preauth]\x00", 0o644)
	f.Clock.Advance(agent.HeartbeatInterval)
	f.Heartbeat(a)
	if d := f.deployment("droplet-4242").IdleDeadlineAt; !d.Equal(d0) {
		t.Fatalf("deadline moved to %s for a connection that never authenticated", d)
	}
	// An authenticated session (sshd's per-session process) is.
	f.Write("proc/901/comm", "sshd\n", 0o644)
	f.Write("proc/901/cmdline", "sshd: dev@pts/0\x00", 0o644)
	f.Clock.Advance(agent.HeartbeatInterval)
	before = time.Now()
	f.Heartbeat(a)
	dep := f.deployment("droplet-4242")
	if dep.CIActive {
		t.Fatal("with an SSH session: ciActive without the marker")
	}
	idleFromNow(t, "with an SSH session: deadline", dep.IdleDeadlineAt, before, 30*time.Minute)
	f.Write("run/chalupa/ci-active", "", 0o644)
	f.Clock.Advance(agent.HeartbeatInterval)
	f.Heartbeat(a)
	if !f.deployment("droplet-4242").CIActive {
		t.Fatal("ciActive not reported with the marker")
	}
	sent := f.Seen(agent.HeartbeatRoute)
	rep, err := agent.Status(f.Config())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Reaper.CIActive || !rep.Reaper.LastActivityAt.Equal(f.Clock.Now()) ||
		rep.DeploymentID != "droplet-4242" || f.Seen(agent.HeartbeatRoute) != sent {
		t.Fatalf("status %+v", rep)
	}
}

// TestAgentE2ECIMarkerDefersTheReap: a deployment idle past its deadline
// whose agent reports an active CI marker is not destroyed by a reaper
// tick (the DigitalOcean API test server still has the droplet); once the
// marker is gone, the next heartbeat lets the reaper destroy it.
func TestAgentE2ECIMarkerDefersTheReap(t *testing.T) {
	t.Parallel()
	fake := dofake.New(t)
	writeToken := fake.AddToken("write", dofake.FullAccess...)
	readToken := fake.AddToken("read", dofake.ReadOnly...)
	droplet := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags(agentFleetEnv)})
	f := newAgentFleet(t, map[string]string{
		"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": writeToken, "DIGITALOCEAN_READ_TOKEN": readToken,
	}, droplet.ID, 4*time.Minute)
	depID := "droplet-" + strconv.Itoa(droplet.ID)
	f.Write("run/chalupa/ci-active", "", 0o644)
	cfg := f.Config()
	cfg.LimitMinutes = 1
	a := f.Start(cfg)
	// Two minutes without activity on the agent's own clock (4 minutes
	// behind the daemon's, which the deadline does not depend on): the
	// 1-minute deadline has passed a minute ago in the daemon's frame.
	f.Clock.Advance(2 * time.Minute)
	f.Heartbeat(a)
	dep := f.deployment(depID)
	if !dep.CIActive || !dep.IdleDeadlineAt.Before(time.Now()) {
		t.Fatalf("deployment %+v: want CI active and the idle deadline passed", dep)
	}
	admin := map[string]string{"CHALUPA_URL": f.d.URL, "CHALUPA_ADMIN_TOKEN": f.d.AdminToken()}
	out, code := proctest.RunCommand(t, f.bin, "", admin, "admin", "reaper", "tick", "--json")
	var tick adminapi.ReaperTick
	if code != 0 || json.Unmarshal([]byte(out), &tick) != nil {
		t.Fatalf("admin reaper tick: exit %d\n%s", code, out)
	}
	for _, o := range tick.Outcomes {
		if o.Deployment == depID && o.Action == "destroyed" {
			t.Fatalf("the tick destroyed a deployment running CI: %+v", o)
		}
	}
	if _, ok := fake.Droplet(droplet.ID); !ok || len(fake.Deletes()) != 0 {
		t.Fatalf("the droplet was destroyed while CI ran (deletes %v)", fake.Deletes())
	}
	if d := f.deployment(depID); d.Status != "active" {
		t.Fatalf("deployment %s while CI ran", d.Status)
	}

	if err := os.Remove(filepath.Join(f.Root, "run/chalupa/ci-active")); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(agent.HeartbeatInterval)
	f.Heartbeat(a)
	// The heartbeat wakes the reaper for a deadline already passed; the
	// explicit tick only makes sure one runs.
	if out, code := proctest.RunCommand(t, f.bin, "", admin, "admin", "reaper", "tick"); code != 0 {
		t.Fatalf("admin reaper tick: exit %d\n%s", code, out)
	}
	testwait.Eventually(t, testwait.Short, "the droplet destroyed", func() (bool, string) {
		_, ok := fake.Droplet(droplet.ID)
		return !ok, strconv.Itoa(len(fake.Deletes())) + " deletes"
	})
	if del := fake.Deletes(); len(del) != 1 || del[0].Token != "write" || del[0].Path != "/v2/droplets/"+strconv.Itoa(droplet.ID) {
		t.Fatalf("DELETEs %v, want one of droplet %d with the write token", del, droplet.ID)
	}
	testwait.Eventually(t, testwait.Short, "the deployment ended", func() (bool, string) {
		d := f.deployment(depID)
		return d.Status == "ended", d.Status
	})
}

// TestAgentE2EOutageThenReplay: while the control plane answers 503 for
// four minutes the spool grows (nothing is lost) with the delivery backing
// off; once it is back and the back-off has ended, every window is
// replayed and stored exactly once.
func TestAgentE2EOutageThenReplay(t *testing.T) {
	t.Parallel()
	// The outage, the back-off after it and the replay stay within the
	// daemon's ±300 s of the agent's clock: start 4 min back.
	f := newAgentFleet(t, nil, 4242, 4*time.Minute)
	a := f.Start(f.Config())
	f.Heartbeat(a)
	for range 12 { // into the first whole minute: nothing sent yet
		f.Step(a)
	}
	f.SetMode(fleetDown)
	const outage = 4 // minutes
	for range outage * 12 {
		f.Step(a)
	}
	held, _ := a.Spool().Depth()
	if held < outage-1 {
		t.Fatalf("spool holds %d windows after a %d-minute outage", held, outage)
	}
	if n := f.Seen(agent.TelemetryRoute); n > 3*outage {
		t.Fatalf("%d telemetry requests during the outage: the back-off did not hold", n)
	}
	if n := f.Count(`SELECT count(*) FROM telemetry_windows`); n != 0 {
		t.Fatalf("%d windows stored during the outage", n)
	}
	f.SetMode(fleetUp)
	if wait := a.NotUntil().Sub(f.Clock.Now()); wait > 0 {
		f.Clock.Advance(wait)
	}
	res := a.Deliver(context.Background())
	if n, _ := a.Spool().Depth(); n != 0 || res.Delivered != held {
		t.Fatalf("replay: %+v, %d left\n%s", res, n, f.d.Logs())
	}
	if w, r := f.Count(`SELECT count(*) FROM telemetry_windows`), f.Count(`SELECT count(*) FROM telemetry_receipts`); w != held || r != held {
		t.Fatalf("stored %d windows, %d receipts, want %d each", w, r, held)
	}
	if st, _ := agent.ReadState(f.Config().StateDir); st.Delivered != int64(held) || st.LastDeliveryAt.IsZero() {
		t.Fatalf("state %+v", st)
	}
}

// TestAgentE2ELostFinalResponse is the shutdown race an agent meets on every
// droplet power-off (docs/operations.md, "Agent"): the final
// window reaches the control plane but its answer is lost as the agent
// stops. It stays spooled; the next start replays it byte-identical, and
// the daemon deduplicates it — nothing lost, nothing doubled.
func TestAgentE2ELostFinalResponse(t *testing.T) {
	t.Parallel()
	f := newAgentFleet(t, nil, 4242, 200*time.Second)
	a := f.Start(f.Config())
	f.Heartbeat(a)
	for range 20 {
		f.Step(a)
	}
	f.SetMode(fleetLose)
	if res := a.Stop(); res.Delivered != 0 {
		t.Fatalf("stop with a lost answer: %+v", res)
	}
	if n, _ := a.Spool().Depth(); n != 2 {
		t.Fatalf("spool holds %d, want the final window and the shutdown event", n)
	}
	stored := f.Count(`SELECT count(*) FROM telemetry_windows`)
	if stored != 2 || f.Count(`SELECT count(*) FROM telemetry_windows WHERE final = 1`) != 1 {
		t.Fatalf("%d windows stored before the restart", stored)
	}
	f.SetMode(fleetUp)
	f.Clock.Advance(time.Minute)
	b := f.Start(f.Config())
	if b.SessionID() == a.SessionID() {
		t.Fatal("a restart reused the session id")
	}
	if res := b.Deliver(context.Background()); res.Delivered != 2 {
		t.Fatalf("replay after restart: %+v", res)
	}
	if n := f.Count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'shutdown'`); n != 1 {
		t.Fatalf("%d shutdown events after the replay, want 1", n)
	}
	if n := f.Count(`SELECT count(*) FROM telemetry_sessions WHERE ended_at IS NULL`); n != 0 {
		t.Fatalf("%d open sessions after a clean stop and a restart, want 0", n)
	}
	if w, r := f.Count(`SELECT count(*) FROM telemetry_windows`), f.Count(`SELECT count(*) FROM telemetry_receipts`); w != stored || r != stored {
		t.Fatalf("after the replay: %d windows, %d receipts, want %d", w, r, stored)
	}
	bodies := f.Accepted()
	last, prev := bodies[len(bodies)-1], bodies[len(bodies)-2]
	if !bytes.Equal(last, prev) {
		t.Fatalf("the replayed body differs:\n%s\n%s", prev, last)
	}
}

// idleFromNow fails t unless deadline is a heartbeat's receipt, which came
// after before and not after now, plus limit: the activity was current
// when it was sent. The lower bound allows the second the agent truncates
// its activity time to.
func idleFromNow(t *testing.T, what string, deadline, before time.Time, limit time.Duration) {
	t.Helper()
	lo, hi := before.Add(limit-time.Second), time.Now().Add(limit)
	if deadline.Before(lo) || deadline.After(hi) {
		t.Fatalf("%s %s, want the heartbeat's receipt + %s (between %s and %s)", what, deadline, limit, lo, hi)
	}
}
