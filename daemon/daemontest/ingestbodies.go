package daemontest

// The bodies of the signed routes as the ingest tests send them, and the
// rows each route can write, counted.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/protocol"
)

// TelemetryWindow returns a valid window body: cpuPct only, one minute
// before the clock's current minute unless start is set.
func (h *Ingest) TelemetryWindow(env, dep, session string, start time.Time, mutate func(*protocol.WindowV1)) []byte {
	h.T.Helper()
	if start.IsZero() {
		start = h.Clock.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	}
	w := protocol.WindowV1{EnvironmentSlug: env, DeploymentID: dep, SessionID: session, WindowStart: start, WindowSeconds: 60,
		Metrics: protocol.MetricsV1{CPUPct: &protocol.PercentAggV1{N: 12, Sum: 120, Min: 5, Max: 15, Last: 9}}}
	if mutate != nil {
		mutate(&w)
	}
	b, err := json.Marshal(w)
	if err != nil {
		h.T.Fatal(err)
	}
	return b
}

// TelemetryRows counts everything a telemetry request can write, nonces
// included.
func (h *Ingest) TelemetryRows() string {
	h.T.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT count(*) FROM telemetry_sessions`, `SELECT count(*) FROM telemetry_windows`,
		`SELECT count(*) FROM telemetry_receipts`, `SELECT count(*) FROM telemetry_anomalies`,
		`SELECT coalesce(sum(version), 0) FROM telemetry_sessions`,
		`SELECT coalesce(sum(telemetry_receipts), 0) FROM deployments`, `SELECT count(*) FROM nonces`,
	} {
		parts = append(parts, fmt.Sprint(h.Count(q)))
	}
	return strings.Join(parts, "/")
}

// LifecycleEvent returns a LifecycleEventV1 body occurring now.
func (h *Ingest) LifecycleEvent(env, id, kind, dep string, mutate func(*protocol.LifecycleEventV1)) []byte {
	h.T.Helper()
	ev := protocol.LifecycleEventV1{EnvironmentSlug: env, ID: id, Kind: kind, OccurredAt: h.Clock.Now().UTC(),
		Deployment: protocol.LifecycleDeploy{ID: dep}}
	if mutate != nil {
		mutate(&ev)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		h.T.Fatal(err)
	}
	return b
}

// LifecycleRows counts everything a lifecycle or run request can write,
// nonces included.
func (h *Ingest) LifecycleRows() string {
	h.T.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT count(*) FROM lifecycle_events`, `SELECT count(*) FROM deployments`,
		`SELECT count(*) FROM deployments WHERE status = 'ended'`, `SELECT count(*) FROM runs`,
		`SELECT count(*) FROM run_artifacts`, `SELECT coalesce(sum(runs), 0) FROM deployments`,
		`SELECT coalesce(sum(producer_events), 0) FROM deployments`, `SELECT count(*) FROM nonces`,
		`SELECT count(*) FROM environments WHERE status = 'sunk'`,
	} {
		parts = append(parts, fmt.Sprint(h.Count(q)))
	}
	return strings.Join(parts, "/")
}

// RunReport returns a valid RunReportV1 body with two artifacts.
func (h *Ingest) RunReport(env, dep, runID string, mutate func(*protocol.RunReportV1)) []byte {
	h.T.Helper()
	now := h.Clock.Now().UTC()
	r := protocol.RunReportV1{EnvironmentSlug: env, DeploymentID: dep, RunID: runID, Suite: "unit/go", Status: "passed",
		StartedAt: now.Add(-5 * time.Minute), FinishedAt: now.Add(-time.Minute), Commit: strings.Repeat("ab", 20),
		Artifacts: []protocol.ArtifactRefV1{
			{V: 1, Name: "report.xml", MediaType: "application/xml", SizeBytes: 1234, SHA256: strings.Repeat("0f", 32),
				Locator: protocol.HTTPSLocator("https://ci.example.com/runs/1/report.xml")},
			{V: 1, Name: "coverage", MediaType: "text/plain", SizeBytes: 10, SHA256: strings.Repeat("a1", 32),
				Locator: protocol.LocalLocator("cover-1.out")},
		}}
	if mutate != nil {
		mutate(&r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		h.T.Fatal(err)
	}
	return b
}

// FleetEnv is environment slug of f; its absence fails the test.
func FleetEnv(t testing.TB, f adminapi.Fleet, slug string) adminapi.FleetEnvironment {
	t.Helper()
	for _, e := range f.Environments {
		if e.Slug == slug {
			return e
		}
	}
	t.Fatalf("fleet has no environment %q: %+v", slug, f)
	return adminapi.FleetEnvironment{}
}
