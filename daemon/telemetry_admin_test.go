package daemon_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// rawAdmin sends method path (query included) with the admin bearer and
// returns the status and error code.
func rawAdmin(t *testing.T, p *daemontest.InProcess, method, path, body string) (int, string, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, p.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.Env[proctest.AdminTokenVar])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb adminapi.ErrorBody
	_ = json.Unmarshal(b, &eb)
	return resp.StatusCode, eb.Error.Code, string(b)
}

// TestTelemetryAdminOperations: the erase, audit and performance
// operations over HTTP, through the typed client and raw requests: each
// refusal with its status and code (parameter values never echoed), and
// an erase that empties the environment's telemetry and shows in the audit
// and the performance answer.
func TestTelemetryAdminOperations(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	db := p.App.DB
	env := storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	dep := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-1"})
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	for i := range 5 {
		storagetest.TelemetryWindow(t, db, storage.TelemetryWindow{EnvironmentID: env.ID, DeploymentID: dep.ID, SessionID: "s1", WindowStart: start.Add(time.Duration(i) * time.Minute)})
	}
	const perfPath = "/api/admin/environments/demo-harbor/deployments/dep-1/performance"
	const secret = "SECRETVALUE"

	refusals := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown query parameter", "GET", perfPath + "?bogus=" + secret, "", 422, "bad_param"},
		{"unknown query parameter name", "GET", perfPath + "?" + secret + "=1", "", 422, "bad_param"},
		{"repeated query parameter", "GET", perfPath + "?step=5m&step=10m", "", 422, "bad_param"},
		{"bad step text", "GET", perfPath + "?step=" + secret, "", 422, "bad_param"},
		{"step not whole minutes", "GET", perfPath + "?step=90s", "", 422, "bad_param"},
		{"step over a day", "GET", perfPath + "?step=25h", "", 422, "bad_param"},
		{"bad from", "GET", perfPath + "?from=" + secret, "", 422, "bad_param"},
		{"from after to", "GET", perfPath + "?from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z", "", 422, "bad_param"},
		{"too many points", "GET", perfPath + "?from=2026-11-01T00:00:00Z&to=2026-11-03T00:00:00Z&step=1m", "", 422, "bad_param"},
		{"malformed query", "GET", perfPath + "?step=%zz", "", 422, "bad_param"},
		{"query on an operation without parameters", "GET", "/api/admin/status?verbose=1", "", 422, "bad_param"},
		{"unknown environment", "GET", "/api/admin/environments/no-such-env/deployments/dep-1/performance", "", 404, "environment_not_found"},
		{"unknown deployment", "GET", "/api/admin/environments/demo-harbor/deployments/dep-404/performance", "", 404, "deployment_not_found"},
		{"erase wrong phrase", "POST", "/api/admin/telemetry/erase", `{"environmentSlug":"demo-harbor","confirmation":"erase telemetry other"}`, 422, "confirmation_mismatch"},
		{"erase no phrase", "POST", "/api/admin/telemetry/erase", `{"environmentSlug":"demo-harbor"}`, 422, "confirmation_mismatch"},
		{"erase unknown environment", "POST", "/api/admin/telemetry/erase", `{"environmentSlug":"no-such-env","confirmation":"erase telemetry no-such-env"}`, 404, "environment_not_found"},
		{"erase bad slug", "POST", "/api/admin/telemetry/erase", `{"environmentSlug":"Bad Slug","confirmation":"erase telemetry Bad Slug"}`, 400, "invalid_slug"},
		{"erase unknown field", "POST", "/api/admin/telemetry/erase", `{"environmentSlug":"demo-harbor","confirmation":"erase telemetry demo-harbor","all":true}`, 400, "bad_body"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			status, code, body := rawAdmin(t, p, tc.method, tc.path, tc.body)
			if status != tc.status || code != tc.code {
				t.Errorf("%s %s: %d %s, want %d %s: %s", tc.method, tc.path, status, code, tc.status, tc.code, body)
			}
			if strings.Contains(body, secret) {
				t.Errorf("the answer echoes the value sent: %s", body)
			}
		})
	}

	ctx := t.Context()
	au, err := p.Admin.GetTelemetryAudit(ctx)
	if err != nil || au.Tables.Windows != 5 || au.Tables.Receipts != 5 || au.Tables.Sessions != 1 {
		t.Fatalf("audit before the erase: %+v, %v (the refusals must have erased nothing)", au, err)
	}
	perf, err := p.Admin.GetDeploymentPerformance(ctx, adminapi.DeploymentPerformanceRequest{EnvironmentSlug: "demo-harbor", DeploymentID: "dep-1"})
	if err != nil {
		t.Fatal(err)
	}
	if perf.StepSeconds != 60 || len(perf.Series[0].Points) != 5 || len(perf.Sessions) != 1 || perf.To.Sub(perf.From).Round(time.Hour) != 24*time.Hour {
		t.Errorf("default performance: step %d, %d cpu points, %d sessions, %v to %v", perf.StepSeconds, len(perf.Series[0].Points), len(perf.Sessions), perf.From, perf.To)
	}
	if _, err := p.Admin.GetDeploymentPerformance(ctx, adminapi.DeploymentPerformanceRequest{EnvironmentSlug: "demo-harbor", DeploymentID: "dep-1",
		From: start.Add(-time.Hour), To: start.Add(time.Hour), Step: 5 * time.Minute}); err != nil {
		t.Errorf("explicit parameters through the typed client: %v", err)
	}

	r, err := p.Admin.EraseTelemetry(ctx, adminapi.EraseTelemetryRequest{EnvironmentSlug: "demo-harbor", Confirmation: adminapi.EraseTelemetryPhrase("demo-harbor")})
	if err != nil {
		t.Fatal(err)
	}
	want := adminapi.TelemetryTableCounts{Sessions: 1, Windows: 5, Receipts: 5}
	if r.Removed != want || r.Remaining.Total() != 0 {
		t.Errorf("receipt %+v, want removed %+v", r, want)
	}
	if au, err := p.Admin.GetTelemetryAudit(ctx); err != nil || au.Total != 0 {
		t.Errorf("audit after the erase: %+v, %v", au, err)
	}
	perf, err = p.Admin.GetDeploymentPerformance(ctx, adminapi.DeploymentPerformanceRequest{EnvironmentSlug: "demo-harbor", DeploymentID: "dep-1"})
	if err != nil || len(perf.Series[0].Points) != 0 || len(perf.Sessions) != 0 {
		t.Errorf("performance after the erase: %d points, %d sessions, %v", len(perf.Series[0].Points), len(perf.Sessions), err)
	}
	var ae *adminapi.APIError
	if _, err := p.Admin.EraseTelemetry(ctx, adminapi.EraseTelemetryRequest{EnvironmentSlug: "demo-harbor", Confirmation: "yes"}); !errors.As(err, &ae) || ae.Status != 422 {
		t.Errorf("typed client with a wrong phrase: %v", err)
	}
}
