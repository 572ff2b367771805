package daemon_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
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
	h := daemontest.NewIngest(t, daemontest.IngestOptions{
		Env: map[string]string{"CHALUPA_MIN_FREE_BYTES": strconv.Itoa(2 * gib)},
		Statfs: func(string) (storage.DiskSpace, error) {
			return storage.DiskSpace{Free: free.Load(), Total: 100 * gib}, nil
		},
	})
	ctx := context.Background()
	// Admin writes keep working: the operator must be able to act.
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	loop := daemon.NewStorageHealth(h.App)
	res, err := loop.Tick(ctx)
	if err != nil || res.Event != daemon.DiskLowKind || !res.Disk.Low {
		t.Fatalf("tick below the floor: %+v, %v; want a disk-low event", res, err)
	}

	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1"})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat while the disk is low: %s, want 202 (heartbeats are exempt)", r)
	}
	launched := h.LifecycleEvent("demo-harbor", "launch-1", protocol.EventBooted, "dep-1", nil)
	for _, c := range []struct {
		path string
		body []byte
	}{
		{ingest.LifecycleRoute, launched},
		{ingest.RunsRoute, []byte(`{}`)},
		{"/api/ingest/telemetry", []byte(`{}`)},
		{"/api/ingest/logs/sessions", []byte(`{}`)},
	} {
		t.Run(c.path, func(t *testing.T) {
			before := h.LifecycleRows()
			r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: c.body, Path: c.path})
			if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), `"code":"disk_low"`) {
				t.Fatalf("got %s, want 503 disk_low", r)
			}
			if ra := r.Header.Get("Retry-After"); ra != "60" {
				t.Fatalf("Retry-After = %q, want 60", ra)
			}
			if after := h.LifecycleRows(); after != before {
				t.Fatalf("rows %s -> %s: a disk_low refusal wrote something", before, after)
			}
		})
	}
	if f := h.Fleet(); len(f.Environments) != 1 {
		t.Fatalf("admin read while the disk is low: %+v", f)
	}
	st, err := h.Admin.GetStatus(ctx)
	if err != nil || !st.Storage.DiskLow || st.Storage.FreeBytes != gib || st.Storage.MinFreeBytes != 2*gib || st.Storage.DiskLowSince.IsZero() {
		t.Fatalf("status: %+v, %v; want the guard shown", st.Storage, err)
	}
	m := h.Do("GET", "/metrics", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil)
	for _, want := range []string{"chalupa_disk_low 1", "chalupa_disk_free_bytes 1.073741824e+09", "chalupa_disk_min_free_bytes 2.147483648e+09",
		`chalupa_ingest_results_total{result="disk_low",route="/api/ingest/lifecycle"} 1`} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if r := h.Do("GET", "/api/ready", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil); r.Status != http.StatusOK {
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
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: launched, Path: ingest.LifecycleRoute}); r.Status != http.StatusAccepted {
		t.Fatalf("lifecycle after space returned: %s", r)
	}
	for _, kind := range []string{daemon.DiskLowKind, daemon.DiskLowLiftedKind} {
		ev, err := h.Admin.ListEvents(ctx, adminapi.ListEventsRequest{Kind: kind})
		if err != nil || len(ev.Events) != 1 || !strings.Contains(ev.Events[0].Message, "CHALUPA_MIN_FREE_BYTES") && kind == daemon.DiskLowKind {
			t.Fatalf("%s events: %+v, %v; want one", kind, ev, err)
		}
	}
}

// TestStorageFailingReadinessAndProbe: a storage fault in a writer unit
// (ENOSPC) turns the writer failing: /api/ready answers its redacted 503,
// /metrics and admin status give the cause. The storage-health loop, woken
// by the fault without any timer, does not probe while less than 1 MiB is
// free; once space returns its 10 s probe (on the injected clock) writes the
// storage_probe row and readiness is green again with no request sent
// (docs/operations.md, "Storage and the writer").
func TestStorageFailingReadinessAndProbe(t *testing.T) {
	var free atomic.Uint64
	free.Store(512 << 10)
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Statfs: func(string) (storage.DiskSpace, error) {
		return storage.DiskSpace{Free: free.Load(), Total: 64 << 20}, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := func() daemontest.Response {
		return h.Do("GET", "/api/ready", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil)
	}
	if r := ready(); r.Status != http.StatusOK {
		t.Fatalf("ready before the fault: %s", r)
	}
	loop := daemon.NewStorageHealth(h.App)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()

	w := h.App.DB.Writer
	enospc := &os.PathError{Op: "write", Path: "chalupa.db-wal", Err: syscall.ENOSPC}
	if err := w.Do(ctx, func(storage.Tx) error { return enospc }); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("unit error: %v", err)
	}
	if r := ready(); r.Status != http.StatusServiceUnavailable || strings.TrimSpace(string(r.Body)) != `{"status":"unavailable"}` {
		t.Fatalf("ready while failing: %s", r)
	}
	m := h.Do("GET", "/metrics", http.Header{"Authorization": {"Bearer " + h.ReadyToken()}}, nil)
	if !strings.Contains(string(m.Body), "chalupa_storage_failing 1") || !strings.Contains(string(m.Body), "chalupa_storage_faults_total 1") {
		t.Fatalf("/metrics lacks the failing state")
	}
	st, err := h.Admin.GetStatus(ctx)
	if err != nil || !st.Storage.Failing || st.Storage.LastFault != storage.FaultDiskFull || st.Storage.FailingSince.IsZero() {
		t.Fatalf("status while failing: %+v, %v", st.Storage, err)
	}
	// The loop wakes on the fault itself and logs it once; with 512 KiB
	// free it does not probe.
	testwait.Eventually(t, testwait.Short, "the loop to log the fault", func() (bool, string) {
		return strings.Contains(h.Logs.String(), "storage failing"), "no log line"
	})
	if got := h.Count(`SELECT count(*) FROM storage_probe`); got != 0 {
		t.Fatalf("probed with 512 KiB free: %d rows", got)
	}
	if _, failing := w.Failing(); !failing {
		t.Fatal("recovered without a write")
	}

	free.Store(1 << 30)
	testwait.Eventually(t, testwait.Short, "the probe to clear the failing state", func() (bool, string) {
		h.Clock.Advance(10 * time.Second)
		_, failing := w.Failing()
		return !failing, "still failing"
	})
	if r := ready(); r.Status != http.StatusOK {
		t.Fatalf("ready after the probe: %s", r)
	}
	if got := h.Count(`SELECT count(*) FROM storage_probe`); got != 1 {
		t.Fatalf("storage_probe rows = %d, want 1", got)
	}
	// The loop logs the recovery after the probe's commit clears the
	// failing state: wait for the line, do not race it.
	testwait.Eventually(t, testwait.Short, "the loop to log the recovery", func() (bool, string) {
		return strings.Contains(h.Logs.String(), "storage works again"), "no log line"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
