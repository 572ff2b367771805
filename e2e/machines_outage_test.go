package e2e

// What a droplet goes through, on booted machines
// (docs/operations.md, "Agent"): the control plane unreachable from the box
// for two minutes, and a reboot while the agent's spool holds windows the
// control plane has not had. The box is cut off with
// machines.Box.CutControlPlane (an unreachable route in its network
// namespace, which outlives its reboots); what was spooled is read from
// the box's own spool files, and what arrived from the windows the daemon
// stored (adminGetDeploymentPerformance at one-minute steps).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/digitalocean/dofake/machines"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestMachineControlPlaneOutage: the control plane unreachable from a
// booted box for two minutes (docs/operations.md, "Agent": the spool, its
// back-off and replay). The box has a 30-minute idle limit, so the outage
// alone cannot bring its deadline, and the reaper is live. While cut, the
// agent keeps running (the unit active, the same MainPID), its spool on
// the box grows by the windows it closes, and its status and journal say
// its heartbeats get no answer. Once restored, heartbeats resume and the
// spool drains: every window the spool held arrives, the session's stored
// windows have no gap and none twice (one stored window per minute, each
// minute's samples counted once), nothing was dropped, the deployment
// never ended and no DELETE reached the provider.
func TestMachineControlPlaneOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	api, bed, d, fingerprint := machineDaemon(t, "live")
	cl := d.Admin()
	x, dep := machineUp(t, cl, bed, []string{fingerprint}, "outage", "box-o", 30)
	machineAgentJournalOnFailure(t, x)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	pid := machineMainPID(t, wctx, x)

	cut := time.Now()
	if err := x.CutControlPlane(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.CutControlPlane(false) })
	// The outage lasts two minutes, and until the spool holds two windows
	// the agent closed while cut (an agent that started less than a
	// minute before the cut closes its first window a minute later).
	var spooled []protocol.WindowV1
	machinePoll(t, 4*time.Minute, "two minutes cut, two windows spooled", func() (bool, string) {
		spooled = machineSpooledWindows(t, wctx, x)
		return time.Since(cut) >= 2*time.Minute && len(spooled) >= 2, fmt.Sprintf("%d windows spooled after %v", len(spooled), time.Since(cut))
	})
	st := machineAgentStatus(t, wctx, x)
	if !st.LastHeartbeatAt.After(cut) || st.LastHeartbeatStatus != 0 || st.Spool.Records < len(spooled) {
		t.Errorf("agent status while cut: last heartbeat %v status %d, spool %+v; want a heartbeat after the cut (%v) without an answer, %d windows spooled",
			st.LastHeartbeatAt, st.LastHeartbeatStatus, st.Spool, cut, len(spooled))
	}
	if !machineJournalSays(t, wctx, x, cut, func(l map[string]any) bool { return l["message"] == "heartbeat" && l["status"] == 0.0 }) {
		t.Errorf("the agent's journal since the cut has no heartbeat without an answer (status 0)")
	}
	if !machineJournalSays(t, wctx, x, cut, func(l map[string]any) bool { return l["message"] == "delivery paused" && l["status"] == 0.0 }) {
		t.Errorf("the agent's journal since the cut has no delivery paused without an answer (status 0)")
	}
	machineStillRunning(t, wctx, x, pid, "the outage")
	session := spooled[0].SessionID

	restored := time.Now()
	if err := x.CutControlPlane(false); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut for %v with %d windows spooled", restored.Sub(cut).Round(time.Second), len(spooled))
	// Delivery resumes when the outage's back-off ends, at most 5 min
	// (RetryMax) after the control plane is back, then drains at 5 a second.
	machinePoll(t, 7*time.Minute, "the spool drained after the outage", func() (bool, string) {
		n := len(machineSpooledWindows(t, wctx, x))
		return n == 0, fmt.Sprintf("%d windows still spooled", n)
	})
	t.Logf("restored to drained: %v", time.Since(restored).Round(time.Second))
	lifecycleDeployment(t, cl, "outage", dep.ID, 2*time.Minute, func(d adminapi.FleetDeployment) bool {
		return d.Status == "active" && d.EndedAt.IsZero() && d.LastHeartbeatAt.After(restored)
	})
	machineStillRunning(t, wctx, x, pid, "the restore")

	perf := machineStoredWindows(t, cl, "outage", dep.ID, cut.Add(-time.Hour))
	if len(perf.sessions) != 1 || perf.sessions[0].ID != session {
		t.Fatalf("sessions stored %+v; want the agent's one session %s", perf.sessions, session)
	}
	perf.requireWhole(t, perf.sessions[0], spooled)
	if last := perf.sessions[0].LastWindowAt; last.Before(restored.Truncate(time.Minute).Add(-time.Minute)) {
		t.Errorf("the session's last stored window %v: the outage's last minute (before %v) is missing", last, restored)
	}
	if st := machineAgentStatus(t, wctx, x); machineDropped(st) != 0 || st.Delivered < int64(len(spooled)) {
		t.Errorf("agent status after the outage: delivered %d, dropped %v; want at least %d delivered, none dropped", st.Delivered, st.Dropped, len(spooled))
	}
	if del := api.Requests(func(r dofake.Request) bool { return r.Method == http.MethodDelete }); len(del) != 0 {
		t.Errorf("DELETEs reached the provider: %v", del)
	}
	machineNotEnded(t, cl, "outage")
}

// TestMachineRebootKeepsSpool: a reboot keeps the spool, with no window
// twice (docs/operations.md, "Agent": the spool is durable in the state
// directory, replayed byte-identical). With the control plane cut, the
// agent spools windows; the box reboots (still cut: the route outlives
// the machine's boots), its agent comes back by itself with those windows
// still in its spool beside its stopped run's final window; the control
// plane restored, every window spooled before the reboot arrives after
// it, under its own session and minute, none twice, nothing dropped, and
// the agent's new session, once it has stored a window, follows without
// overlap.
func TestMachineRebootKeepsSpool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, bed, d, fingerprint := machineDaemon(t, "off")
	cl := d.Admin()
	x, dep := machineUp(t, cl, bed, []string{fingerprint}, "reboot", "box-r", 30)
	machineAgentJournalOnFailure(t, x)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()

	cut := time.Now()
	if err := x.CutControlPlane(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.CutControlPlane(false) })
	var before []protocol.WindowV1
	machinePoll(t, 3*time.Minute, "a window spooled while cut", func() (bool, string) {
		before = machineSpooledWindows(t, wctx, x)
		return len(before) >= 1, fmt.Sprintf("%d windows spooled after %v", len(before), time.Since(cut))
	})
	old := before[0].SessionID

	rebooted := time.Now()
	if _, err := x.Exec(wctx, "systemctl", "reboot"); err != nil {
		t.Fatal(err)
	}
	if err := x.WaitBoots(wctx, 2); err != nil {
		t.Fatal(err)
	}
	if out, err := x.WaitCloudInit(wctx); err != nil {
		t.Fatalf("cloud-init after the reboot: %v\n%s", err, out)
	}
	// Back by itself: the unit active after the reboot, with a new
	// session of its own (the state file's), and the old run's windows
	// still spooled beside its final one.
	var after []protocol.WindowV1
	machinePoll(t, 2*time.Minute, "the agent back after the reboot", func() (bool, string) {
		got, _ := x.Exec(wctx, "systemctl", "is-active", "chalupa-agent")
		st := machineAgentStatus(t, wctx, x)
		after = machineSpooledWindows(t, wctx, x)
		return strings.TrimSpace(got) == "active" && st.LastHeartbeatAt.After(rebooted), fmt.Sprintf("unit %q, last heartbeat %v", got, st.LastHeartbeatAt)
	})
	for _, w := range before {
		if !slices.ContainsFunc(after, func(a protocol.WindowV1) bool {
			return a.SessionID == w.SessionID && a.WindowStart.Equal(w.WindowStart)
		}) {
			t.Errorf("window %s %v spooled before the reboot is not in the spool after it: %v", w.SessionID, w.WindowStart, machineWindowKeys(after))
		}
	}
	if !slices.ContainsFunc(after, func(a protocol.WindowV1) bool { return a.SessionID == old && a.Final }) {
		t.Errorf("the stopped run's final window is not spooled after the reboot: %v", machineWindowKeys(after))
	}

	restored := time.Now()
	if err := x.CutControlPlane(false); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut %v, rebooted after %v, restored after %v, %d windows spooled across the reboot",
		cut.Format(time.TimeOnly), rebooted.Sub(cut).Round(time.Second), restored.Sub(cut).Round(time.Second), len(after))
	machinePoll(t, 7*time.Minute, "the spool drained after the reboot", func() (bool, string) {
		n := len(machineSpooledWindows(t, wctx, x))
		return n == 0, fmt.Sprintf("%d windows still spooled", n)
	})
	lifecycleDeployment(t, cl, "reboot", dep.ID, 2*time.Minute, func(d adminapi.FleetDeployment) bool {
		return d.Status == "active" && d.LastHeartbeatAt.After(restored)
	})

	perf := machineStoredWindows(t, cl, "reboot", dep.ID, cut.Add(-time.Hour))
	// The new run's first window closes a whole minute after its first
	// whole minute began: it may not be stored yet.
	if n := len(perf.sessions); n < 1 || n > 2 || perf.sessions[0].ID != old || (n == 2 && perf.sessions[1].ID == old) {
		t.Fatalf("sessions stored %+v; want the old run's %s, then at most the new one", perf.sessions, old)
	}
	var olds []protocol.WindowV1
	for _, w := range after {
		if w.SessionID == old {
			olds = append(olds, w)
		}
	}
	perf.requireWhole(t, perf.sessions[0], olds)
	if s := perf.sessions[0]; s.EndedAt.IsZero() {
		t.Errorf("the old run's session %+v did not end with its final window", s)
	}
	if len(perf.sessions) == 2 {
		if o, n := perf.sessions[0], perf.sessions[1]; !n.FirstWindowAt.After(o.LastWindowAt) {
			t.Errorf("the new session's first window %v is not after the old one's last %v", n.FirstWindowAt, o.LastWindowAt)
		}
	}
	if st := machineAgentStatus(t, wctx, x); machineDropped(st) != 0 {
		t.Errorf("agent status after the reboot: dropped %v; want none", st.Dropped)
	}
}

// machinePoll waits for cond every two seconds, up to bound: the box's
// evidence is read by a process entering it, not worth a tighter loop.
func machinePoll(t *testing.T, bound time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, bound, state)
		}
		<-tick.C
	}
}

// machineMainPID is the agent unit's MainPID.
func machineMainPID(t *testing.T, ctx context.Context, x *machines.Box) string {
	t.Helper()
	got, err := x.Exec(ctx, "systemctl", "show", "-p", "MainPID", "--value", "chalupa-agent")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(got)
}

// machineStillRunning requires the agent's unit active with MainPID pid.
func machineStillRunning(t *testing.T, ctx context.Context, x *machines.Box, pid, what string) {
	t.Helper()
	if got, err := x.Exec(ctx, "systemctl", "is-active", "chalupa-agent"); err != nil || strings.TrimSpace(got) != "active" {
		t.Errorf("after %s: the unit is %q, %v", what, got, err)
	}
	if got := machineMainPID(t, ctx, x); got != pid {
		t.Errorf("after %s: MainPID %s, before %s: the agent was restarted", what, got, pid)
	}
}

// machineSpooledWindows reads the telemetry windows in the agent's spool
// on the box: each record file (agent.Spool) is a header line, then the
// body.
func machineSpooledWindows(t *testing.T, ctx context.Context, x *machines.Box) []protocol.WindowV1 {
	t.Helper()
	out, err := x.Exec(ctx, "sh", "-c", `for f in /var/lib/chalupa-agent/spool/*.rec; do [ -e "$f" ] || continue; head -n 1 "$f"; tail -n +2 "$f"; echo; done`)
	if err != nil {
		t.Fatal(err)
	}
	var ws []protocol.WindowV1
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var h struct {
			Route string `json:"route"`
		}
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil || !sc.Scan() {
			t.Fatalf("a spool record on the box: %v\n%s", err, out)
		}
		if h.Route != "/api/ingest/telemetry" {
			continue
		}
		var w protocol.WindowV1
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			t.Fatalf("a spooled window on the box: %v: %s", err, sc.Bytes())
		}
		ws = append(ws, w)
	}
	return ws
}

// machineWindowKeys names windows by session and minute, for messages.
func machineWindowKeys(ws []protocol.WindowV1) []string {
	var out []string
	for _, w := range ws {
		out = append(out, fmt.Sprintf("%s@%s final=%v", w.SessionID, w.WindowStart.Format(time.TimeOnly), w.Final))
	}
	return out
}

// machineStatus is the part of `chalupa-agent status --json` (agent.StatusReport) the cases read.
type machineStatus struct {
	LastHeartbeatAt     time.Time        `json:"lastHeartbeatAt"`
	LastHeartbeatStatus int              `json:"lastHeartbeatStatus"`
	Delivered           int64            `json:"delivered"`
	Dropped             map[string]int64 `json:"dropped"`
	Spool               struct {
		Records int `json:"records"`
	} `json:"spool"`
}

// machineAgentStatus runs `chalupa-agent status --json` in the box.
func machineAgentStatus(t *testing.T, ctx context.Context, x *machines.Box) machineStatus {
	t.Helper()
	out, err := x.Exec(ctx, "/usr/local/bin/chalupa-agent", "status", "--json")
	var st machineStatus
	if err == nil {
		err = json.Unmarshal([]byte(out), &st)
	}
	if err != nil {
		t.Fatalf("agent status: %v\n%s", err, out)
	}
	return st
}

// machineDropped sums the agent's drop counts.
func machineDropped(st machineStatus) int64 {
	var n int64
	for _, v := range st.Dropped {
		n += v
	}
	return n
}

// machineJournalSays reports whether a line the agent logged since at (its
// zerolog JSON, one object a line) satisfies ok.
func machineJournalSays(t *testing.T, ctx context.Context, x *machines.Box, at time.Time, ok func(map[string]any) bool) bool {
	t.Helper()
	out, err := x.Exec(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", "chalupa-agent", "--since", "@"+strconv.FormatInt(at.Unix(), 10))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && ok(l) {
			return true
		}
	}
	return false
}

// machineAgentJournalOnFailure logs the agent's journal when the test fails.
func machineAgentJournalOnFailure(t *testing.T, x *machines.Box) {
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, _ := x.Exec(ctx, "journalctl", "--no-pager", "-o", "cat", "-n", "80", "-u", "chalupa-agent")
			t.Logf("the box's journal of chalupa-agent:\n%s", out)
		}
	})
}

// machineWindows is what the daemon stored of a deployment's windows, as
// adminGetDeploymentPerformance serves them at one-minute steps.
type machineWindows struct {
	sessions []adminapi.PerformanceSession
	// samples is memTotalBytes's sample count per minute (every sample
	// the agent takes measures it).
	samples map[time.Time]int64
}

// machineStoredWindows reads env's deployment id's windows since from.
func machineStoredWindows(t *testing.T, cl *adminapi.Client, env, id string, from time.Time) machineWindows {
	t.Helper()
	p, err := cl.GetDeploymentPerformance(context.Background(), adminapi.DeploymentPerformanceRequest{
		EnvironmentSlug: env, DeploymentID: id, From: from, To: time.Now().Add(time.Minute), Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := machineWindows{sessions: p.Sessions, samples: map[time.Time]int64{}}
	for _, s := range p.Series {
		if s.Metric != "memTotalBytes" {
			continue
		}
		for _, pt := range s.Points {
			out.samples[pt.T.UTC()] = pt.N
		}
	}
	return out
}

// requireWhole requires session s stored whole: one window per minute
// from its first to its last (its count is its span: no gap, and the
// store keys a window by session and minute, so none twice), every
// minute's samples counted once (at most 12, one per 5 s: a window stored
// again under another identity would double them), and each of want
// inside it.
func (m machineWindows) requireWhole(t *testing.T, s adminapi.PerformanceSession, want []protocol.WindowV1) {
	t.Helper()
	span := int64(s.LastWindowAt.Sub(s.FirstWindowAt)/time.Minute) + 1
	if s.Windows != span {
		t.Errorf("session %s: %d windows stored from %v to %v; want %d, one a minute", s.ID, s.Windows, s.FirstWindowAt, s.LastWindowAt, span)
	}
	for at := s.FirstWindowAt.UTC(); !at.After(s.LastWindowAt); at = at.Add(time.Minute) {
		if n := m.samples[at]; n < 1 || n > 12 {
			t.Errorf("session %s: minute %v holds %d samples; want 1 to 12 (each once)", s.ID, at, n)
		}
	}
	for _, w := range want {
		if w.SessionID != s.ID || w.WindowStart.Before(s.FirstWindowAt) || w.WindowStart.After(s.LastWindowAt) {
			t.Errorf("spooled window %s@%v is not among session %s's stored windows (%v to %v)", w.SessionID, w.WindowStart, s.ID, s.FirstWindowAt, s.LastWindowAt)
		}
	}
}

// machineNotEnded requires env's events to tell of no ended deployment.
func machineNotEnded(t *testing.T, cl *adminapi.Client, env string) {
	t.Helper()
	evs, err := cl.ListEvents(context.Background(), adminapi.ListEventsRequest{Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if strings.Contains(e.Kind, "ended") || strings.Contains(e.Kind, "reap") || strings.Contains(e.Kind, "destroy") {
			t.Errorf("event %s %s (%s) in %s: the outage ended something", e.Kind, e.Deployment, e.Reason, env)
		}
	}
}
