package e2e

// End-to-end test of telemetry (docs/operations.md, "Telemetry",
// "Retention", "Performance API") with the built binary: signed windows in,
// the performance API out, then a restart eight days ahead (serve
// --clock-offset) where retention folds the windows into hourly rollups and
// the performance API still answers the same totals.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// hourTotals is one hour's aggregate of one metric as the performance API
// shows it.
type hourTotals struct {
	N             int64
	Sum, Min, Max float64
}

// performanceByHour reads `admin performance --step 1h --json` and returns,
// per metric, each hour's totals.
func performanceByHour(t *testing.T, bin string, d *proctest.Daemon, since string) map[string]map[time.Time]hourTotals {
	t.Helper()
	out := ingestE2ECLI(t, bin, d, "admin", "performance", "demo-harbor", "dep-tel", "--since", since, "--step", "1h", "--json")
	var p adminapi.DeploymentPerformance
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("performance --json: %v\n%s", err, out)
	}
	got := map[string]map[time.Time]hourTotals{}
	for _, s := range p.Series {
		for _, pt := range s.Points {
			if got[s.Metric] == nil {
				got[s.Metric] = map[time.Time]hourTotals{}
			}
			got[s.Metric][pt.T.UTC()] = hourTotals{N: pt.N, Sum: pt.Sum, Min: pt.Min, Max: pt.Max}
		}
	}
	return got
}

func TestTelemetryEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	ingestE2ECLI(t, bin, d, "admin", "env", "create", "demo-harbor")
	keyDir := filepath.Join(t.TempDir(), "agent")
	ingestE2ECLI(t, bin, d, "admin", "keys", "issue", "demo-harbor", "--out", keyDir)
	keyFile := filepath.Join(keyDir, "ingest.key")
	idBytes, err := os.ReadFile(filepath.Join(keyDir, "key-id"))
	if err != nil {
		t.Fatal(err)
	}
	keyID := strings.TrimSpace(string(idBytes))
	if out, code := proctest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL, "--key-id", keyID,
		"--key-file", keyFile, "--env", "demo-harbor", "--deployment", "dep-tel"); code != 0 {
		t.Fatalf("agent heartbeat exited %d:\n%s", code, out)
	}
	material, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := protocol.DecodeKeyMaterial(string(material))
	if err != nil {
		t.Fatal(err)
	}
	cl := &protocol.Client{BaseURL: d.URL, KeyID: keyID, Key: key, HTTP: &http.Client{Timeout: 30 * time.Second}}
	ctx := context.Background()
	post := func(w protocol.WindowV1) (int, string) {
		t.Helper()
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		r, err := cl.Post(ctx, "/api/ingest/telemetry", b)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status, string(r.Body)
	}

	// 40 windows ending a minute ago; cpuPct and netRxBytes vary by minute.
	first := time.Now().UTC().Truncate(time.Minute).Add(-41 * time.Minute)
	window := func(i int) protocol.WindowV1 {
		c := float64(10 + i%7)
		rx := float64(1000 * (i + 1))
		return protocol.WindowV1{EnvironmentSlug: "demo-harbor", DeploymentID: "dep-tel", SessionID: "sess-e2e",
			WindowStart: first.Add(time.Duration(i) * time.Minute), WindowSeconds: 60, Final: i == 39,
			Metrics: protocol.MetricsV1{
				CPUPct:     &protocol.PercentAggV1{N: 12, Sum: 12 * c, Min: c - 1, Max: c + 1, Last: c},
				NetRxBytes: &protocol.BytesAggV1{N: 12, Sum: 12 * rx, Min: rx, Max: rx, Last: rx},
			}}
	}
	want := map[string]map[time.Time]hourTotals{"cpuPct": {}, "netRxBytes": {}}
	for i := 0; i < 40; i++ {
		w := window(i)
		if st, body := post(w); st != http.StatusAccepted || !strings.Contains(body, `"deduplicated":false`) {
			t.Fatalf("window %d: %d %s", i, st, body)
		}
		hour := w.WindowStart.Truncate(time.Hour)
		for name, a := range map[string]*protocol.AggV1{"cpuPct": (*protocol.AggV1)(w.Metrics.CPUPct), "netRxBytes": (*protocol.AggV1)(w.Metrics.NetRxBytes)} {
			h, ok := want[name][hour]
			if !ok {
				h = hourTotals{Min: a.Min, Max: a.Max}
			}
			h.N += a.N
			h.Sum += a.Sum
			h.Min, h.Max = min(h.Min, a.Min), max(h.Max, a.Max)
			want[name][hour] = h
		}
	}
	// The smoke test's retries: an exact retry is deduplicated, a changed
	// one is 409.
	if st, body := post(window(5)); st != http.StatusAccepted || !strings.Contains(body, `"deduplicated":true`) {
		t.Fatalf("exact retry: %d %s", st, body)
	}
	changed := window(5)
	changed.Metrics.CPUPct.Last = changed.Metrics.CPUPct.Max
	if st, body := post(changed); st != http.StatusConflict || !strings.Contains(body, "window_conflict") {
		t.Fatalf("changed retry: %d %s", st, body)
	}

	check := func(stage string, got map[string]map[time.Time]hourTotals) {
		t.Helper()
		for name, hours := range want {
			if len(got[name]) != len(hours) {
				t.Fatalf("%s: %s has %d hourly points, want %d: %v", stage, name, len(got[name]), len(hours), got[name])
			}
			for hour, w := range hours {
				g := got[name][hour]
				if g.N != w.N || g.Min != w.Min || g.Max != w.Max || fmt.Sprintf("%.6f", g.Sum) != fmt.Sprintf("%.6f", w.Sum) {
					t.Fatalf("%s: %s at %v = %+v, want %+v", stage, name, hour, g, w)
				}
			}
		}
	}
	check("from detail", performanceByHour(t, bin, d, "2h"))

	// Eight days later: retention folds every window into hourly rollups.
	ingestE2EStop(t, d)
	later := proctest.StartDaemon(t, bin, d.EnvCopy(), "--clock-offset", "192h")
	var rep adminapi.RetentionRun
	out := ingestE2ECLI(t, bin, later, "admin", "retention", "run", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("retention run --json: %v\n%s", err, out)
	}
	if rep.TelemetryMinuteRollups != 40 || rep.TelemetryBacklogPending || rep.TelemetryDrainStopReason != "drained" {
		t.Fatalf("retention report %+v: want 40 source rows folded, drained", rep)
	}
	audit := ingestE2ECLI(t, bin, later, "admin", "telemetry", "audit", "--json")
	var au adminapi.TelemetryAudit
	if err := json.Unmarshal([]byte(audit), &au); err != nil {
		t.Fatalf("telemetry audit: %v\n%s", err, audit)
	}
	// Detail is gone, hourly rows hold it, and the receipts stay.
	if au.Tables.Windows != 0 || au.Tables.Hourly == 0 || au.Tables.Receipts != 40 {
		t.Fatalf("after the fold: %+v", au.Tables)
	}
	check("from hourly rollups, 8 days later", performanceByHour(t, bin, later, "2h"))
	ingestE2EStop(t, later)
}
