package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// edited is body b (a JSON object) changed by f on its decoded form:
// numbers stay as written (json.Number).
func edited(t testing.TB, b []byte, f func(m map[string]any)) []byte {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// obj is the object at key k of m.
func obj(m map[string]any, k string) map[string]any { return m[k].(map[string]any) }

// ingestArtifacts are n valid, distinctly named artifacts.
func ingestArtifacts(n int) []protocol.ArtifactRefV1 {
	out := make([]protocol.ArtifactRefV1, n)
	for i := range out {
		out[i] = protocol.ArtifactRefV1{V: 1, Name: fmt.Sprintf("a-%d", i), MediaType: "text/plain", SHA256: strings.Repeat("0f", 32),
			Locator: protocol.LocalLocator(fmt.Sprintf("id-%d", i))}
	}
	return out
}

// The rest of the signed ingest bodies (docs/operations.md, "OpenAPI"):
// each constraint the heartbeat, lifecycle, log, run and telemetry tags
// declare, broken alone, and accepted rows at the edges. The group's
// own deployment, dep-ingest, is created by its first row.
var _ = registerShapes("ingest", func(e *shapeEnv) []shapeCase {
	h, t := e.h, e.h.T
	s := func(v string) []byte { return []byte(v) }
	hb := func(o daemontest.HeartbeatOpts) []byte {
		if o.Deployment == "" {
			o.Deployment = "dep-ingest"
		}
		return e.hb(o)
	}
	hbWithout := func(f func(m map[string]any)) []byte { return edited(t, hb(daemontest.HeartbeatOpts{}), f) }
	event := func(id string, mutate func(*protocol.LifecycleEventV1)) []byte {
		return h.LifecycleEvent("shape-check", id, protocol.EventBooted, "dep-ingest", mutate)
	}
	run := func(id string, mutate func(*protocol.RunReportV1)) []byte {
		return h.RunReport("shape-check", "dep-ingest", id, mutate)
	}
	art := func(mutate func(a *protocol.ArtifactRefV1)) []byte {
		return run("run-i-bad", func(r *protocol.RunReportV1) { mutate(&r.Artifacts[0]) })
	}
	artWithout := func(f func(a map[string]any)) []byte {
		return edited(t, run("run-i-bad", nil), func(m map[string]any) { f(m["artifacts"].([]any)[0].(map[string]any)) })
	}
	str := func(v string) *string { return &v }
	window := func(session string, mutate func(*protocol.WindowV1)) []byte {
		return h.TelemetryWindow("shape-check", "dep-ingest", session, e.minute, mutate)
	}
	chunk := func(route string, seq, size int64) []byte {
		return s(fmt.Sprintf(`{"environmentSlug":"shape-check","deploymentId":"dep-ingest","sessionId":"si-1","seq":%d,"size":%d,"sha256":"%s"}`,
			seq, size, strings.Repeat("ab", 32)))
	}
	finish := func(final string) []byte {
		return s(`{"environmentSlug":"shape-check","deploymentId":"dep-ingest","sessionId":"si-1","final":` + final + `}`)
	}
	const hbR, lcR, runR, telR = ingest.HeartbeatRoute, ingest.LifecycleRoute, ingest.RunsRoute, ingest.TelemetryRoute
	// A bytes metric's bound, 2^60, is beyond float64's integers: 2^60 + 1
	// is 2^60, so a refusal of each of its min, max and last alone is
	// written here (1.2e18), the others left at 1.
	var aboveEiB []shapeCase
	for _, metric := range []string{"memUsedBytes", "memTotalBytes", "diskUsedBytes", "diskTotalBytes", "netRxBytes", "netTxBytes", "gpuMemUsedBytes", "gpuMemTotalBytes"} {
		for _, field := range []string{"min", "max", "last"} {
			agg := map[string]any{"n": 1, "sum": 1, "min": 1, "max": 1, "last": 1}
			agg[field] = 1.2e18
			aboveEiB = append(aboveEiB, shapeCase{metric + "." + field + " above 1 EiB", "", telR,
				edited(t, window("si-tel-3", nil), func(m map[string]any) { m["metrics"] = map[string]any{metric: agg} }), 422, "invalid_body"})
		}
	}
	return append(aboveEiB, []shapeCase{
		{"heartbeat at the edges", "", hbR, hb(daemontest.HeartbeatOpts{AgentVersion: "~ " + strings.Repeat("v", 62), Region: "a", Size: strings.Repeat("s", 64)}), 0, ""},
		{"heartbeat without agentVersion", "", hbR, hbWithout(func(m map[string]any) { delete(m, "agentVersion") }), 422, "invalid_body"},
		{"heartbeat with a control character in agentVersion", "", hbR, hb(daemontest.HeartbeatOpts{AgentVersion: "v1\a"}), 422, "invalid_body"},
		{"heartbeat with a 65-character agentVersion", "", hbR, hb(daemontest.HeartbeatOpts{AgentVersion: strings.Repeat("v", 65)}), 422, "invalid_body"},
		{"heartbeat without sentAt", "", hbR, hbWithout(func(m map[string]any) { delete(m, "sentAt") }), 422, "invalid_body"},
		{"heartbeat without reaper", "", hbR, hbWithout(func(m map[string]any) { delete(m, "reaper") }), 422, "invalid_body"},
		{"heartbeat without reaper.lastActivityAt", "", hbR, hbWithout(func(m map[string]any) { delete(obj(m, "reaper"), "lastActivityAt") }), 422, "invalid_body"},
		{"heartbeat with a negative reaper.idleChecks", "", hbR, hb(daemontest.HeartbeatOpts{IdleChecks: -1}), 422, "invalid_body"},
		{"heartbeat without deployment", "", hbR, hbWithout(func(m map[string]any) { delete(m, "deployment") }), 422, "invalid_body"},
		{"heartbeat with a negative deployment.dropletId", "", hbR, hb(daemontest.HeartbeatOpts{DropletID: -1}), 422, "invalid_body"},
		{"heartbeat with an upper-case deployment.region", "", hbR, hb(daemontest.HeartbeatOpts{Region: "NYC3"}), 422, "invalid_body"},
		{"heartbeat with a 65-character deployment.size", "", hbR, hb(daemontest.HeartbeatOpts{Size: strings.Repeat("s", 65)}), 422, "invalid_body"},

		{"lifecycle event at the edges", "", lcR, event("ev-i-1", func(ev *protocol.LifecycleEventV1) {
			ev.Deployment.DropletID, ev.Deployment.Region, ev.Deployment.Size = 0, strings.Repeat("r", 64), "s-1vcpu-1gb"
		}), 0, ""},
		{"lifecycle event without occurredAt", "", lcR, edited(t, event("ev-i-2", nil), func(m map[string]any) { delete(m, "occurredAt") }), 422, "invalid_body"},
		{"lifecycle event without deployment", "", lcR, edited(t, event("ev-i-2", nil), func(m map[string]any) { delete(m, "deployment") }), 422, "invalid_body"},
		{"lifecycle event with a negative deployment.dropletId", "", lcR, event("ev-i-2", func(ev *protocol.LifecycleEventV1) { ev.Deployment.DropletID = -1 }), 422, "invalid_body"},
		{"lifecycle event with a bad deployment.region", "", lcR, event("ev-i-2", func(ev *protocol.LifecycleEventV1) { ev.Deployment.Region = "-nyc3" }), 422, "invalid_body"},
		{"lifecycle event with a bad deployment.size", "", lcR, event("ev-i-2", func(ev *protocol.LifecycleEventV1) { ev.Deployment.Size = "s 1" }), 422, "invalid_body"},

		{"run at the edges", "", runR, run("run-i-1", func(r *protocol.RunReportV1) {
			r.Suite = "U" + strings.Repeat("s", 127)
			r.Artifacts = ingestArtifacts(ingest.MaxArtifactsPerRun)
			r.Artifacts[0].Name = "~" + strings.Repeat(" ", 253) + "!"
			r.Artifacts[0].MediaType = "A" + strings.Repeat("a", 126) + "/" + "b+" + strings.Repeat("c", 125)
			r.Artifacts[0].SHA256 = strings.Repeat("AB", 32)
			r.Artifacts[1].Locator = protocol.HTTPSLocator("https://ci.example.com/" + strings.Repeat("p", 2048-len("https://ci.example.com/")))
			r.Artifacts[2].Locator = protocol.LocalLocator("a." + strings.Repeat("b", 125) + ".")
		}), 0, ""},
		{"run with no artifacts", "", runR, run("run-i-2", func(r *protocol.RunReportV1) { r.Artifacts = []protocol.ArtifactRefV1{} }), 0, ""},
		{"run without suite", "", runR, run("run-i-bad", func(r *protocol.RunReportV1) { r.Suite = "" }), 422, "invalid_body"},
		{"run of a suite starting with a dash", "", runR, run("run-i-bad", func(r *protocol.RunReportV1) { r.Suite = "-unit" }), 422, "invalid_body"},
		{"run of a 129-character suite", "", runR, run("run-i-bad", func(r *protocol.RunReportV1) { r.Suite = strings.Repeat("s", 129) }), 422, "invalid_body"},
		{"run without startedAt", "", runR, edited(t, run("run-i-bad", nil), func(m map[string]any) { delete(m, "startedAt") }), 422, "invalid_body"},
		{"run without finishedAt", "", runR, edited(t, run("run-i-bad", nil), func(m map[string]any) { delete(m, "finishedAt") }), 422, "invalid_body"},
		{"run of 65 artifacts", "", runR, run("run-i-bad", func(r *protocol.RunReportV1) { r.Artifacts = ingestArtifacts(ingest.MaxArtifactsPerRun + 1) }), 422, "invalid_body"},
		{"artifact of v 2", "", runR, art(func(a *protocol.ArtifactRefV1) { a.V = 2 }), 422, "invalid_body"},
		{"artifact without v", "", runR, artWithout(func(a map[string]any) { delete(a, "v") }), 422, "invalid_body"},
		{"artifact without name", "", runR, artWithout(func(a map[string]any) { delete(a, "name") }), 422, "invalid_body"},
		{"artifact name with a leading space", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Name = " report" }), 422, "invalid_body"},
		{"artifact name of 256 characters", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Name = strings.Repeat("n", 256) }), 422, "invalid_body"},
		{"artifact name with a tab", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Name = "a\tb" }), 422, "invalid_body"},
		{"artifact without mediaType", "", runR, artWithout(func(a map[string]any) { delete(a, "mediaType") }), 422, "invalid_body"},
		{"artifact mediaType without a subtype", "", runR, art(func(a *protocol.ArtifactRefV1) { a.MediaType = "text" }), 422, "invalid_body"},
		{"artifact of negative sizeBytes", "", runR, art(func(a *protocol.ArtifactRefV1) { a.SizeBytes = -1 }), 422, "invalid_body"},
		{"artifact without sha256", "", runR, artWithout(func(a map[string]any) { delete(a, "sha256") }), 422, "invalid_body"},
		{"artifact sha256 of 63 digits", "", runR, art(func(a *protocol.ArtifactRefV1) { a.SHA256 = strings.Repeat("a", 63) }), 422, "invalid_body"},
		{"artifact without locator", "", runR, artWithout(func(a map[string]any) { delete(a, "locator") }), 422, "invalid_body"},
		{"artifact locator of kind s3", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Locator = protocol.ArtifactLocator{Kind: "s3", ID: str("x")} }), 422, "invalid_body"},
		{"artifact locator without kind", "", runR, artWithout(func(a map[string]any) { delete(obj(a, "locator"), "kind") }), 422, "invalid_body"},
		{"artifact locator url over http", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Locator = protocol.HTTPSLocator("http://ci.example.com/r.xml") }), 422, "invalid_body"},
		{"artifact locator url with a space", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Locator = protocol.HTTPSLocator("https://ci.example.com/r x.xml") }), 422, "invalid_body"},
		{"artifact locator url of 2049 bytes", "", runR, art(func(a *protocol.ArtifactRefV1) {
			a.Locator = protocol.HTTPSLocator("https://ci.example.com/" + strings.Repeat("p", 2049-len("https://ci.example.com/")))
		}), 422, "invalid_body"},
		{"artifact local id with ..", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Locator = protocol.LocalLocator("a..b") }), 422, "invalid_body"},
		{"artifact local id with a slash", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Locator = protocol.LocalLocator("a/b") }), 422, "invalid_body"},
		{"artifact local id of 129 characters", "", runR, art(func(a *protocol.ArtifactRefV1) { a.Locator = protocol.LocalLocator(strings.Repeat("i", 129)) }), 422, "invalid_body"},

		{"telemetry window at every metric's edges", "", telR, window("si-tel-1", func(w *protocol.WindowV1) {
			w.Metrics = protocol.MetricsV1{
				CPUPct: &protocol.PercentAggV1{N: 2, Sum: 100, Min: 0, Max: 100, Last: 100}, GPUUtilPct: &protocol.PercentAggV1{N: 1, Sum: 100, Min: 100, Max: 100, Last: 100},
				MemUsedBytes: &protocol.BytesAggV1{N: 1, Sum: 1 << 60, Min: 1 << 60, Max: 1 << 60, Last: 1 << 60}, MemTotalBytes: &protocol.BytesAggV1{N: 1, Sum: 0, Min: 0, Max: 0, Last: 0},
				DiskUsedBytes: &protocol.BytesAggV1{N: 1, Sum: 1, Min: 1, Max: 1, Last: 1}, DiskTotalBytes: &protocol.BytesAggV1{N: 1, Sum: 2, Min: 2, Max: 2, Last: 2},
				NetRxBytes: &protocol.BytesAggV1{N: 1, Sum: 3, Min: 3, Max: 3, Last: 3}, NetTxBytes: &protocol.BytesAggV1{N: 1, Sum: 4, Min: 4, Max: 4, Last: 4},
				GPUMemUsedBytes: &protocol.BytesAggV1{N: 1, Sum: 5, Min: 5, Max: 5, Last: 5}, GPUMemTotalBytes: &protocol.BytesAggV1{N: 1, Sum: 6, Min: 6, Max: 6, Last: 6},
				Load1:     &protocol.LoadAggV1{N: 2, Sum: 1e6, Min: 0, Max: 1e6, Last: 0},
				GPUTempC:  &protocol.CelsiusAggV1{N: 2, Sum: 150, Min: -50, Max: 200, Last: -50},
				GPUPowerW: &protocol.WattsAggV1{N: 1, Sum: 1e6, Min: 1e6, Max: 1e6, Last: 1e6},
			}
		}), 0, ""},
		{"telemetry window without windowStart", "", telR, edited(t, window("si-tel-2", nil), func(m map[string]any) { delete(m, "windowStart") }), 422, "invalid_body"},
		{"telemetry window without windowSeconds", "", telR, edited(t, window("si-tel-2", nil), func(m map[string]any) { delete(m, "windowSeconds") }), 422, "invalid_body"},
		{"telemetry window of 59 seconds", "", telR, window("si-tel-2", func(w *protocol.WindowV1) { w.WindowSeconds = 59 }), 422, "invalid_body"},
		{"telemetry window of 61 seconds", "", telR, window("si-tel-2", func(w *protocol.WindowV1) { w.WindowSeconds = 61 }), 422, "invalid_body"},
		{"cpuPct min below 0", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.CPUPct = &protocol.PercentAggV1{N: 1, Sum: -0.5, Min: -0.5, Max: 0, Last: 0}
		}), 422, "invalid_body"},
		{"cpuPct max above 100", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.CPUPct = &protocol.PercentAggV1{N: 1, Sum: 100.5, Min: 100.5, Max: 100.5, Last: 100.5}
		}), 422, "invalid_body"},
		{"gpuUtilPct last above 100", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.GPUUtilPct = &protocol.PercentAggV1{N: 1, Sum: 50, Min: 50, Max: 50, Last: 101}
		}), 422, "invalid_body"},
		{"memUsedBytes above 1 EiB", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.MemUsedBytes = &protocol.BytesAggV1{N: 1, Sum: 1.2e18, Min: 1.2e18, Max: 1.2e18, Last: 1.2e18}
		}), 422, "invalid_body"},
		{"netTxBytes below 0", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.NetTxBytes = &protocol.BytesAggV1{N: 1, Sum: -1, Min: -1, Max: -1, Last: -1}
		}), 422, "invalid_body"},
		{"load1 above a million", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.Load1 = &protocol.LoadAggV1{N: 1, Sum: 1e6 + 1, Min: 1e6 + 1, Max: 1e6 + 1, Last: 1e6 + 1}
		}), 422, "invalid_body"},
		{"gpuTempC below -50", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.GPUTempC = &protocol.CelsiusAggV1{N: 1, Sum: -50.5, Min: -50.5, Max: -50.5, Last: -50.5}
		}), 422, "invalid_body"},
		{"gpuTempC above 200", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.GPUTempC = &protocol.CelsiusAggV1{N: 1, Sum: 201, Min: 201, Max: 201, Last: 201}
		}), 422, "invalid_body"},
		{"gpuPowerW above a megawatt", "", telR, window("si-tel-2", func(w *protocol.WindowV1) {
			w.Metrics.GPUPowerW = &protocol.WattsAggV1{N: 1, Sum: 2e6, Min: 2e6, Max: 2e6, Last: 2e6}
		}), 422, "invalid_body"},

		{"log plan at the edges", "", ingest.LogPlanRoute, chunk("plan", 1<<40, protocol.DefaultMaxChunkBytes), 0, ""},
		{"log plan of seq -1", "", ingest.LogPlanRoute, chunk("plan", -1, 10), 422, "invalid_body"},
		{"log plan of seq above 2^40", "", ingest.LogPlanRoute, chunk("plan", 1<<40+1, 10), 422, "invalid_body"},
		{"log plan of size 0", "", ingest.LogPlanRoute, chunk("plan", 0, 0), 422, "invalid_body"},
		{"log plan without size", "", ingest.LogPlanRoute, edited(t, chunk("plan", 0, 10), func(m map[string]any) { delete(m, "size") }), 422, "invalid_body"},
		{"log plan above the chunk bound", "", ingest.LogPlanRoute, chunk("plan", 0, protocol.DefaultMaxChunkBytes+1), 422, "chunk_too_large"},
		{"log commit of seq -1", "", ingest.LogCommitRoute, chunk("commit", -1, 10), 422, "invalid_body"},
		{"log commit of size 0", "", ingest.LogCommitRoute, chunk("commit", 0, 0), 422, "invalid_body"},
		{"log finish at the edges", "", ingest.LogFinishRoute, finish(`{"chunks":0,"bytes":0,"cursor":"` + strings.Repeat("c", 512) + `","reason":"` + strings.Repeat("r", 64) + `"}`), 0, ""},
		{"log finish of negative final.chunks", "", ingest.LogFinishRoute, finish(`{"chunks":-1,"bytes":0,"cursor":"","reason":""}`), 422, "invalid_body"},
		{"log finish of negative final.bytes", "", ingest.LogFinishRoute, finish(`{"chunks":0,"bytes":-1,"cursor":"","reason":""}`), 422, "invalid_body"},
	}...)
})
