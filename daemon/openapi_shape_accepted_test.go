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
	agg := func() *protocol.AggV1 { return &protocol.AggV1{N: 12, Sum: 12, Min: 1, Max: 1, Last: 1} }
	every := func(w *protocol.WindowV1) {
		m := &w.Metrics
		for _, p := range []**protocol.AggV1{&m.CPUPct, &m.MemUsedBytes, &m.MemTotalBytes, &m.DiskUsedBytes, &m.DiskTotalBytes,
			&m.Load1, &m.NetRxBytes, &m.NetTxBytes, &m.GPUUtilPct, &m.GPUMemUsedBytes, &m.GPUMemTotalBytes, &m.GPUTempC, &m.GPUPowerW} {
			*p = agg()
		}
	}
	chunk := `{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","seq":0,"size":10,"sha256":"` + strings.Repeat("ab", 32) + `"}`
	return []shapeCase{
		{"telemetry window of every metric", "", "/api/ingest/telemetry", e.window("session-every", every), 0, ""},
		{"log session", "", "/api/ingest/logs/sessions", s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","service":"app.service"}`), 0, ""},
		{"log commit of a chunk never uploaded", "", "/api/ingest/logs/commit", s(chunk), 0, ""},
		{"log finish", "", "/api/ingest/logs/finish", s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","final":{"chunks":1,"bytes":10,"cursor":"c","reason":"shutdown"}}`), 0, ""},
	}
})
