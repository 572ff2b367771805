package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// storageState is everything a budgeted request could write, nonces
// included, with the environment's counter.
func (h *quotaHarness) storageState() string {
	h.T.Helper()
	return fmt.Sprintf("%s|%s|runs %d|bytes %d", h.TelemetryRows(), h.LifecycleRows(), h.Count(`SELECT count(*) FROM runs`),
		h.Count(`SELECT storage_bytes FROM environments WHERE slug = 'demo-harbor'`))
}

// requireCounterExact fails unless demo-harbor's counter equals the sum of
// its rows' charges.
func (h *quotaHarness) requireCounterExact(when string) int64 {
	h.T.Helper()
	ctx := context.Background()
	env, err := storage.EnvironmentBySlug(ctx, h.App.DB.Read, "demo-harbor")
	if err != nil {
		h.T.Fatal(err)
	}
	want, err := storage.RecountEnvironmentStorage(ctx, h.App.DB.Read, env.ID)
	if err != nil {
		h.T.Fatal(err)
	}
	if env.StorageBytes != want {
		h.T.Fatalf("%s: storage counter %d, rows sum to %d", when, env.StorageBytes, want)
	}
	return want
}

// wantStorageQuota fails unless r is 429 storage_quota with the budget's
// Retry-After.
func wantStorageQuota(t *testing.T, r daemontest.Response, what string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.Code != "storage_quota" {
		t.Fatalf("%s: got %s, want 429 storage_quota", what, r)
	}
	if got, want := r.Header.Get("Retry-After"), fmt.Sprint(int(ingest.StorageQuotaRetryAfter/time.Second)); got != want {
		t.Fatalf("%s: Retry-After = %q, want %q", what, got, want)
	}
}

// TestQuotaEnvironmentStorage: an environment's runs, telemetry and
// producer lifecycle events are charged to its storage budget; a write that
// would pass it is 429 storage_quota with Retry-After and writes nothing,
// not even its nonce, whether refused before the writer (a recent count)
// or inside it; heartbeats are still accepted; the refusal is counted and
// warned once an hour for the environment; the admin listing shows used
// and budget; an erase of telemetry frees the budget (docs/operations.md,
// "Quotas").
func TestQuotaEnvironmentStorage(t *testing.T) {
	const budget = 12_000
	// Ten minutes into an hour: the test's warnings all fall in it.
	h := newQuotaHarnessAt(t, map[string]string{"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES": fmt.Sprint(budget)},
		time.Date(2026, 12, 1, 10, 10, 0, 0, time.UTC))
	if r := h.beat("dep-1", ""); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	send := func(path string, body []byte) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: h.key.ID, Key: h.key.Raw, Path: path, Body: body})
	}
	window := func(k int) []byte {
		return h.TelemetryWindow("demo-harbor", "dep-1", "sess-1", h.Clock.Now().UTC().Truncate(time.Minute).Add(-time.Duration(k+1)*time.Minute), nil)
	}

	// Windows until the budget refuses one: the first opens the session
	// (charged with it), each later one its row and receipt.
	k := 0
	for ; ; k++ {
		if k > 30 {
			t.Fatalf("30 windows accepted under a %d-byte budget", budget)
		}
		r := send(ingest.TelemetryRoute, window(k))
		if r.Status == http.StatusAccepted {
			h.requireCounterExact(fmt.Sprintf("window %d", k))
			continue
		}
		wantStorageQuota(t, r, fmt.Sprintf("window %d", k))
		break
	}
	used := h.requireCounterExact("at the budget")
	if used > budget || used+storage.WindowCharge("dep-1", "sess-1") <= budget {
		t.Fatalf("refused at %d bytes of %d: the window (%d) would have fit", used, budget, storage.WindowCharge("dep-1", "sess-1"))
	}
	// Producer events, smaller, until one does not fit either.
	for e := 0; ; e++ {
		if e > 30 {
			t.Fatal("30 events accepted at the budget")
		}
		r := send(ingest.LifecycleRoute, h.LifecycleEvent("demo-harbor", fmt.Sprintf("ci-%d", e), "ci-started", "dep-1", nil))
		if r.Status == http.StatusAccepted {
			continue
		}
		wantStorageQuota(t, r, fmt.Sprintf("event %d", e))
		break
	}
	h.requireCounterExact("after the events")

	// At the budget each budgeted route is refused with nothing written:
	// first on the count a recent unit read (before the writer), then,
	// once that is older than its 5 s, by the writer unit itself.
	for _, stage := range []string{"before the writer", "in the writer unit"} {
		if stage == "in the writer unit" {
			h.Clock.Advance(6 * time.Second)
		}
		for _, c := range []struct {
			name, path string
			body       []byte
		}{
			{"run", ingest.RunsRoute, h.RunReport("demo-harbor", "dep-1", "gh-"+strings.ReplaceAll(stage, " ", "-"), nil)},
			{"window", ingest.TelemetryRoute, window(k + 1)},
			{"final window of a new session", ingest.TelemetryRoute, h.TelemetryWindow("demo-harbor", "dep-1", "sess-final", time.Time{},
				func(w *protocol.WindowV1) { w.Final = true })},
			{"event", ingest.LifecycleRoute, h.LifecycleEvent("demo-harbor", "ci-last", "ci-started", "dep-1", nil)},
		} {
			t.Run(stage+"/"+c.name, func(t *testing.T) {
				before := h.storageState()
				wantStorageQuota(t, send(c.path, c.body), c.name)
				if after := h.storageState(); after != before {
					t.Fatalf("refused %s wrote: %s -> %s", c.name, before, after)
				}
			})
			if stage == "in the writer unit" {
				h.Clock.Advance(6 * time.Second) // each one reaches the writer
			}
		}
	}
	// Heartbeats keep deadlines true at the budget: exempt.
	for _, dep := range []string{"dep-1", "dep-2"} {
		if r := h.beat(dep, ""); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat of %s at the budget: %s", dep, r)
		}
	}
	if got := quotaRefused(h.Ingest, ingest.QuotaEnvironmentStorage); got < 10 {
		t.Fatalf("quota_refused_total{environment_storage} = %v, want every refusal (10)", got)
	}
	h.recordWarnings()
	hour := h.Clock.Now().UTC().Format("2006-01-02T15")
	if got := h.warnings(); len(got) != 1 || !strings.HasPrefix(got[0], "quota:environment_storage:demo-harbor::"+hour+" - ") ||
		!strings.Contains(got[0], "CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES=12000") {
		t.Fatalf("warnings = %q", got)
	}
	// The listing carries the numbers.
	list, err := h.Admin.ListEnvironments(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var shown adminapi.Environment
	for _, e := range list.Environments {
		if e.Slug == "demo-harbor" {
			shown = e
		}
	}
	if want := h.requireCounterExact("listing"); shown.StorageBytes != want || shown.StorageBudgetBytes != budget {
		t.Fatalf("listing shows %d / %d, want %d / %d", shown.StorageBytes, shown.StorageBudgetBytes, want, budget)
	}

	// An erase of the telemetry frees the budget: a window fits again once
	// the refusal's count is older than 5 s.
	if r := h.AdminOp(adminapi.OpEraseTelemetry, map[string]string{"environmentSlug": "demo-harbor", "confirmation": "erase telemetry demo-harbor"}); r.Status != http.StatusOK {
		t.Fatalf("erase: %s", r)
	}
	h.requireCounterExact("after the erase")
	h.Clock.Advance(6 * time.Second)
	if r := send(ingest.TelemetryRoute, window(0)); r.Status != http.StatusAccepted {
		t.Fatalf("a window after the erase: %s", r)
	}
	h.requireCounterExact("after the erase and a window")
}
