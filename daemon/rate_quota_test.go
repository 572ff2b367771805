package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// rateRoute is one signed write route under its rate quotas.
type rateRoute struct {
	name string
	path string
	// prefix names the route's variables: CHALUPA_QUOTA_<prefix>_PER_MINUTE,
	// _BURST (or burst, when set) and CHALUPA_QUOTA_ENVIRONMENT_<prefix>_PER_MINUTE.
	perMin, burst, envPerMin string
	depQuota, envQuota       string
	logs                     bool
	// body is request i of deployment dep: each a new write.
	body func(h *daemontest.Ingest, dep string, i int) []byte
}

var rateRoutes = []rateRoute{
	{name: "telemetry", path: ingest.TelemetryRoute,
		perMin: "CHALUPA_QUOTA_TELEMETRY_PER_MINUTE", burst: "CHALUPA_QUOTA_TELEMETRY_BURST", envPerMin: "CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE",
		depQuota: ingest.QuotaDeploymentTelemetry, envQuota: ingest.QuotaEnvironmentTelemetry,
		body: func(h *daemontest.Ingest, dep string, i int) []byte {
			return h.TelemetryWindow("demo-harbor", dep, "session-1", h.Clock.Now().UTC().Truncate(time.Minute).Add(-time.Duration(i+1)*time.Minute), nil)
		}},
	{name: "lifecycle", path: ingest.LifecycleRoute,
		perMin: "CHALUPA_QUOTA_LIFECYCLE_PER_MINUTE", burst: "CHALUPA_QUOTA_LIFECYCLE_BURST", envPerMin: "CHALUPA_QUOTA_ENVIRONMENT_LIFECYCLE_PER_MINUTE",
		depQuota: ingest.QuotaDeploymentLifecycle, envQuota: ingest.QuotaEnvironmentLifecycle,
		body: func(h *daemontest.Ingest, dep string, i int) []byte {
			return h.LifecycleEvent("demo-harbor", fmt.Sprintf("ci-started:%s:%d", dep, i), protocol.EventCIStarted, dep, nil)
		}},
	{name: "runs", path: ingest.RunsRoute,
		perMin: "CHALUPA_QUOTA_RUNS_PER_MINUTE", burst: "CHALUPA_QUOTA_RUN_BURST", envPerMin: "CHALUPA_QUOTA_ENVIRONMENT_RUNS_PER_MINUTE",
		depQuota: ingest.QuotaDeploymentRuns, envQuota: ingest.QuotaEnvironmentRuns,
		body: func(h *daemontest.Ingest, dep string, i int) []byte {
			return h.RunReport("demo-harbor", dep, fmt.Sprintf("run-%s-%d", dep, i), nil)
		}},
	{name: "logs", path: "/api/ingest/logs/sessions", logs: true,
		perMin: "CHALUPA_QUOTA_LOG_REQUESTS_PER_MINUTE", burst: "CHALUPA_QUOTA_LOG_BURST", envPerMin: "CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE",
		depQuota: ingest.QuotaDeploymentLogRequests, envQuota: ingest.QuotaEnvironmentLogRequests,
		body: func(h *daemontest.Ingest, dep string, i int) []byte {
			b, _ := json.Marshal(protocol.OpenV1{EnvironmentSlug: "demo-harbor", DeploymentID: dep, SessionID: fmt.Sprintf("log-session-%d", i), Service: "chalupa-agent.service"})
			return b
		}},
}

// rateHarness is one route's daemon: an environment demo-harbor, its key,
// deployments dep-0…dep-9, and a count of everything the route writes.
type rateHarness struct {
	*daemontest.Ingest
	key  daemontest.Key
	rows func() string
}

func newRateHarness(t *testing.T, rt rateRoute, env map[string]string) *rateHarness {
	t.Helper()
	rh := &rateHarness{}
	if rt.logs {
		lh := daemontest.NewIngestLogsEnv(t, env)
		lh.CreateEnv("demo-harbor")
		rh.Ingest, rh.rows = lh.Ingest, lh.LogRows
	} else {
		h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: env})
		h.CreateEnv("demo-harbor")
		rh.Ingest = h
		rh.rows = func() string { return h.TelemetryRows() + " " + h.LifecycleRows() }
	}
	rh.key = rh.Issue("demo-harbor")
	for i := range 10 {
		if r := rh.Send(daemontest.SignedReq{KeyID: rh.key.ID, Key: rh.key.Raw, Body: rh.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-" + strconv.Itoa(i)})}); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat of dep-%d: %s", i, r)
		}
	}
	return rh
}

// TestQuotaRouteRates: every signed write route other than heartbeats has a
// rate quota per deployment and per environment, in the heartbeats' design
// (docs/operations.md, "Quotas"): past the deployment's burst a request is
// 429 rate_limited with Retry-After, counted, warned once an hour, and
// writes nothing — not even its nonce, so the very same request sent again
// once the bucket refilled is accepted; the environment's bucket bounds what
// many deployment ids of one key write together.
func TestQuotaRouteRates(t *testing.T) {
	for _, rt := range rateRoutes {
		t.Run(rt.name, func(t *testing.T) {
			// 6 a minute (a token every 10 s), burst 3; 5 a minute across
			// the environment.
			h := newRateHarness(t, rt, map[string]string{rt.perMin: "6", rt.burst: "3", rt.envPerMin: "5"})
			send := func(r daemontest.SignedReq) daemontest.Response {
				r.KeyID, r.Key, r.Path = h.key.ID, h.key.Raw, rt.path
				return h.Send(r)
			}
			for i := range 3 {
				if r := send(daemontest.SignedReq{Body: rt.body(h.Ingest, "dep-0", i)}); r.Status != http.StatusAccepted {
					t.Fatalf("request %d within the burst: %s", i+1, r)
				}
			}
			before := h.rows()
			refusedReq := daemontest.SignedReq{Nonce: protocol.NewNonce(), TS: strconv.FormatInt(h.Clock.Now().Unix(), 10), Body: rt.body(h.Ingest, "dep-0", 3)}
			r := send(refusedReq)
			wantRateLimited(t, r, "10")
			if !strings.Contains(r.Message, "deployment") {
				t.Fatalf("refusal does not name the deployment quota: %s", r)
			}
			if got := h.rows(); got != before {
				t.Fatalf("the refused request wrote: %s -> %s", before, got)
			}
			if got := quotaRefused(h.Ingest, rt.depQuota); got != 1 {
				t.Fatalf("quota_refused_total{%s} = %v, want 1", rt.depQuota, got)
			}

			// A token later the very same request (its nonce never claimed)
			// is accepted.
			h.Clock.Advance(10 * time.Second)
			if r := send(refusedReq); r.Status != http.StatusAccepted {
				t.Fatalf("the refused request re-sent 10 s later: %s", r)
			}

			// The environment has spent 4 of its 5 a minute (plus what 10 s
			// refilled): nine more deployment ids get one request in between.
			accepted := 0
			for i := 1; i < 10; i++ {
				r := send(daemontest.SignedReq{Body: rt.body(h.Ingest, "dep-"+strconv.Itoa(i), 0)})
				switch {
				case r.Status == http.StatusAccepted:
					accepted++
				case r.Status == http.StatusTooManyRequests && r.Code == "rate_limited" && strings.Contains(r.Message, "environment") && r.Header.Get("Retry-After") != "":
				default:
					t.Fatalf("dep-%d: %s", i, r)
				}
			}
			if accepted != 1 {
				t.Fatalf("%d of 9 deployments accepted past the environment's 5 a minute, want 1", accepted)
			}
			if got := quotaRefused(h.Ingest, rt.envQuota); got != 8 {
				t.Fatalf("quota_refused_total{%s} = %v, want 8", rt.envQuota, got)
			}

			qh := &quotaHarness{Ingest: h.Ingest}
			qh.recordWarnings()
			hour := h.Clock.Now().UTC().Format("2006-01-02T15")
			got := qh.warnings()
			if len(got) != 2 ||
				!strings.HasPrefix(got[0], "quota:"+rt.depQuota+":demo-harbor:dep-0:"+hour+" dep-0 ") || !strings.Contains(got[0], rt.perMin+"=6") ||
				!strings.HasPrefix(got[1], "quota:"+rt.envQuota+":demo-harbor::"+hour+" - ") || !strings.Contains(got[1], rt.envPerMin+"=5") {
				t.Fatalf("warnings = %q", got)
			}
		})
	}
}

// bigRun is a run report of 64 artifacts with 2,000-character URLs: about
// 131 KiB of artifact references.
func bigRun(h *daemontest.Ingest, dep, runID string) []byte {
	return h.RunReport("demo-harbor", dep, runID, func(r *protocol.RunReportV1) {
		r.Artifacts = nil
		for i := range ingest.MaxArtifactsPerRun {
			u := fmt.Sprintf("https://ci.example.com/%d/", i)
			u += strings.Repeat("a", 2000-len(u))
			r.Artifacts = append(r.Artifacts, protocol.ArtifactRefV1{V: 1, Name: fmt.Sprintf("artifact-%02d", i), MediaType: "text/plain",
				SizeBytes: 1, SHA256: strings.Repeat("0f", 32), Locator: protocol.HTTPSLocator(u)})
		}
	})
}

// TestQuotaArtifactBytes: with the default quotas, run reports of 64
// artifacts with 2,000-character URLs from one key are refused by the
// artifact-bytes quota after a few (each deployment's 1 MiB burst), and the
// environment's 2 MiB a minute bounds what any number of deployment ids
// write; the refusal writes nothing and its Retry-After is when the bucket
// holds the report's bytes again.
func TestQuotaArtifactBytes(t *testing.T) {
	h := newRateHarness(t, rateRoutes[2], nil)
	send := func(dep string, i int) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: h.key.ID, Key: h.key.Raw, Path: ingest.RunsRoute, Body: bigRun(h.Ingest, dep, fmt.Sprintf("big-%s-%d", dep, i))})
	}
	var one protocol.RunReportV1
	if err := json.Unmarshal(bigRun(h.Ingest, "dep-0", "x"), &one); err != nil {
		t.Fatal(err)
	}
	size := ingest.ArtifactBytes(&one)
	perDeployment := ingest.DefaultArtifactKiBBurst * 1024 / size // 7
	for i := range perDeployment {
		if r := send("dep-0", i); r.Status != http.StatusAccepted {
			t.Fatalf("report %d of %d bytes within the deployment's burst: %s", i+1, size, r)
		}
	}
	before := h.rows()
	r := send("dep-0", perDeployment)
	left := ingest.DefaultArtifactKiBBurst*1024 - perDeployment*size
	wantRetry := (size - left + ingest.DefaultArtifactKiBPerMinute*1024/60 - 1) / (ingest.DefaultArtifactKiBPerMinute * 1024 / 60)
	if r.Status != http.StatusTooManyRequests || r.Code != "rate_limited" || !strings.Contains(r.Message, "artifacts") {
		t.Fatalf("report %d: %s, want 429 rate_limited by the artifact quota", perDeployment+1, r)
	}
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < wantRetry-1 || ra > wantRetry+1 {
		t.Fatalf("Retry-After = %q, want about %d", r.Header.Get("Retry-After"), wantRetry)
	}
	if got := h.rows(); got != before {
		t.Fatalf("the refused report wrote: %s -> %s", before, got)
	}
	if got := quotaRefused(h.Ingest, ingest.QuotaDeploymentArtifactBytes); got != 1 {
		t.Fatalf("quota_refused_total{deployment_artifact_bytes} = %v", got)
	}
	// Many deployment ids of the same key: the environment's bucket.
	accepted := perDeployment
	for i := 1; i < 10; i++ {
		for j := range 3 {
			r := send("dep-"+strconv.Itoa(i), j)
			if r.Status == http.StatusAccepted {
				accepted++
			} else if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
				t.Fatalf("dep-%d: %s", i, r)
			}
		}
	}
	if max := ingest.DefaultEnvironmentArtifactKiBPerMinute * 1024 / size; accepted > max {
		t.Fatalf("%d big reports accepted in the environment, at most %d fit its minute", accepted, max)
	}
	if got := quotaRefused(h.Ingest, ingest.QuotaEnvironmentArtifactBytes); got == 0 {
		t.Fatal("quota_refused_total{environment_artifact_bytes} = 0")
	}
}

// TestQuotaSessionsOpenedPerHour: windows with final: true, each opening
// and closing its own session, meet the open-session quota (default 8)
// through the sessions opened in the last hour: the ninth is 429
// session_quota with Retry-After until the oldest leaves the hour, and
// writes nothing; an hour later one more is admitted. For an ended
// deployment, whose new sessions are born ended, too.
func TestQuotaSessionsOpenedPerHour(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ended bool
	}{{"active deployment", false}, {"ended deployment", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newQuotaHarness(t, nil)
			if r := h.beat("dep-1", ""); r.Status != http.StatusAccepted {
				t.Fatalf("heartbeat: %s", r)
			}
			if tc.ended {
				env, err := storage.EnvironmentBySlug(context.Background(), h.App.DB.Read, "demo-harbor")
				if err != nil {
					t.Fatal(err)
				}
				storagetest.EndDeployment(t, h.App.DB, env.ID, "dep-1", h.Clock.Now())
			}
			start := h.Clock.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
			final := func(session string) daemontest.Response {
				return h.Send(daemontest.SignedReq{KeyID: h.key.ID, Key: h.key.Raw, Path: ingest.TelemetryRoute,
					Body: h.TelemetryWindow("demo-harbor", "dep-1", session, start, func(w *protocol.WindowV1) { w.Final = true })})
			}
			for i := range ingest.DefaultOpenSessions {
				if r := final("final-" + strconv.Itoa(i)); r.Status != http.StatusAccepted {
					t.Fatalf("final window %d: %s", i+1, r)
				}
				h.Clock.Advance(time.Second)
			}
			before := h.TelemetryRows()
			r := final("final-extra")
			if r.Status != http.StatusTooManyRequests || r.Code != "session_quota" {
				t.Fatalf("session %d opened within an hour: %s, want 429 session_quota", ingest.DefaultOpenSessions+1, r)
			}
			if got, want := r.Header.Get("Retry-After"), strconv.Itoa(3600-ingest.DefaultOpenSessions); got != want {
				t.Fatalf("Retry-After = %q, want %s (the oldest session leaves the hour)", got, want)
			}
			if got := h.TelemetryRows(); got != before {
				t.Fatalf("the refusal wrote: %s -> %s", before, got)
			}
			if got := quotaRefused(h.Ingest, ingest.QuotaOpenSessions); got != 1 {
				t.Fatalf("quota_refused_total{open_sessions} = %v", got)
			}
			if tc.ended {
				return // its windows are admitted only 15 minutes past its end
			}
			h.Clock.Advance(time.Hour)
			start = h.Clock.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
			if r := final("final-extra"); r.Status != http.StatusAccepted {
				t.Fatalf("an hour later: %s", r)
			}
		})
	}
}
