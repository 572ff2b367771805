package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/protocol"
)

// writeProc writes a fake process: its comm and its command line (a
// title as sshd sets it: the text, then NUL padding).
func writeProc(t *testing.T, proc string, pid int, comm, title string) {
	t.Helper()
	dir := filepath.Join(proc, fmt.Sprint(pid))
	writeFile(t, filepath.Join(dir, "comm"), comm+"\n")
	writeFile(t, filepath.Join(dir, "cmdline"), title+"\x00\x00\x00")
}

// TestSSHSessions: an authenticated session's process is activity; the
// listener, pre-authentication and privilege-separation processes, a
// connection that never authenticated, and another program titled like a
// session are not.
func TestSSHSessions(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	type proc struct{ comm, title string }
	listener := proc{"sshd", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"}
	for _, tc := range []struct {
		name  string
		procs []proc
		tcp   string // a /proc/net/tcp row: connections alone never count
		want  bool
	}{
		{"nothing", nil, "", false},
		{"the listener only", []proc{listener}, "", false},
		{"a connection that never authenticated (scanner, held open)", []proc{listener, {"sshd", "sshd: unknown [preauth]"}, {"sshd", "sshd: root [net]"}},
			"   0: 0A000002:0016 0A000001:D431 01 00000000:00000000 00:00000000 00000000 0 0 1\n", false},
		{"authenticating, privilege separation", []proc{listener, {"sshd", "sshd: dev [priv]"}}, "", false},
		{"interactive session", []proc{listener, {"sshd", "sshd: dev [priv]"}, {"sshd", "sshd: dev@pts/0"}, {"bash", "-bash"}}, "", true},
		{"two terminals on one connection", []proc{{"sshd", "sshd: dev@pts/0,pts/3"}}, "", true},
		{"port-forward with -N, no pty", []proc{{"sshd", "sshd: dev@notty"}}, "", true},
		{"OpenSSH 9.8+ session process", []proc{{"sshd", "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"}, {"sshd-session", "sshd-session: dev [priv]"}, {"sshd-session", "sshd-session: dev@pts/1"}}, "", true},
		{"OpenSSH 9.8+ pre-authentication", []proc{{"sshd-session", "sshd-session: dev [net]"}, {"sshd-auth", "sshd-auth: dev [preauth]"}}, "", false},
		{"another program titled like a session", []proc{{"python3", "sshd: dev@pts/0"}}, "", false},
		{"a title with something after the terminal", []proc{{"sshd", "sshd: dev@pts/0 [priv]"}}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "net", "tcp"), "  sl  local_address rem_address   st\n"+tc.tcp)
			writeFile(t, filepath.Join(root, "self", "comm"), "sshd\n") // not a pid: skipped
			for i, p := range tc.procs {
				writeProc(t, root, 100+i, p.comm, p.title)
			}
			got, err := SSHSessions{ProcRoot: root}.LastActivity(now)
			if err != nil {
				t.Fatal(err)
			}
			if got.Equal(now) != tc.want || (!tc.want && !got.IsZero()) {
				t.Errorf("LastActivity = %v, want activity %v", got, tc.want)
			}
		})
	}
	if _, err := (SSHSessions{ProcRoot: filepath.Join(t.TempDir(), "missing")}).LastActivity(now); err == nil {
		t.Error("a missing process table is not an error")
	}
}

// TestIdleTracker: lastActivityAt moves only on new activity, idleChecks
// counts the checks in between, and activity ahead of the clock counts as
// now.
func TestIdleTracker(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	proc, dev, run := t.TempDir(), t.TempDir(), t.TempDir()
	pts := filepath.Join(dev, "pts", "0")
	writeFile(t, pts, "")
	writeFile(t, filepath.Join(dev, "pts", "ptmx"), "")
	setAtime(t, pts, start.Add(-time.Hour))
	setAtime(t, filepath.Join(dev, "pts", "ptmx"), start.Add(time.Hour)) // the multiplexer is ignored
	tr := NewIdleTracker(start, &CIProbe{RunRoot: run, ProcRoot: proc}, SSHSessions{ProcRoot: proc}, TerminalInput{DevRoot: dev})

	step := func(at time.Time, wantLast time.Time, wantChecks int64) {
		t.Helper()
		o := tr.Check(at)
		if !o.LastActivityAt.Equal(wantLast) || o.IdleChecks != wantChecks {
			t.Fatalf("at %s: lastActivityAt %s idleChecks %d, want %s %d", at.Format(time.TimeOnly), o.LastActivityAt.Format(time.TimeOnly), o.IdleChecks, wantLast.Format(time.TimeOnly), wantChecks)
		}
	}
	step(start.Add(30*time.Second), start, 1)
	step(start.Add(60*time.Second), start, 2)
	// An SSH session opens: activity now, at every check while it lasts.
	writeProc(t, proc, 4321, "sshd", "sshd: dev@pts/0")
	step(start.Add(90*time.Second), start.Add(90*time.Second), 0)
	step(start.Add(120*time.Second), start.Add(120*time.Second), 0)
	if err := os.RemoveAll(filepath.Join(proc, "4321")); err != nil {
		t.Fatal(err)
	}
	step(start.Add(150*time.Second), start.Add(120*time.Second), 1)
	// Terminal input (atime) after the last activity moves it.
	setAtime(t, pts, start.Add(170*time.Second))
	step(start.Add(180*time.Second), start.Add(170*time.Second), 0)
	step(start.Add(210*time.Second), start.Add(170*time.Second), 1)
	// An atime ahead of the clock counts as now.
	setAtime(t, pts, start.Add(time.Hour))
	step(start.Add(240*time.Second), start.Add(240*time.Second), 0)
}

func TestCIProbe(t *testing.T) {
	proc, run := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(proc, "101", "comm"), "bash\n")
	p := &CIProbe{RunRoot: run, ProcRoot: proc}
	if p.Active() {
		t.Fatal("active without marker or pattern")
	}
	writeFile(t, filepath.Join(run, CIMarker), "")
	if !p.Active() {
		t.Fatal("not active with the marker")
	}
	os.Remove(filepath.Join(run, CIMarker))
	p.Pattern = regexp.MustCompile(`^Runner\.Worker$`)
	if p.Active() {
		t.Fatal("active with no matching process")
	}
	writeFile(t, filepath.Join(proc, "202", "comm"), "Runner.Worker\n")
	if !p.Active() {
		t.Fatal("not active with a matching process")
	}
	if (*CIProbe)(nil).Active() {
		t.Fatal("a nil probe is active")
	}
}

// fakeProc writes the files the sampler reads.
type fakeProc struct {
	root string
}

func (p fakeProc) set(t *testing.T, busy, idle uint64, memTotalKB, memAvailKB uint64, load float64, rx, tx uint64) {
	t.Helper()
	writeFile(t, filepath.Join(p.root, "stat"), fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\ncpu0 1 2 3 4\n", busy, idle))
	writeFile(t, filepath.Join(p.root, "meminfo"), fmt.Sprintf("MemTotal:       %d kB\nMemFree:          1 kB\nMemAvailable:   %d kB\n", memTotalKB, memAvailKB))
	writeFile(t, filepath.Join(p.root, "loadavg"), fmt.Sprintf("%.2f 0.50 0.25 1/100 4242\n", load))
	writeFile(t, filepath.Join(p.root, "net", "dev"), fmt.Sprintf(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 999999 1 0 0 0 0 0 0 999999 1 0 0 0 0 0 0
  eth0: %d 10 0 0 0 0 0 0 %d 10 0 0 0 0 0 0
`, rx, tx))
}

func TestSampler(t *testing.T) {
	p := fakeProc{t.TempDir()}
	s := &Sampler{ProcRoot: p.root, DiskPath: t.TempDir()}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p.set(t, 100, 900, 4000, 1000, 0.75, 5000, 700)
	first := s.Take(context.Background(), now)
	if first.Has[CPUPct] || first.Has[NetRxBytes] {
		t.Fatal("the first sample has deltas")
	}
	if first.Value[MemTotalBytes] != 4000*1024 || first.Value[MemUsedBytes] != 3000*1024 || first.Value[Load1] != 0.75 {
		t.Fatalf("memory/load: %+v", first.Value)
	}
	if !first.Has[DiskTotalBytes] || first.Value[DiskUsedBytes] > first.Value[DiskTotalBytes] {
		t.Fatalf("disk: %v %v", first.Value[DiskUsedBytes], first.Value[DiskTotalBytes])
	}
	p.set(t, 130, 970, 4000, 1000, 0.75, 6000, 900) // 30 busy of 100 ticks; lo ignored
	second := s.Take(context.Background(), now.Add(5*time.Second))
	if second.Value[CPUPct] != 30 || second.Value[NetRxBytes] != 1000 || second.Value[NetTxBytes] != 200 {
		t.Fatalf("deltas: cpu %v rx %v tx %v", second.Value[CPUPct], second.Value[NetRxBytes], second.Value[NetTxBytes])
	}
	p.set(t, 130, 970, 4000, 1000, 0.75, 10, 10) // counters reset: no delta, no nonsense
	if third := s.Take(context.Background(), now.Add(10*time.Second)); third.Has[NetRxBytes] || third.Has[CPUPct] {
		t.Fatal("a reset counter gave a delta")
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name, out string
		want      map[Metric]float64
		err       bool
	}{
		{"one GPU", "45, 1024, 16384, 60, 70.5\n", map[Metric]float64{GPUUtilPct: 45, GPUMemUsedBytes: 1024 * mib, GPUMemTotalBytes: 16384 * mib, GPUTempC: 60, GPUPowerW: 70.5}, false},
		{"two GPUs: busiest, summed, hottest", "10, 100, 1000, 50, 30\n90, 200, 1000, 70, 40.5\n",
			map[Metric]float64{GPUUtilPct: 90, GPUMemUsedBytes: 300 * mib, GPUMemTotalBytes: 2000 * mib, GPUTempC: 70, GPUPowerW: 70.5}, false},
		{"power not available", "45, 1024, 16384, 60, [N/A]\n", map[Metric]float64{GPUUtilPct: 45, GPUMemUsedBytes: 1024 * mib, GPUMemTotalBytes: 16384 * mib, GPUTempC: 60}, false},
		{"N/A on one GPU only", "[N/A], 1, 2, [N/A], 5\n20, 1, 2, 40, [Not Supported]\n", map[Metric]float64{GPUUtilPct: 20, GPUMemUsedBytes: 2 * mib, GPUMemTotalBytes: 4 * mib, GPUTempC: 40, GPUPowerW: 5}, false},
		{"no rows", "\n", nil, true},
		{"garbage", "No devices were found\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Sample
			err := ParseNvidiaSMI([]byte(tc.out), &s)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			for m := GPUUtilPct; m <= GPUPowerW; m++ {
				want, ok := tc.want[m]
				if s.Has[m] != ok || (ok && s.Value[m] != want) {
					t.Errorf("metric %d: has %v value %v, want %v %v", m, s.Has[m], s.Value[m], ok, want)
				}
			}
		})
	}
}

// TestWindower: windows are whole minutes after the agent's start (the
// partial first minute is not sent), with n/sum/min/max/last per metric,
// and the final window is the current minute's, final:true.
func TestWindower(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 41, 23, 0, time.UTC)
	w := &Windower{EnvironmentSlug: "e1", DeploymentID: "d1", SessionID: "s1", Start: start}
	sample := func(at time.Time, cpu float64) Sample {
		var s Sample
		s.At = at
		s.set(CPUPct, cpu)
		return s
	}
	at := time.Date(2026, 12, 1, 10, 41, 25, 0, time.UTC)
	var done []string
	for i := 0; at.Before(time.Date(2026, 12, 1, 10, 43, 0, 0, time.UTC)); i++ {
		if out := w.Add(sample(at, float64(i%4)*10)); out != nil {
			done = append(done, out.WindowStart.Format(time.TimeOnly))
		}
		at = at.Add(SampleInterval)
	}
	// Samples 10:41:25..10:41:55 (partial minute) and 10:42:00..10:42:55.
	if len(done) != 0 {
		t.Fatalf("windows before 10:43: %v (the partial first minute must not be sent)", done)
	}
	out := w.Add(sample(at, 50)) // 10:43:00 closes 10:42
	if out == nil || !out.WindowStart.Equal(time.Date(2026, 12, 1, 10, 42, 0, 0, time.UTC)) || out.Final {
		t.Fatalf("closed window: %+v", out)
	}
	c := out.Metrics.CPUPct
	// 10:42:00 is sample i=7: values (7..18)%4*10 = 30,0,10,20 ×3.
	if c.N != 12 || c.Sum != 180 || c.Min != 0 || c.Max != 30 || c.Last != 20 {
		t.Fatalf("cpu aggregate %+v", *c)
	}
	if err := telemetry.ValidateWindow(out); err != nil {
		t.Fatalf("window does not validate: %v", err)
	}
	final := w.Final(at.Add(2 * time.Second))
	if !final.Final || !final.WindowStart.Equal(time.Date(2026, 12, 1, 10, 43, 0, 0, time.UTC)) || final.Metrics.CPUPct.N != 1 {
		t.Fatalf("final window: %+v", final)
	}
	// An agent stopped before its first sample still ends its session.
	w2 := &Windower{EnvironmentSlug: "e1", DeploymentID: "d1", SessionID: "s2", Start: start}
	if f := w2.Final(start); !f.Final || f.Metrics.CPUPct != nil || telemetry.ValidateWindow(f) != nil {
		t.Fatalf("empty final window: %+v", f)
	}
}

func TestSpool(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	var drops []DropReason
	sp, err := OpenSpool(dir, 3, 0, func(r DropReason, _ Record) { drops = append(drops, r) })
	if err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{[]byte(`{"a":1}`), []byte("{\n \"b\" : 2 }\n"), []byte(`{"c":3}`), []byte(`{"d":4}`)}
	for _, b := range bodies {
		if _, err := sp.Append(Record{Route: TelemetryRoute, Kind: "telemetry", Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	if len(drops) != 1 || drops[0] != DropOverCap {
		t.Fatalf("drops %v, want one overCap", drops)
	}
	// Reopened (a restart), in order, byte-identical; a torn temporary
	// file is removed and a corrupt record dropped.
	writeFile(t, filepath.Join(dir, tmpPrefix+recordName(99)), "half")
	writeFile(t, filepath.Join(dir, recordName(98)), "no header")
	sp2, err := OpenSpool(dir, 3, 0, func(r DropReason, _ Record) { drops = append(drops, r) })
	if err != nil {
		t.Fatal(err)
	}
	list := sp2.List()
	if len(list) != 3 || drops[len(drops)-1] != DropCorrupt {
		t.Fatalf("after reopen: %d records, drops %v", len(list), drops)
	}
	for i, r := range list {
		b, err := sp2.Body(r)
		if err != nil || !bytes.Equal(b, bodies[i+1]) || r.Route != TelemetryRoute {
			t.Fatalf("record %d: %q %v, want %q", i, b, err, bodies[i+1])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, tmpPrefix+recordName(99))); !os.IsNotExist(err) {
		t.Error("the temporary file survived the reopen")
	}
	if err := sp2.Remove(list[0].Seq); err != nil {
		t.Fatal(err)
	}
	r, err := sp2.Append(Record{Route: TelemetryRoute, Body: []byte("{}")})
	if err != nil || r.Seq <= list[2].Seq {
		t.Fatalf("new record seq %d after %d: %v", r.Seq, list[2].Seq, err)
	}
	if n, _ := sp2.Depth(); n != 3 {
		t.Fatalf("depth %d", n)
	}
	if st := spoolDepth(dir); st.Records != 3 {
		t.Fatalf("status depth %+v", st)
	}
	// The byte cap drops the oldest too, but never the record just added.
	sp3, _ := OpenSpool(filepath.Join(t.TempDir(), "s"), 100, 200, nil)
	for range 5 {
		sp3.Append(Record{Route: TelemetryRoute, Body: bytes.Repeat([]byte("x"), 80)})
	}
	if n, b := sp3.Depth(); n != 1 || b > 200 {
		t.Fatalf("byte cap: %d records, %d bytes", n, b)
	}
}

func TestClassify(t *testing.T) {
	body := func(code string) []byte { return []byte(`{"error":{"code":"` + code + `","message":"m"}}`) }
	ra := http.Header{"Retry-After": {"7"}}
	for _, tc := range []struct {
		name    string
		status  int
		header  http.Header
		body    []byte
		verdict Verdict
		reason  DropReason
		after   time.Duration
	}{
		{"accepted", 202, nil, []byte(`{"accepted":true}`), Delivered, "", 0},
		{"deduplicated", 202, nil, []byte(`{"accepted":true,"deduplicated":true}`), Delivered, "", 0},
		{"no answer", 0, nil, nil, Retry, "", 0},
		{"overloaded", 503, ra, body("overloaded"), Retry, "", 7 * time.Second},
		{"internal", 500, nil, body("internal"), Retry, "", 0},
		{"quota", 429, ra, body("telemetry_quota"), Retry, "", 7 * time.Second},
		{"clock skew", 401, nil, body("timestamp_skew"), Retry, "", 0},
		{"deployment not created yet", 404, nil, body("deployment_not_found"), Retry, "", 0},
		{"nonce collision", 409, nil, body("nonce_replayed"), Retry, "", 0},
		{"changed retry", 409, nil, body("window_conflict"), Drop, DropConflict, 0},
		{"deployment ended", 409, nil, body("deployment_ended"), Drop, DropDeploymentEnded, 0},
		{"too old", 422, nil, body("window_too_old"), Drop, DropTooOld, 0},
		{"invalid", 422, nil, body("invalid_body"), Drop, DropRefused, 0},
		{"too large", 413, nil, body("body_too_large"), Drop, DropRefused, 0},
		{"wrong environment", 403, nil, body("environment_mismatch"), Drop, DropRefused, 0},
		{"unknown route", 404, nil, body("not_found"), Drop, DropRefused, 0},
		{"huge Retry-After is capped", 503, http.Header{"Retry-After": {"999999"}}, nil, Retry, "", RetryAfterMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.status, tc.header, tc.body)
			if got.Verdict != tc.verdict || got.Reason != tc.reason || got.RetryAfter != tc.after {
				t.Errorf("Classify = %+v, want verdict %v reason %q after %v", got, tc.verdict, tc.reason, tc.after)
			}
		})
	}
}

// TestDeliveryPacedAndBackedOff: replay is paced at ReplayRate on the
// injected clock, and a failure pauses the spool for the back-off (or a
// longer Retry-After).
func TestDeliveryPacedAndBackedOff(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	var status = 202
	var times []time.Time
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		times = append(times, clock.Now())
		if status == 429 {
			w.Header().Set("Retry-After", "30")
		}
		w.WriteHeader(status)
	})
	dir := t.TempDir()
	sp, _ := OpenSpool(dir, 0, 0, nil)
	st, _ := openState(dir)
	d := newDeliverer(sp, testClient(ts, clock), clock, zerolog.Nop(), st, 0)
	for range 3 {
		sp.Append(Record{Route: TelemetryRoute, Body: []byte("{}")})
	}
	done := make(chan PassResult)
	go func() { done <- d.Pass(context.Background()) }()
	for range 2 {
		if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second / ReplayRate)
	}
	if res := <-done; res.Delivered != 3 || len(times) != 3 {
		t.Fatalf("pass %+v, %d requests", res, len(times))
	}
	if gap := times[2].Sub(times[0]); gap != 2*time.Second/ReplayRate {
		t.Fatalf("three sends over %v, want paced at %d/s", gap, ReplayRate)
	}
	status = 429
	sp.Append(Record{Route: TelemetryRoute, Body: []byte("{}")})
	clock.Advance(time.Second)
	if res := d.Pass(context.Background()); !res.Paused || res.Sent != 1 {
		t.Fatalf("429 pass: %+v", res)
	}
	if got := d.NotUntil().Sub(clock.Now()); got != 30*time.Second {
		t.Fatalf("paused for %v, want Retry-After 30s", got)
	}
	if res := d.Pass(context.Background()); res.Sent != 0 {
		t.Fatal("sent inside the back-off")
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func setAtime(t *testing.T, path string, at time.Time) {
	t.Helper()
	if err := os.Chtimes(path, at, time.Time{}); err != nil {
		t.Fatal(err)
	}
}

func newTestServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

func testClient(ts *httptest.Server, clock clockwork.Clock) *protocol.Client {
	return &protocol.Client{BaseURL: ts.URL, KeyID: "env_e1_0000000000000000", Key: make([]byte, 32), HTTP: ts.Client(), Now: clock.Now}
}
