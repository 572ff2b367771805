package e2e

// End-to-end tests of a failed write answered honestly and of the
// free-space guard (docs/operations.md, "Storage and the writer" and
// "Quotas"), with the built binary on a small tmpfs.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// storageE2ESender sends signed heartbeats for environment slug.
type storageE2ESender struct {
	t      *testing.T
	client *protocol.Client
	slug   string
	n      int
}

// heartbeat sends one heartbeat for one of ten deployments and returns the
// answer (never a transport error: that fails the test).
func (s *storageE2ESender) heartbeat() *protocol.Response {
	s.t.Helper()
	now := time.Now().UTC()
	body, _ := json.Marshal(protocol.HeartbeatV1{
		EnvironmentSlug: s.slug, Deployment: protocol.HeartbeatDeploy{ID: fmt.Sprintf("dep-%d", s.n%10)}, AgentVersion: "e2e/1",
		SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now},
	})
	s.n++
	resp, err := s.client.Post(context.Background(), "/api/ingest/heartbeat", body)
	if err != nil {
		s.t.Fatalf("heartbeat: %v", err)
	}
	return resp
}

// TestDiskFullEndToEnd: the built binary with its data dir on a 64 MiB
// tmpfs and the free-space guard off (CHALUPA_MIN_FREE_BYTES=0), so a
// filler file drives it to ENOSPC. Writes are answered 503
// storage_unavailable with Retry-After, never 500, on ingest and admin;
// /api/ready is 503 with its redacted body while admin status and /metrics
// give the cause; after the filler is deleted, with no write sent, the
// probe turns readiness green again; writes succeed; after a clean stop
// every acknowledged heartbeat is in the database.
func TestDiskFullEndToEnd(t *testing.T) {
	t.Parallel()
	disk := proctest.Tmpfs(t, 64)
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, map[string]string{
		"CHALUPA_DATA_DIR":       filepath.Join(disk, "data"),
		"CHALUPA_REPLICA_URL":    (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "replica")}).String(),
		"CHALUPA_MIN_FREE_BYTES": "0",
		// Only the disk may refuse here.
		"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE": "0", "CHALUPA_QUOTA_HEARTBEAT_BURST": "0", "CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE": "0",
	})
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, d.Admin(), "disk-full")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	send := &storageE2ESender{t: t, client: &protocol.Client{BaseURL: d.URL, KeyID: k.KeyID, Key: raw}, slug: "disk-full"}
	acked := 0
	for range 20 {
		if r := send.heartbeat(); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat before the disk filled: %d %s", r.Status, r.Body)
		}
		acked++
	}
	ready := func() *proctest.Response {
		r, err := d.Do(ctx, "GET", "/api/ready", proctest.Bearer(d.ReadyToken()), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ready(); r.Status != http.StatusOK {
		t.Fatalf("ready before the disk filled: %d %s", r.Status, r.Body)
	}

	filler := filepath.Join(disk, "filler")
	t.Logf("filler: %d bytes", proctest.FillDisk(t, filler))
	refused := 0
	// Heartbeats go out back to back (an ask sends up to 20): the WAL may
	// take many before the disk refuses one.
	testwait.Eventually(t, testwait.Long, "five heartbeats refused as storage_unavailable on a full disk", func() (bool, string) {
		for range 20 {
			r := send.heartbeat()
			switch {
			case r.Status == http.StatusAccepted:
				acked++ // the WAL still had room
			case r.Status == http.StatusServiceUnavailable && strings.Contains(string(r.Body), `"code":"storage_unavailable"`):
				if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
					t.Fatalf("storage_unavailable without a Retry-After: %q", r.Header.Get("Retry-After"))
				}
				refused++
			default:
				t.Fatalf("heartbeat on a full disk: %d %s, want 202 or 503 storage_unavailable", r.Status, r.Body)
			}
			if refused >= 5 {
				break
			}
		}
		return refused >= 5, fmt.Sprintf("%d heartbeats accepted, %d refused", acked, refused)
	})
	if r := ready(); r.Status != http.StatusServiceUnavailable || strings.TrimSpace(string(r.Body)) != `{"status":"unavailable"}` {
		t.Fatalf("ready while commits fail: %d %s, want 503 {\"status\":\"unavailable\"}", r.Status, r.Body)
	}
	// An admin write on the full disk: 503 too, never 500.
	body, _ := json.Marshal(adminapi.CreateEnvironmentRequest{Slug: "second-env"})
	r, err := d.Do(ctx, "POST", "/api/admin/environments", proctest.Bearer(d.AdminToken()), body)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), `"code":"storage_unavailable"`) || r.Header.Get("Retry-After") == "" {
		t.Fatalf("admin write on a full disk: %d %s (Retry-After %q), want 503 storage_unavailable", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	// The cause: admin status (a read, which works) and /metrics.
	st, err := d.Admin().GetStatus(ctx)
	if err != nil || !st.Storage.Failing || st.Storage.LastFault != storage.FaultDiskFull || st.Storage.FailingSince.IsZero() {
		t.Fatalf("admin status while commits fail: %+v, %v", st.Storage, err)
	}
	m, err := d.Do(ctx, "GET", "/metrics", proctest.Bearer(d.ReadyToken()), nil)
	if err != nil || !strings.Contains(string(m.Body), "chalupa_storage_failing 1") {
		t.Fatalf("/metrics while commits fail lacks chalupa_storage_failing 1 (%v)", err)
	}
	if strings.Contains(d.Logs(), `"status":500`) {
		t.Fatalf("a request was answered 500 on a full disk:\n%s", d.Logs())
	}

	// Space returns; nothing is written: the probe alone turns ready green.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, testwait.Long, "ready 200 after space returned, with no write sent", func() (bool, string) {
		r := ready()
		return r.Status == http.StatusOK, fmt.Sprintf("%d %s", r.Status, r.Body)
	})
	for range 10 {
		if r := send.heartbeat(); r.Status != http.StatusAccepted {
			t.Fatalf("heartbeat after space returned: %d %s", r.Status, r.Body)
		}
		acked++
	}
	if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "second-env"}); err != nil {
		t.Fatalf("admin write after space returned: %v", err)
	}
	if st, err := d.Admin().GetStatus(ctx); err != nil || st.Storage.Failing || st.Storage.Faults == 0 {
		t.Fatalf("admin status after recovery: %+v, %v", st.Storage, err)
	}
	e2eStop(t, d)

	db, err := storage.OpenReadOnly(ctx, d.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.Read.QueryRow(`SELECT count(*) FROM heartbeats WHERE key_id = ?`, k.KeyID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != acked {
		t.Fatalf("database holds %d heartbeats, want every acknowledged one (%d)", rows, acked)
	}
	if err := storage.IntegrityCheck(ctx, d.DatabasePath()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d heartbeats acknowledged and stored; %d refused 503 storage_unavailable", acked, refused)
}

// TestDiskLowEndToEnd: the built binary with a free-space floor no disk
// meets (1 PiB): a heartbeat is accepted, a lifecycle event is refused 503
// disk_low with Retry-After, admin reads and writes work, admin status
// and the disk-low event say so, and `config check` says the default file
// replica shares the data disk.
func TestDiskLowEndToEnd(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	env := map[string]string{"CHALUPA_MIN_FREE_BYTES": strconv.Itoa(1 << 50)}
	d := proctest.StartDaemon(t, bin, env)
	ctx := context.Background()
	k := daemontest.EnvironmentKey(t, d.Admin(), "disk-low")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		t.Fatal(err)
	}
	client := &protocol.Client{BaseURL: d.URL, KeyID: k.KeyID, Key: raw}
	send := &storageE2ESender{t: t, client: client, slug: "disk-low"}
	if r := send.heartbeat(); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat below the floor: %d %s, want 202", r.Status, r.Body)
	}
	ev, _ := json.Marshal(protocol.LifecycleEventV1{EnvironmentSlug: "disk-low", ID: "boot-1", Kind: protocol.EventBooted,
		OccurredAt: time.Now().UTC(), Deployment: protocol.LifecycleDeploy{ID: "dep-0"}})
	r, err := client.Post(ctx, "/api/ingest/lifecycle", ev)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), `"code":"disk_low"`) || r.Header.Get("Retry-After") != "60" {
		t.Fatalf("lifecycle below the floor: %d %s (Retry-After %q), want 503 disk_low", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	if _, err := d.Admin().ListFleet(ctx); err != nil {
		t.Fatalf("admin read below the floor: %v", err)
	}
	st, err := d.Admin().GetStatus(ctx)
	if err != nil || !st.Storage.DiskLow || st.Storage.MinFreeBytes != 1<<50 {
		t.Fatalf("admin status below the floor: %+v, %v", st.Storage, err)
	}
	testwait.Eventually(t, testwait.Long, "a disk-low event", func() (bool, string) {
		l, err := d.Admin().ListEvents(ctx, adminapi.ListEventsRequest{Kind: "disk-low"})
		return err == nil && len(l.Events) == 1, fmt.Sprintf("%+v %v", l, err)
	})
	out, code := opsCLI(t, bin, d, "admin", "status")
	if code != 0 || !strings.Contains(out, "disk low") {
		t.Fatalf("admin status (CLI): exit %d:\n%s", code, out)
	}
	e2eStop(t, d)

	cfgEnv := d.EnvCopy()
	delete(cfgEnv, "CHALUPA_REPLICA_URL") // the default: file:// in the data dir
	out, code = proctest.RunCommand(t, bin, "", cfgEnv, "config", "check")
	if code != 0 || !strings.Contains(out, "file:// replica on the data directory's filesystem") {
		t.Fatalf("config check with the default replica: exit %d, want a note that it shares the disk:\n%s", code, out)
	}
}
