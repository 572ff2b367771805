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

func benchPage(b *testing.B, h http.HandlerFunc, ctx context.Context, path string) {
	req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d", path, rec.Code)
		}
		size = rec.Body.Len()
	}
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
