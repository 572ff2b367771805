package daemon_test

import (
	"strings"

	"github.com/chalupa-run/chalupa/protocol"
)

// Accepted rows that carry every optional object of the first stage's
// ingest bodies, so that checkShapeCoverage can derive a refusal for each
// constraint inside them (a metric's n, a log chunk's sha256...).
var _ = registerShapes("first-stage-accepted", func(e *shapeEnv) []shapeCase {
	s := func(v string) []byte { return []byte(v) }
	agg := protocol.AggV1{N: 12, Sum: 12, Min: 1, Max: 1, Last: 1}
	every := func(w *protocol.WindowV1) {
		// Each metric's type is AggV1 with its unit's range in the tags.
		pct, b, load, c, watts := protocol.PercentAggV1(agg), protocol.BytesAggV1(agg), protocol.LoadAggV1(agg), protocol.CelsiusAggV1(agg), protocol.WattsAggV1(agg)
		w.Metrics = protocol.MetricsV1{CPUPct: &pct, MemUsedBytes: &b, MemTotalBytes: &b, DiskUsedBytes: &b, DiskTotalBytes: &b,
			Load1: &load, NetRxBytes: &b, NetTxBytes: &b, GPUUtilPct: &pct, GPUMemUsedBytes: &b, GPUMemTotalBytes: &b, GPUTempC: &c, GPUPowerW: &watts}
	}
	chunk := `{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","seq":0,"size":10,"sha256":"` + strings.Repeat("ab", 32) + `"}`
	return []shapeCase{
		{"telemetry window of every metric", "", "/api/ingest/telemetry", e.window("session-every", every), 0, ""},
		{"log session", "", "/api/ingest/logs/sessions", s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","service":"app.service"}`), 0, ""},
		{"log commit of a chunk never uploaded", "", "/api/ingest/logs/commit", s(chunk), 0, ""},
		{"run without artifacts", "", "/api/ingest/runs", e.run(func(r *protocol.RunReportV1) { r.Artifacts = nil; r.RunID = "run-no-artifacts" }), 422, "invalid_body"},
		{"run of no artifacts (an empty array)", "", "/api/ingest/runs", e.run(func(r *protocol.RunReportV1) {
			r.Artifacts = []protocol.ArtifactRefV1{}
			r.RunID = "run-empty-artifacts"
		}), 0, ""},
		{"log finish", "", "/api/ingest/logs/finish", s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","final":{"chunks":1,"bytes":10,"cursor":"c","reason":"shutdown"}}`), 0, ""},
	}
})
