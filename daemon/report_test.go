package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
)

// reportDayStart is the synthetic day's first hour.
var reportDayStart = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// syntheticDay counts 24 hours of requests on p, one hour at a time on the
// injected clock, with 36 s of CPU time per hour: each hour 100 ingest
// requests (90 at 3 ms, 9 at 40 ms, 1 at 3 s) and 10 admin requests at
// 0.8 ms, one of them a 500. The clock ends at the start of hour 24.
func syntheticDay(t *testing.T, p *daemontest.InProcess, clock *clockwork.FakeClock) {
	t.Helper()
	var cpu atomic.Int64
	daemon.SetProcessCPU(p.App.Server, func() time.Duration { return time.Duration(cpu.Load()) })
	for range 24 {
		s := p.App.Server
		for i := range 100 {
			d := 3 * time.Millisecond
			switch {
			case i >= 99:
				d = 3 * time.Second
			case i >= 90:
				d = 40 * time.Millisecond
			}
			daemon.ObserveRequest(s, daemon.GroupIngest, http.StatusAccepted, d)
		}
		for i := range 10 {
			code := http.StatusOK
			if i == 0 {
				code = http.StatusInternalServerError
			}
			daemon.ObserveRequest(s, daemon.GroupAdmin, code, 800*time.Microsecond)
		}
		cpu.Add(int64(36 * time.Second))
		clock.Advance(time.Hour)
	}
	daemon.WaitRequestStats(p.App.Server)
}

func routeGroup(t *testing.T, r adminapi.OperationsReport, group string) adminapi.ReportRouteGroup {
	t.Helper()
	for _, g := range r.Routes {
		if g.Group == group {
			return g
		}
	}
	t.Fatalf("report has no route group %q: %+v", group, r.Routes)
	return adminapi.ReportRouteGroup{}
}

// TestOperationsReportSyntheticDay: 24 hours of counted requests give the
// exact counts, 5xx and bucket quantiles by route group, the hours with
// traffic, and wall and CPU time from the stored rows; a restart keeps it
// all (the last hour is written at shutdown) and a report of a shorter span
// counts only its hours (docs/operations.md, "Operations report").
func TestOperationsReportSyntheticDay(t *testing.T) {
	clock := clockwork.NewFakeClockAt(reportDayStart)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock})
	syntheticDay(t, p, clock)
	ctx := context.Background()

	check := func(t *testing.T, r adminapi.OperationsReport, adminExtra int64) {
		t.Helper()
		if !r.Since.Equal(reportDayStart) || r.HoursWithTraffic != 24 {
			t.Errorf("since %s, %d hours with traffic; want %s, 24", r.Since, r.HoursWithTraffic, reportDayStart)
		}
		// Ingest: 2,400 requests; rank 1,200 is in the ≤5 ms bucket
		// (2,160 at 3 ms), rank 2,376 the last of the ≤50 ms bucket.
		// Its buckets: 2,160 at ≤5 ms, 216 at ≤50 ms, 24 at ≤5000 ms.
		ingest := routeGroup(t, r, daemon.GroupIngest)
		if want := (adminapi.ReportRouteGroup{Group: "ingest", Requests: 2400, P50Ms: 5, P99Ms: 50,
			LatencyBuckets: []int64{0, 0, 0, 2160, 0, 0, 216, 0, 0, 0, 0, 0, 24, 0}}); !reflect.DeepEqual(ingest, want) {
			t.Errorf("ingest = %+v; want %+v", ingest, want)
		}
		if want := []float64{0.5, 1, 2.5, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000}; !reflect.DeepEqual(r.LatencyBoundsMs, want) {
			t.Errorf("latency bounds %v; want %v", r.LatencyBoundsMs, want)
		}
		// Interpolated: rank 1,200 is 1,200/2,160 into (2.5, 5] ms, rank
		// 2,376 the last of (20, 50] ms.
		for q, want := range map[float64]float64{0.5: 2.5 + 2.5*1200/2160, 0.99: 50} {
			if ms, over, ok := adminapi.LatencyEstimateMs(r.LatencyBoundsMs, ingest.LatencyBuckets, q); !ok || over || math.Abs(ms-want) > 1e-9 {
				t.Errorf("ingest q%v estimate %v ms (over %v, ok %v); want %v", q, ms, over, ok, want)
			}
		}
		// Admin: 240 at 0.8 ms (≤1 ms) and the reports' own requests,
		// whose latency is real.
		admin := routeGroup(t, r, daemon.GroupAdmin)
		var counted int64
		for _, n := range admin.LatencyBuckets {
			counted += n
		}
		if counted != admin.Requests || len(admin.LatencyBuckets) != 14 || admin.LatencyBuckets[1] < 240 {
			t.Errorf("admin buckets %v for %d requests", admin.LatencyBuckets, admin.Requests)
		}
		admin.LatencyBuckets = nil
		if want := (adminapi.ReportRouteGroup{Group: "admin", Requests: 240 + adminExtra, ServerErrors: 24, P50Ms: 1, P99Ms: 1}); !reflect.DeepEqual(admin, want) {
			t.Errorf("admin = %+v; want %+v", admin, want)
		}
	}
	t.Run("day", func(t *testing.T) {
		r, err := p.Admin.GetOperationsReport(ctx, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		check(t, r, 0)
		// 23 hours are stored (hour 23 is counted in memory until the
		// next request): 23 h of wall time, 36 s of CPU each.
		if r.Process.WallSeconds != 23*3600 || r.Process.CPUSeconds != 23*36 || r.Process.ActiveShare != 0.01 {
			t.Errorf("process = %+v; want 82800 s wall, 828 s CPU, share 0.01", r.Process)
		}
		if len(r.Loops) != 4 {
			t.Errorf("loops %+v", r.Loops)
		}
	})
	t.Run("restart keeps it", func(t *testing.T) {
		// The report request above was the first of hour 24: it handed
		// hour 23 to the writer, and shutdown writes hour 24 (itself).
		p.Restart(daemontest.AppOptions{Clock: clock})
		r, err := p.Admin.GetOperationsReport(ctx, 25*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if r.Since.Equal(reportDayStart) {
			t.Fatalf("since %s: a 25 h span should start an hour earlier", r.Since)
		}
		r.Since, r.HoursWithTraffic = reportDayStart, r.HoursWithTraffic-1 // hour 24 holds the first report only
		check(t, r, 1)
		if r.Process.WallSeconds != 24*3600 || r.Process.CPUSeconds != 24*36 {
			t.Errorf("process = %+v; want 86400 s wall, 864 s CPU", r.Process)
		}
	})
	t.Run("shorter span", func(t *testing.T) {
		r, err := p.Admin.GetOperationsReport(ctx, 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// Hours 22, 23 and 24 (now−2h truncated to its hour).
		if g := routeGroup(t, r, daemon.GroupIngest); g.Requests != 200 || r.HoursWithTraffic != 3 {
			t.Errorf("ingest %+v over %d hours; want 200 over 3", g, r.HoursWithTraffic)
		}
	})
	t.Run("bad since", func(t *testing.T) {
		for _, since := range []time.Duration{time.Minute, 91 * 24 * time.Hour} {
			_, err := p.Admin.GetOperationsReport(ctx, since)
			var ae *adminapi.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "bad_since" {
				t.Errorf("since %s: err = %v; want 400 bad_since", since, err)
			}
		}
	})
}

// TestIdleDaemonWritesNothing: a daemon that serves no request writes no
// statistics however long it idles, has nothing scheduled on its clock, and
// writes no row at shutdown (docs/operations.md, "Operations report").
func TestIdleDaemonWritesNothing(t *testing.T) {
	clock := clockwork.NewFakeClockAt(reportDayStart)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock})
	before, _ := p.App.DB.Writer.Stats()
	for range 48 {
		clock.Advance(time.Hour)
	}
	if after, _ := p.App.DB.Writer.Stats(); after != before {
		t.Errorf("idle for 48 h: %d commits; want none", after-before)
	}
	// An already-cancelled context: BlockUntilContext answers at once,
	// nil only if a timer or ticker waits on the clock.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := clock.BlockUntilContext(ctx, 1); err == nil {
		t.Error("an idle daemon has a timer on its clock")
	}
	p.Restart(daemontest.AppOptions{Clock: clock})
	r, err := p.Admin.GetOperationsReport(context.Background(), 72*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r.HoursWithTraffic != 0 || len(r.Routes) != 0 || r.Process.WallSeconds != 0 {
		t.Errorf("after an idle run and shutdown: %+v; want no rows", r)
	}
}

// TestOperationsReportStaleHour: requests of an hour before the span, still
// counted in memory because the daemon idled since, are not reported in it;
// the report's own request hands them to the writer, and a longer span
// reports them.
func TestOperationsReportStaleHour(t *testing.T) {
	clock := clockwork.NewFakeClockAt(reportDayStart)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock})
	for range 5 {
		daemon.ObserveRequest(p.App.Server, daemon.GroupIngest, http.StatusAccepted, time.Millisecond)
	}
	clock.Advance(30 * time.Hour)
	ctx := context.Background()
	for _, tc := range []struct {
		since time.Duration
		want  int64
	}{{24 * time.Hour, 0}, {48 * time.Hour, 5}} {
		r, err := p.Admin.GetOperationsReport(ctx, tc.since)
		if err != nil {
			t.Fatal(err)
		}
		daemon.WaitRequestStats(p.App.Server)
		var got int64
		for _, g := range r.Routes {
			if g.Group == daemon.GroupIngest {
				got = g.Requests
			}
		}
		if got != tc.want {
			t.Errorf("since %s: %d ingest requests; want %d", tc.since, got, tc.want)
		}
	}
}

// TestOperationsReportReplica: the report lists the replica at report
// time — its LTX objects and bytes, exactly what the replica directory
// holds; a listing cut at its cap says the figures are lower bounds; a
// replica that cannot be listed gives known false with the failure's kind
// and never the replica's path (docs/operations.md, "Operations report").
func TestOperationsReportReplica(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	ctx := context.Background()
	newEnv(t, p.Admin, "demo")
	if err := p.App.Replicator.SyncAndWait(ctx); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(p.Env["CHALUPA_REPLICA_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Run("listed", func(t *testing.T) { reportMatchesReplica(t, p.Admin, u.Path) })
	t.Run("capped", func(t *testing.T) {
		// A cap below what the replica holds: Litestream's compaction may
		// have merged everything into one file, so write and sync until
		// there are two.
		for i := 0; ; i++ {
			if files, _ := ltxFiles(t, u.Path); files >= 2 {
				break
			}
			if i == 20 {
				t.Fatal("the replica never held two LTX files")
			}
			newEnv(t, p.Admin, fmt.Sprintf("capped-%d", i))
			if err := p.App.Replicator.SyncAndWait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		inv, err := p.App.Replicator.Inventory(ctx, 1)
		if err != nil || inv.Objects != 1 || !inv.Truncated {
			t.Fatalf("inventory capped at 1: %+v, %v", inv, err)
		}
	})
	t.Run("unlistable", func(t *testing.T) {
		// A file where the replica's directory was: reading it fails.
		// Replication may add a file between RemoveAll's listing and its
		// last unlink, or make the directory again: try again.
		for attempt := 1; ; attempt++ {
			err := os.RemoveAll(u.Path)
			if err == nil {
				err = os.WriteFile(u.Path, nil, 0o600)
			}
			if err == nil {
				break
			}
			if attempt == 100 {
				t.Fatal(err)
			}
		}
		r, err := p.Admin.GetOperationsReport(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Replica.Known || !strings.HasPrefix(r.Replica.Note, storage.ErrReplicaListing.Error()) || strings.Contains(r.Replica.Note, u.Path) {
			t.Fatalf("replica %+v: want unknown, the failure's kind, no path", r.Replica)
		}
		p.CloseWithoutFinalSync() // the replica is gone on purpose
	})
}

// TestOperationsReportReplicaS3: against an S3 replica (versitygw) the
// report counts the generation's LTX objects and bytes as the bucket holds
// them; with the S3 server down it answers known false with the failure's
// kind, never the endpoint (docs/operations.md, "Operations report").
func TestOperationsReportReplicaS3(t *testing.T) {
	gw := proctest.StartVersityGW(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: gw.DaemonEnv("chalupa")})
	ctx := context.Background()
	newEnv(t, p.Admin, "demo")
	if err := p.App.Replicator.SyncAndWait(ctx); err != nil {
		t.Fatal(err)
	}
	reportMatchesReplica(t, p.Admin, filepath.Join(gw.Root, gw.Bucket, "chalupa"))
	gw.Stop()
	r, err := p.Admin.GetOperationsReport(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Replica.Known || !strings.HasPrefix(r.Replica.Note, storage.ErrReplicaListing.Error()) ||
		strings.Contains(r.Replica.Note, gw.Addr) || strings.Contains(r.Replica.Note, gw.Bucket) {
		t.Fatalf("replica with S3 down %+v: want unknown, the failure's kind only", r.Replica)
	}
	t.Logf("S3 down: %s", r.Replica.Note)
	p.CloseWithoutFinalSync() // the S3 server is down on purpose
}

// ltxFiles counts the .ltx files under dir and their bytes.
func ltxFiles(t *testing.T, dir string) (files, bytes int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() && e.Name() == storage.IdentityMarkerDir {
			return filepath.SkipDir // the identity marker, not the database's history
		}
		if err != nil || e.IsDir() || filepath.Ext(path) != ".ltx" {
			return err
		}
		info, err := e.Info()
		files, bytes = files+1, bytes+info.Size()
		return err
	})
	if err != nil || files == 0 {
		t.Fatalf("replica %s: %d ltx files, %v", dir, files, err)
	}
	return files, bytes
}

// reportMatchesReplica requires the report's replica figures to be the
// .ltx files under dir (the replica's storage) outside the identity
// marker's folder. Replication may compact
// meanwhile: a report is compared only when the files were the same
// before and after it, and it is asked again (at most 20 times) otherwise.
func reportMatchesReplica(t *testing.T, cl *adminapi.Client, dir string) {
	t.Helper()
	for range 20 {
		files, bytes := ltxFiles(t, dir)
		r, err := cl.GetOperationsReport(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if f, b := ltxFiles(t, dir); f != files || b != bytes {
			continue
		}
		if r.Replica != (adminapi.ReportReplica{Known: true, Objects: files, Bytes: bytes}) {
			t.Fatalf("replica %+v, want %d objects, %d bytes", r.Replica, files, bytes)
		}
		return
	}
	t.Fatal("the replica changed during every one of 20 reports")
}
