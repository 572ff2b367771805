package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/protocol"
)

// idleHourBudget bounds what an idle agent sends and receives in an hour
// (bytes): 120 heartbeats and 60 windows come to a few hundred KB; a
// budget of 1 MiB catches a regression such as a request per sample.
const idleHourBudget = 1 << 20

// TestIdleAgentBytesPerHour: an idle agent over one hour of its (fake)
// clock — a heartbeat every 30 s, a sample every 5 s, a window a minute —
// sends and receives less than idleHourBudget, counted at the control
// plane's socket. The figure is logged (go test -v -run
// TestIdleAgentBytesPerHour ./agent/).
func TestIdleAgentBytesPerHour(t *testing.T) {
	f := newFleet(t)
	a := f.start()
	f.WireIn.Store(0)
	f.WireOut.Store(0)
	f.Heartbeat(a)
	for i := 1; i <= int(time.Hour/agent.SampleInterval); i++ {
		f.Step(a)
		if i%int(agent.HeartbeatInterval/agent.SampleInterval) == 0 {
			f.Heartbeat(a)
		}
	}
	hb, tel := f.Seen(agent.HeartbeatRoute), f.Seen(agent.TelemetryRoute)
	sent, received := f.WireIn.Load(), f.WireOut.Load()
	total := sent + received
	t.Logf("idle agent, one hour: %d heartbeats, %d windows; %d bytes sent, %d received, %d total (HTTP/1.1 over keep-alive, no TLS)",
		hb, tel, sent, received, total)
	if hb != 121 || tel < 59 {
		t.Fatalf("%d heartbeats and %d windows in an hour, want 121 and about 60", hb, tel)
	}
	if total > idleHourBudget {
		t.Fatalf("%d bytes in an idle hour, over the %d budget", total, idleHourBudget)
	}
}

// BenchmarkSpoolReplay1000 measures how long a spool of 1,000 windows (an
// outage's backlog: ten sessions of 100 windows, each ended by a final
// window, all within the control plane's 2-hour age limit) takes to drain
// into an in-process daemon on the real clock. By default the pace is
// unbounded (the control plane's own cost); CHALUPA_REPLAY_RATE=5 runs it at
// the agent's ReplayRate:
//
//	go test -run '^$' -bench SpoolReplay1000 -benchtime 1x ./agent/
//	CHALUPA_REPLAY_RATE=5 go test -run '^$' -bench SpoolReplay1000 -benchtime 1x -timeout 30m ./agent/
func BenchmarkSpoolReplay1000(b *testing.B) {
	pace := rate.Inf
	if v := os.Getenv("CHALUPA_REPLAY_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatal(err)
		}
		pace = rate.Limit(r)
	}
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		d := daemontest.NewInProcess(b, daemontest.AppOptions{})
		if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo-harbor"}); err != nil {
			b.Fatal(err)
		}
		k, err := d.Admin.IssueIngestKey(ctx, "demo-harbor")
		if err != nil {
			b.Fatal(err)
		}
		key, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		cfg := agent.Config{URL: d.URL, KeyFile: filepath.Join(dir, "unused"), Environment: "demo-harbor", StateDir: filepath.Join(dir, "state"),
			DiskPath: dir, ReplayRate: pace, Log: zerolog.Nop(), NvidiaSMI: "none"}
		a, err := agent.New(cfg, agent.Credentials{KeyID: k.KeyID, Key: key}, agent.Identity{DeploymentID: "dep-replay", DropletID: 1, Region: "nyc3"})
		if err != nil {
			b.Fatal(err)
		}
		if status, err := a.Heartbeat(ctx); err != nil || status != 202 {
			b.Fatalf("heartbeat: %d %v", status, err)
		}
		now := time.Now().UTC().Truncate(time.Minute)
		const sessions, perSession = 10, 100
		for s := range sessions {
			for m := range perSession {
				w := protocol.WindowV1{EnvironmentSlug: "demo-harbor", DeploymentID: "dep-replay", SessionID: "replay-" + strconv.Itoa(s),
					WindowStart: now.Add(time.Duration(m-perSession-2) * time.Minute), WindowSeconds: 60, Final: m == perSession-1,
					Metrics: protocol.MetricsV1{CPUPct: &protocol.PercentAggV1{N: 12, Sum: 120, Min: 5, Max: 15, Last: 9}}}
				body, err := json.Marshal(w)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := a.Spool().Append(agent.Record{Route: agent.TelemetryRoute, Kind: "telemetry", Created: time.Now(), Body: body}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
		start := time.Now()
		delivered := 0
		for {
			res := a.Deliver(ctx)
			delivered += res.Delivered
			if n, _ := a.Spool().Depth(); n == 0 {
				break
			}
			if res.Paused || res.Dropped > 0 {
				b.Fatalf("replay stopped: %+v after %d delivered", res, delivered)
			}
		}
		took := time.Since(start)
		b.StopTimer()
		if delivered != sessions*perSession {
			b.Fatalf("delivered %d, want %d", delivered, sessions*perSession)
		}
		b.ReportMetric(float64(delivered)/took.Seconds(), "windows/s")
		b.ReportMetric(took.Seconds(), "s/drain")
		d.Close()
	}
}
