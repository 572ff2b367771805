package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/julienschmidt/httprouter"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// benchConsole is a console over a fresh database, signed in.
func benchConsole(b *testing.B) (*Console, *storage.DB, context.Context) {
	db := storagetest.NewDB(b)
	clock := clockwork.NewRealClock()
	c := New(Deps{DB: db, Perf: &telemetry.PerformanceReader{DB: db, Clock: clock}, CostRule: cost.DefaultRule,
		Version: "bench", Origin: "http://127.0.0.1:8080", Clock: clock, Log: zerolog.Nop(),
		Replication: func(time.Time) storage.ReplicationHealth { return storage.ReplicationHealth{Kind: "file"} }})
	ctx := context.WithValue(context.Background(), ctxKey{}, session{storage.ConsoleSession{CSRFToken: "t"}})
	return c, db, ctx
}

// benchPage renders path with h until the benchmark ends and reports the
// page's bytes and, beside ns/op (wall time), cpu-ms/op: the process's CPU
// time per render, which a shared machine does not inflate.
func benchPage(b *testing.B, h http.HandlerFunc, ctx context.Context, path string) {
	req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d", path, rec.Code)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
	b.ReportMetric(float64(size), "page-bytes")
}

// BenchmarkFleetPage200: the fleet page over 200 environments, each with
// an active deployment (docs/operations.md, "Console": targets ≤ 100 KB
// and ≤ 50 ms on one core; run with -cpu 1).
func BenchmarkFleetPage200(b *testing.B) {
	c, db, ctx := benchConsole(b)
	for i := 0; i < 200; i++ {
		e := storagetest.Environment(b, db, storage.Environment{Slug: fmt.Sprintf("env-%03d", i)})
		storagetest.Deployment(b, db, storage.Deployment{EnvironmentID: e.ID})
	}
	benchPage(b, c.fleet, ctx, "/app")
}

// BenchmarkDeploymentPage30d: a deployment page at its 30-day range over
// 30 days of telemetry (one window every 30 minutes: 1,440 windows, every
// 4-hour point filled).
func BenchmarkDeploymentPage30d(b *testing.B) {
	c, db, ctx := benchConsole(b)
	e := storagetest.Environment(b, db, storage.Environment{Slug: "harbor"})
	d := storagetest.Deployment(b, db, storage.Deployment{EnvironmentID: e.ID, ID: "dep-bench"})
	start := time.Now().UTC().Truncate(time.Minute).Add(-30 * 24 * time.Hour)
	for i := 0; i < 30*48; i++ {
		storagetest.TelemetryWindow(b, db, storage.TelemetryWindow{EnvironmentID: e.ID, DeploymentID: d.ID, SessionID: "sess-bench",
			WindowStart: start.Add(time.Duration(i) * 30 * time.Minute)})
	}
	ctx = context.WithValue(ctx, httprouter.ParamsKey, httprouter.Params{{Key: "slug", Value: "harbor"}, {Key: "id", Value: "dep-bench"}})
	benchPage(b, c.deployment, ctx, "/app/env/harbor/deployments/dep-bench?range=30d")
}

// Page budget fleet (docs/operations.md, "Console"): every page ≤ 100 KB
// and ≤ 50 ms of server time on one core, measured over pageBenchDeployments
// active deployments in one environment, each with pageBenchDays of
// one-minute windows (CPU, memory, disk, network, load). Run it with
// contrib/console-pages.sh (taskset -c 0, -cpu 1).
const (
	pageBenchDeployments = 100
	pageBenchDays        = 7
)

// seedPageBench writes the page budget's fleet straight into SQLite: the
// windows are generated inside SQLite, one deployment per writer unit,
// each in one session ending a minute before now.
func seedPageBench(b *testing.B, db *storage.DB, now time.Time) {
	ctx := context.Background()
	e := storagetest.Environment(b, db, storage.Environment{Slug: "harbor"})
	minutes := pageBenchDays * 24 * 60
	first := now.Truncate(time.Minute).Add(-time.Duration(minutes+1) * time.Minute)
	insert := `WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m WHERE i + 1 < ?4)
		INSERT INTO telemetry_windows (environment_id, deployment_id, session_id, window_start, received_at, final,
		  cpu_pct_n, cpu_pct_sum, cpu_pct_min, cpu_pct_max, cpu_pct_last,
		  mem_used_bytes_n, mem_used_bytes_sum, mem_used_bytes_min, mem_used_bytes_max, mem_used_bytes_last,
		  mem_total_bytes_n, mem_total_bytes_sum, mem_total_bytes_min, mem_total_bytes_max, mem_total_bytes_last,
		  disk_used_bytes_n, disk_used_bytes_sum, disk_used_bytes_min, disk_used_bytes_max, disk_used_bytes_last,
		  disk_total_bytes_n, disk_total_bytes_sum, disk_total_bytes_min, disk_total_bytes_max, disk_total_bytes_last,
		  load1_n, load1_sum, load1_min, load1_max, load1_last,
		  net_rx_bytes_n, net_rx_bytes_sum, net_rx_bytes_min, net_rx_bytes_max, net_rx_bytes_last,
		  net_tx_bytes_n, net_tx_bytes_sum, net_tx_bytes_min, net_tx_bytes_max, net_tx_bytes_last)
		SELECT ?1, ?2, ?3, ?5 + i * 60000, ?5 + i * 60000 + 60000, 0,
		  12, 12 * (i % 97), i % 97, i % 97, i % 97,
		  12, 12 * (1073741824 + i * 1000), 1073741824 + i * 1000, 1073741824 + i * 1000, 1073741824 + i * 1000,
		  12, 12 * 4294967296, 4294967296, 4294967296, 4294967296,
		  12, 12 * 10737418240, 10737418240, 10737418240, 10737418240,
		  12, 12 * 26843545600, 26843545600, 26843545600, 26843545600,
		  12, 12 * (i % 13) / 10.0, (i % 13) / 10.0, (i % 13) / 10.0, (i % 13) / 10.0,
		  12, 12 * (i % 89) * 1000, (i % 89) * 1000, (i % 89) * 1000, (i % 89) * 1000,
		  12, 12 * (i % 53) * 500, (i % 53) * 500, (i % 53) * 500, (i % 53) * 500
		FROM m`
	for d := range pageBenchDeployments {
		id := fmt.Sprintf("dep-%03d", d)
		storagetest.Deployment(b, db, storage.Deployment{EnvironmentID: e.ID, ID: id, LaunchedAt: first,
			LastHeartbeatAt: now, IdleDeadlineAt: now.Add(time.Duration(d+1) * time.Minute)})
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO telemetry_sessions (environment_id, deployment_id, id, created_at, first_window_at, last_window_at, windows)
				VALUES (?, ?, ?, ?, ?, ?, ?)`, e.ID, id, "sess-"+id, first.UnixMilli(), first.UnixMilli(), first.Add(time.Duration(minutes-1)*time.Minute).UnixMilli(), minutes); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, insert, e.ID, id, "sess-"+id, minutes, first.UnixMilli())
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPageBudget renders each console page over the page budget's
// fleet (100 deployments, 7 days of windows each) and reports its bytes
// (page-bytes) beside its time: the deployment page at every range, the
// environment page with its 100 sparklines, the fleet page with its
// summary.
func BenchmarkPageBudget(b *testing.B) {
	c, db, ctx := benchConsole(b)
	now := time.Now().UTC()
	seedPageBench(b, db, now)
	pages := []struct {
		name string
		h    http.HandlerFunc
		path string
		ps   httprouter.Params
	}{
		{"fleet", c.fleet, "/app", nil},
		{"environment", c.environment, "/app/env/harbor", httprouter.Params{{Key: "slug", Value: "harbor"}}},
		{"events", c.events, "/app/events", nil},
		{"getting-started", c.envGettingStarted, "/app/env/harbor/getting-started", httprouter.Params{{Key: "slug", Value: "harbor"}}},
	}
	for _, rg := range ranges {
		pages = append(pages, struct {
			name string
			h    http.HandlerFunc
			path string
			ps   httprouter.Params
		}{"deployment-" + rg.Name, c.deployment, "/app/env/harbor/deployments/dep-050?range=" + rg.Name,
			httprouter.Params{{Key: "slug", Value: "harbor"}, {Key: "id", Value: "dep-050"}}})
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			benchPage(b, p.h, context.WithValue(ctx, httprouter.ParamsKey, p.ps), p.path)
		})
	}
}
