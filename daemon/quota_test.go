package daemon_test

import (
	"context"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// quotaHarness is an ingest harness with one environment and its key.
type quotaHarness struct {
	*daemontest.Ingest
	key daemontest.Key
}

func newQuotaHarness(t *testing.T, env map[string]string) *quotaHarness {
	t.Helper()
	return newQuotaHarnessAt(t, env, time.Time{})
}

// newQuotaHarnessAt is newQuotaHarness with the clocks starting at epoch
// (zero: now), for a test whose warnings must fall in one clock hour
// whatever the time it runs.
func newQuotaHarnessAt(t *testing.T, env map[string]string, epoch time.Time) *quotaHarness {
	t.Helper()
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: env, Epoch: epoch})
	h.CreateEnv("demo-harbor")
	return &quotaHarness{Ingest: h, key: h.Issue("demo-harbor")}
}

// beat sends one signed heartbeat of deployment dep in demo-harbor with a
// fresh nonce (or nonce, when set).
func (h *quotaHarness) beat(dep, nonce string) daemontest.Response {
	h.T.Helper()
	return h.Send(daemontest.SignedReq{KeyID: h.key.ID, Key: h.key.Raw, Nonce: nonce, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: dep})})
}

func (h *quotaHarness) heartbeatsOf(dep string) int {
	return h.Count(`SELECT count(*) FROM heartbeats WHERE deployment_id = ?`, dep)
}

// recordWarnings records every queued quota warning, as the quota-events
// loop does, and returns how many were queued.
func (h *quotaHarness) recordWarnings() int {
	h.T.Helper()
	writer := &ingest.QuotaEventWriter{DB: h.App.DB}
	n := 0
	for {
		select {
		case ev := <-daemon.QuotaEvents(h.App.Server):
			if _, err := writer.Record(context.Background(), ev); err != nil {
				h.T.Fatal(err)
			}
			n++
		default:
			return n
		}
	}
}

// warnings lists the quota-exceeded events as "id deployment message".
func (h *quotaHarness) warnings() []string {
	h.T.Helper()
	rows, err := h.SQL().Query(`SELECT id || ' ' || coalesce(deployment_id, '-') || ' ' || message FROM lifecycle_events WHERE kind = 'quota-exceeded' ORDER BY id`)
	if err != nil {
		h.T.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			h.T.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		h.T.Fatal(err)
	}
	return out
}

// quotaRefused reads chalupa_ingest_quota_refused_total{quota} from /metrics.
func quotaRefused(h *daemontest.Ingest, quota string) float64 {
	h.T.Helper()
	r := h.Do("GET", "/metrics", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil)
	m := regexp.MustCompile(`(?m)^chalupa_ingest_quota_refused_total\{quota="` + quota + `"\} (\S+)$`).FindSubmatch(r.Body)
	if m == nil {
		h.T.Fatalf("chalupa_ingest_quota_refused_total{quota=%q} missing from /metrics", quota)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		h.T.Fatal(err)
	}
	return v
}

// wantRateLimited fails unless r is 429 rate_limited with Retry-After
// retryAfter (whole seconds).
func wantRateLimited(t *testing.T, r daemontest.Response, retryAfter string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.Code != "rate_limited" {
		t.Fatalf("got %s, want 429 rate_limited", r)
	}
	if got := r.Header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("Retry-After = %q, want %q", got, retryAfter)
	}
}

// TestQuotaDeploymentFloodIsCapped floods one deployment at the default
// quota (burst 20, 12 a minute): the 21st heartbeat is 429 rate_limited with
// Retry-After 5 (one token at 12 a minute) and writes nothing, not even its
// nonce; another deployment of the same environment, with the same key, is
// unaffected; the flooded one gets one heartbeat per 5 s back.
func TestQuotaDeploymentFloodIsCapped(t *testing.T) {
	h := newQuotaHarness(t, nil)
	for i := range ingest.DefaultHeartbeatBurst {
		if r := h.beat("dep-flood", ""); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat %d within the burst: %s", i+1, r)
		}
	}
	rows, nonces := h.HeartbeatRows(), h.NonceRows()
	const refusedNonce = "quota-refused-nonce-0001"
	for i := range 50 {
		nonce := ""
		if i == 0 {
			nonce = refusedNonce
		}
		wantRateLimited(t, h.beat("dep-flood", nonce), "5")
	}
	if got := h.HeartbeatRows(); got != rows {
		t.Fatalf("refused heartbeats wrote %d heartbeat rows", got-rows)
	}
	if got := h.NonceRows(); got != nonces {
		t.Fatalf("refused heartbeats claimed %d nonces", got-nonces)
	}
	if got := quotaRefused(h.Ingest, ingest.QuotaDeploymentHeartbeats); got != 50 {
		t.Fatalf("quota_refused_total{deployment_heartbeats} = %v, want 50", got)
	}

	// Same environment, same key, another deployment: unaffected.
	for i := range 5 {
		if r := h.beat("dep-calm", ""); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat %d of another deployment during the flood: %s", i+1, r)
		}
	}

	// 5 s later one token is back: the refused request's own nonce was
	// never claimed, so it is accepted now; the next is refused again.
	h.Clock.Advance(5 * time.Second)
	if r := h.beat("dep-flood", refusedNonce); r.Status != http.StatusAccepted {
		t.Fatalf("a token later, the refused nonce: %s", r)
	}
	wantRateLimited(t, h.beat("dep-flood", ""), "5")
	if got, want := h.heartbeatsOf("dep-flood"), ingest.DefaultHeartbeatBurst+1; got != want {
		t.Fatalf("dep-flood has %d heartbeat rows, want %d", got, want)
	}
}

// TestQuotaEnvironmentPerMinute bounds an environment's heartbeats a
// minute across its deployments, and shows the order of the checks: a
// deployment refused by its own quota spends nothing of the environment's.
func TestQuotaEnvironmentPerMinute(t *testing.T) {
	h := newQuotaHarness(t, map[string]string{
		"CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE": "6",
		"CHALUPA_QUOTA_HEARTBEAT_BURST":                   "2",
	})
	h.CreateEnv("other-env")
	other := h.Issue("other-env")

	for range 2 {
		if r := h.beat("dep-a", ""); r.Status != http.StatusAccepted {
			t.Fatalf("dep-a within its burst: %s", r)
		}
	}
	for range 10 { // refused by dep-a's own quota: the environment keeps 4
		wantRateLimited(t, h.beat("dep-a", ""), "5")
	}
	for _, dep := range []string{"dep-b", "dep-c", "dep-d", "dep-e"} {
		if r := h.beat(dep, ""); r.Status != http.StatusAccepted {
			t.Fatalf("%s within the environment's minute: %s", dep, r)
		}
	}
	rows := h.HeartbeatRows()
	// The environment's 6 are spent: one token comes back every 10 s.
	r := h.beat("dep-f", "")
	wantRateLimited(t, r, "10")
	if !strings.Contains(r.Message, "environment") {
		t.Fatalf("refusal does not name the environment quota: %s", r)
	}
	if got := h.Count(`SELECT count(*) FROM deployments WHERE id = 'dep-f'`); got != 0 {
		t.Fatalf("a refused first heartbeat created its deployment")
	}
	if got := h.HeartbeatRows(); got != rows {
		t.Fatalf("refused heartbeat wrote %d rows", got-rows)
	}
	// Another environment has its own bound.
	if r := h.Send(daemontest.SignedReq{KeyID: other.ID, Key: other.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "other-env", Deployment: "dep-f"})}); r.Status != http.StatusAccepted {
		t.Fatalf("another environment: %s", r)
	}
	if got := quotaRefused(h.Ingest, ingest.QuotaEnvironmentHeartbeats); got != 1 {
		t.Fatalf("quota_refused_total{environment_heartbeats} = %v, want 1", got)
	}
	h.recordWarnings()
	hour := h.Clock.Now().UTC().Format("2006-01-02T15")
	if got := h.warnings(); len(got) != 2 ||
		!strings.HasPrefix(got[0], "quota:deployment_heartbeats:demo-harbor:dep-a:"+hour+" dep-a ") ||
		!strings.HasPrefix(got[1], "quota:environment_heartbeats:demo-harbor::"+hour+" - ") {
		t.Fatalf("warnings = %q", got)
	}
	h.Clock.Advance(10 * time.Second)
	if r := h.beat("dep-f", ""); r.Status != http.StatusAccepted {
		t.Fatalf("10 s later: %s", r)
	}
}

// TestQuotaActiveDeployments: the first heartbeat of deployment limit+1 is
// 429 deployment_quota with nothing written (no deployment, heartbeat or
// nonce); heartbeats of existing deployments go on; ending one frees a slot.
func TestQuotaActiveDeployments(t *testing.T) {
	h := newQuotaHarness(t, map[string]string{"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS": "3"})
	for _, dep := range []string{"dep-1", "dep-2", "dep-3"} {
		if r := h.beat(dep, ""); r.Status != http.StatusAccepted {
			t.Fatalf("%s: %s", dep, r)
		}
	}
	rows, nonces := h.HeartbeatRows(), h.NonceRows()
	r := h.beat("dep-4", "")
	if r.Status != http.StatusTooManyRequests || r.Code != "deployment_quota" {
		t.Fatalf("deployment 4 of 3: %s, want 429 deployment_quota", r)
	}
	if got := h.Count(`SELECT count(*) FROM deployments`); got != 3 {
		t.Fatalf("%d deployments after the refusal, want 3", got)
	}
	if h.HeartbeatRows() != rows || h.NonceRows() != nonces {
		t.Fatalf("the refusal wrote heartbeats (%d) or nonces (%d)", h.HeartbeatRows()-rows, h.NonceRows()-nonces)
	}
	if r := h.beat("dep-1", ""); r.Status != http.StatusAccepted {
		t.Fatalf("an existing deployment at the quota: %s", r)
	}
	if got := quotaRefused(h.Ingest, ingest.QuotaActiveDeployments); got != 1 {
		t.Fatalf("quota_refused_total{active_deployments} = %v, want 1", got)
	}
	// The warning is the environment's (no deployment: it was never made).
	h.recordWarnings()
	hour := h.Clock.Now().UTC().Format("2006-01-02T15")
	if got := h.warnings(); len(got) != 1 || !strings.HasPrefix(got[0], "quota:active_deployments:demo-harbor::"+hour+" - ") {
		t.Fatalf("warnings = %q", got)
	}

	db := h.App.DB
	env, err := storage.EnvironmentBySlug(context.Background(), db.Read, "demo-harbor")
	if err != nil {
		t.Fatal(err)
	}
	storagetest.EndDeployment(t, db, env.ID, "dep-2", h.Clock.Now())
	if r := h.beat("dep-4", ""); r.Status != http.StatusAccepted {
		t.Fatalf("deployment 4 after one ended: %s", r)
	}
	if r := h.beat("dep-5", ""); r.Code != "deployment_quota" {
		t.Fatalf("deployment 5 of 3: %s, want deployment_quota", r)
	}
}

// TestQuotaZeroIsUnlimited: with every quota 0, one deployment sends far
// past the default burst and an environment holds more than the default
// active deployments; start-up warns naming each variable.
func TestQuotaZeroIsUnlimited(t *testing.T) {
	h := newQuotaHarness(t, daemontest.UnlimitedQuotas())
	for i := range 3 * ingest.DefaultHeartbeatBurst {
		if r := h.beat("dep-busy", ""); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat %d: %s", i+1, r)
		}
	}
	for i := range ingest.DefaultActiveDeployments + 5 {
		if r := h.beat("dep-"+strconv.Itoa(i), ""); r.Status != http.StatusAccepted {
			t.Fatalf("deployment %d: %s", i, r)
		}
	}
	logs := string(h.Logs.Bytes())
	for k := range daemontest.UnlimitedQuotas() {
		if !regexp.MustCompile(`"level":"warn".*` + k).MatchString(logs) {
			t.Fatalf("no start-up warning naming %s in the log", k)
		}
	}
}

// TestQuotaWarningOncePerHour: a deployment meeting its quota is recorded
// once per clock hour as a quota-exceeded lifecycle event with a stable id
// (INSERT OR IGNORE, so once across restarts too), written by the
// quota-events loop, never on the refused request's path.
func TestQuotaWarningOncePerHour(t *testing.T) {
	epoch := time.Date(2026, 12, 1, 10, 41, 0, 0, time.UTC)
	h := &quotaHarness{Ingest: daemontest.NewIngest(t, daemontest.IngestOptions{Epoch: epoch, Env: map[string]string{"CHALUPA_QUOTA_HEARTBEAT_BURST": "1"}})}
	h.CreateEnv("demo-harbor")
	h.key = h.Issue("demo-harbor")
	drain := h.recordWarnings
	events := h.warnings
	h.beat("dep-1", "")
	if n := drain(); n != 0 {
		t.Fatalf("%d warnings queued before any refusal", n)
	}
	for range 10 {
		wantRateLimited(t, h.beat("dep-1", ""), "5")
	}
	if n := drain(); n != 1 {
		t.Fatalf("%d warnings queued for 10 refusals in one hour, want 1", n)
	}
	got := events()
	if len(got) != 1 || !strings.HasPrefix(got[0], "quota:deployment_heartbeats:demo-harbor:dep-1:2026-12-01T10 dep-1 ") ||
		!strings.Contains(got[0], "CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE") {
		t.Fatalf("events = %q", got)
	}

	// A restart forgets what was noted; the stable id keeps it once.
	h.Restart()
	if r := h.beat("dep-1", ""); r.Status != http.StatusAccepted { // a new process, a full bucket
		t.Fatalf("after a restart: %s", r)
	}
	wantRateLimited(t, h.beat("dep-1", ""), "5")
	if n := drain(); n != 1 {
		t.Fatalf("after a restart, %d warnings queued, want 1", n)
	}
	if got := events(); len(got) != 1 {
		t.Fatalf("after a restart in the same hour, events = %q", got)
	}

	// The next clock hour is recorded again.
	h.Clock.Advance(time.Hour)
	h.beat("dep-1", "")
	wantRateLimited(t, h.beat("dep-1", ""), "5")
	drain()
	if got := events(); len(got) != 2 || !strings.HasPrefix(got[1], "quota:deployment_heartbeats:demo-harbor:dep-1:2026-12-01T11 ") {
		t.Fatalf("an hour later, events = %q", got)
	}
}

// TestQuotaOpenSessions: CHALUPA_QUOTA_OPEN_SESSIONS reaches the telemetry
// admission; a window that would open one session more is 429
// session_quota with nothing written, counted and warned as a quota.
func TestQuotaOpenSessions(t *testing.T) {
	h := newQuotaHarness(t, map[string]string{"CHALUPA_QUOTA_OPEN_SESSIONS": "2"})
	if r := h.beat("dep-1", ""); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	window := func(session string) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: h.key.ID, Key: h.key.Raw, Path: ingest.TelemetryRoute, Body: h.TelemetryWindow("demo-harbor", "dep-1", session, time.Time{}, nil)})
	}
	for _, session := range []string{"session-1", "session-2"} {
		if r := window(session); r.Status != http.StatusAccepted {
			t.Fatalf("%s: %s", session, r)
		}
	}
	before := h.TelemetryRows()
	if r := window("session-3"); r.Status != http.StatusTooManyRequests || r.Code != "session_quota" {
		t.Fatalf("a third open session of 2: %s, want 429 session_quota", r)
	}
	if got := h.TelemetryRows(); got != before {
		t.Fatalf("the refusal wrote: %s -> %s", before, got)
	}
	if got := quotaRefused(h.Ingest, ingest.QuotaOpenSessions); got != 1 {
		t.Fatalf("quota_refused_total{open_sessions} = %v, want 1", got)
	}
	h.recordWarnings()
	hour := h.Clock.Now().UTC().Format("2006-01-02T15")
	if got := h.warnings(); len(got) != 1 || !strings.HasPrefix(got[0], "quota:open_sessions:demo-harbor:dep-1:"+hour+" dep-1 ") ||
		!strings.Contains(got[0], "CHALUPA_QUOTA_OPEN_SESSIONS=2") {
		t.Fatalf("warnings = %q", got)
	}
}

// TestUnlimitedQuotasCoverEveryQuota: daemontest.UnlimitedQuotas loads as
// every field of ingest.Quotas at 0, so a test that means "no quota" meets
// none, a quota added later included.
func TestUnlimitedQuotasCoverEveryQuota(t *testing.T) {
	env := daemontest.UnlimitedQuotas()
	env["CHALUPA_DATA_DIR"], env["CHALUPA_LISTEN"] = t.TempDir(), "127.0.0.1:0"
	cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	q := reflect.ValueOf(cfg.Quotas)
	for i := range q.NumField() {
		if !q.Field(i).IsZero() {
			t.Errorf("with daemontest.UnlimitedQuotas, ingest.Quotas.%s is %v, want 0", q.Type().Field(i).Name, q.Field(i))
		}
	}
}
