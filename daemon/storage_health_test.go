package daemon_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// TestDiskLowGuard: below CHALUPA_MIN_FREE_BYTES (a measured filesystem
// injected through Statfs) every signed route but heartbeats answers 503
// disk_low with Retry-After before its body is even parsed, writing
// nothing, not even its nonce; heartbeats, admin writes and reads go on;
// the storage-health loop records disk-low, /metrics and admin status show
// the guard; once space returns it lifts by itself and records
// disk-low-lifted (docs/operations.md, "Quotas").
func TestDiskLowGuard(t *testing.T) {
	const gib = 1 << 30
	var free atomic.Uint64
	free.Store(1 * gib)
	h := newIngestHarness(t, harnessOptions{
		Env: map[string]string{"CHALUPA_MIN_FREE_BYTES": strconv.Itoa(2 * gib)},
		Statfs: func(string) (storage.DiskSpace, error) {
			return storage.DiskSpace{Free: free.Load(), Total: 100 * gib}, nil
		},
	})
	ctx := context.Background()
	// Admin writes keep working: the operator must be able to act.
	h.createEnv("demo-harbor")
	k := h.issue("demo-harbor")
	loop := daemon.NewStorageHealth(h.p.App)
	res, err := loop.Tick(ctx)
	if err != nil || res.Event != daemon.DiskLowKind || !res.Disk.Low {
		t.Fatalf("tick below the floor: %+v, %v; want a disk-low event", res, err)
	}

	if r := h.send(signedReq{KeyID: k.ID, Key: k.Raw, Body: h.heartbeat(hbOpts{Env: "demo-harbor", Deployment: "dep-1"})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat while the disk is low: %s, want 202 (heartbeats are exempt)", r)
	}
	launched := h.lifecycleEvent("demo-harbor", "launch-1", ingest.EventBooted, "dep-1", nil)
	for _, c := range []struct {
		path string
		body []byte
	}{
		{lifecyclePath, launched},
		{runsPath, []byte(`{}`)},
		{"/api/ingest/telemetry", []byte(`{}`)},
		{"/api/ingest/logs/sessions", []byte(`{}`)},
	} {
		t.Run(c.path, func(t *testing.T) {
			before := h.lifecycleRows()
			r := h.send(signedReq{KeyID: k.ID, Key: k.Raw, Body: c.body, Path: c.path})
			if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), `"code":"disk_low"`) {
				t.Fatalf("got %s, want 503 disk_low", r)
			}
			if ra := r.Header.Get("Retry-After"); ra != "60" {
				t.Fatalf("Retry-After = %q, want 60", ra)
			}
			if after := h.lifecycleRows(); after != before {
				t.Fatalf("rows %s -> %s: a disk_low refusal wrote something", before, after)
			}
		})
	}
	if f := h.fleet(); len(f.Environments) != 1 {
		t.Fatalf("admin read while the disk is low: %+v", f)
	}
	st, err := h.client().GetStatus(ctx)
	if err != nil || !st.Storage.DiskLow || st.Storage.FreeBytes != gib || st.Storage.MinFreeBytes != 2*gib || st.Storage.DiskLowSince.IsZero() {
		t.Fatalf("status: %+v, %v; want the guard shown", st.Storage, err)
	}
	m := h.do("GET", "/metrics", http.Header{"Authorization": {"Bearer " + h.readyToken()}}, nil)
	for _, want := range []string{"chalupa_disk_low 1", "chalupa_disk_free_bytes 1.073741824e+09", "chalupa_disk_min_free_bytes 2.147483648e+09",
		`chalupa_ingest_results_total{result="disk_low",route="/api/ingest/lifecycle"} 1`} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if r := h.do("GET", "/api/ready", http.Header{"Authorization": {"Bearer " + h.readyToken()}}, nil); r.Status != http.StatusOK {
		t.Fatalf("ready while the disk is low: %s, want 200 (storage works)", r)
	}

	free.Store(3 * gib)
	res, err = loop.Tick(ctx)
	if err != nil || res.Event != daemon.DiskLowLiftedKind || res.Disk.Low {
		t.Fatalf("tick after space returned: %+v, %v; want lifted", res, err)
	}
	if res, err = loop.Tick(ctx); err != nil || res.Event != "" {
		t.Fatalf("second tick: %+v, %v; want no event", res, err)
	}
	if r := h.send(signedReq{KeyID: k.ID, Key: k.Raw, Body: launched, Path: lifecyclePath}); r.Status != http.StatusAccepted {
		t.Fatalf("lifecycle after space returned: %s", r)
	}
	for _, kind := range []string{daemon.DiskLowKind, daemon.DiskLowLiftedKind} {
		ev, err := h.client().ListEvents(ctx, adminapi.ListEventsRequest{Kind: kind})
		if err != nil || len(ev.Events) != 1 || !strings.Contains(ev.Events[0].Message, "CHALUPA_MIN_FREE_BYTES") && kind == daemon.DiskLowKind {
			t.Fatalf("%s events: %+v, %v; want one", kind, ev, err)
		}
	}
}
