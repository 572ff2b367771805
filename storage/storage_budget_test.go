package storage_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// fullMetrics is a window holding all 13 metrics with fractional values
// (stored as 8-byte floats: the largest a window row gets).
func fullMetrics(m int) storage.TelemetryMetricSet {
	var set storage.TelemetryMetricSet
	for j := range set {
		v := float64((m*(7+j))%97) + 0.25
		set[j] = &storage.MetricAgg{N: 12, Sum: 12 * v, Min: v - 3, Max: v + 3, Last: v + 1}
	}
	return set
}

// storageCounter reads environments.storage_bytes.
func storageCounter(t *testing.T, db *storage.DB, environmentID int64) int64 {
	t.Helper()
	n, err := storage.CheckEnvironmentStorage(context.Background(), db.Read, environmentID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// requireCounterExact fails unless the environment's counter equals the
// sum of its rows' charges (the SUM the request path never runs).
func requireCounterExact(t *testing.T, db *storage.DB, environmentID int64, when string) int64 {
	t.Helper()
	want, err := storage.RecountEnvironmentStorage(context.Background(), db.Read, environmentID)
	if err != nil {
		t.Fatal(err)
	}
	if got := storageCounter(t, db, environmentID); got != want {
		t.Fatalf("%s: storage counter %d, rows sum to %d", when, got, want)
	}
	return want
}

// seedCounted writes every kind of counted row for one deployment through
// the storage functions the ingest paths use: windows (two sessions, one
// anomaly), a run with artifacts and a producer event. Windows start at
// start, one a minute.
func seedCounted(t *testing.T, db *storage.DB, dep storage.Deployment, start time.Time, windows int) (kept int64) {
	t.Helper()
	ctx := context.Background()
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for m := range windows {
			sess := fmt.Sprintf("sess-%d", m%2)
			at := start.Add(time.Duration(m) * time.Minute)
			if err := storage.InsertTelemetryReceipt(ctx, tx, storage.TelemetryReceipt{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID,
				SessionID: sess, WindowStart: at, BodyHash: sha256.Sum256([]byte(at.String() + sess)), ReceivedAt: at}); err != nil {
				return err
			}
			if err := storage.InsertTelemetryWindow(ctx, tx, storage.TelemetryWindow{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID,
				SessionID: sess, WindowStart: at, ReceivedAt: at, Metrics: fullMetrics(m)}); err != nil {
				return err
			}
			if _, err := storage.RecordSessionWindow(ctx, tx, dep.EnvironmentID, dep.ID, sess, at, at.Add(time.Minute), at, false); err != nil {
				return err
			}
			if err := storage.RecordTelemetryAnomaly(ctx, tx, storage.TelemetryAnomaly{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID,
				SessionID: sess, Kind: "gpu-idle", FirstSeenAt: at, LastSeenAt: at.Add(time.Minute)}); err != nil {
				return err
			}
		}
		run := storage.Run{EnvironmentID: dep.EnvironmentID, RunID: "run-" + dep.ID, DeploymentID: dep.ID, Suite: "unit/go", Status: "passed",
			CommitSHA: strings.Repeat("a", 40), StartedAt: start, FinishedAt: start.Add(time.Minute), ReceivedAt: start.Add(time.Minute)}
		for i := range 4 {
			run.Artifacts = append(run.Artifacts, storage.Artifact{Name: fmt.Sprintf("junit-%d.xml", i), MediaType: "application/xml", SizeBytes: 10,
				SHA256: strings.Repeat("b", 64), LocatorKind: "https", LocatorURL: "https://ci.example.com/artifacts/" + strings.Repeat("c", 60)})
		}
		run.Artifacts = append(run.Artifacts, storage.Artifact{Name: "cover", MediaType: "text/plain", SHA256: strings.Repeat("d", 64),
			LocatorKind: "local", LocatorID: "cover-1.out"})
		if _, err := storage.RecordRun(ctx, tx, run, 0); err != nil {
			return err
		}
		ev := storage.LifecycleEvent{ID: fmt.Sprintf("agent:%d:boot-%s", dep.EnvironmentID, dep.ID),
			EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID, Kind: "booted", Message: "booted", OccurredAt: start}
		kept = storage.RunCharge(run) + storage.ProducerEventCharge(ev)
		_, err := storage.RecordProducerEvent(ctx, tx, ev, sha256.Sum256([]byte(dep.ID)), 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return kept
}

// TestStorageCounterFollowsRows: the environment's storage counter equals
// the charges of the rows it holds after inserts, a retention fold, and an
// erase of its telemetry; another environment's counter is untouched, and
// lifecycle events chalupa records itself are not counted
// (docs/operations.md, "Quotas").
func TestStorageCounterFollowsRows(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	dep := storagetest.Deployment(t, db, storage.Deployment{})
	other := storagetest.Deployment(t, db, storage.Deployment{})
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	kept := seedCounted(t, db, dep, start, 180)
	seedCounted(t, db, other, start, 30)
	otherBytes := requireCounterExact(t, db, other.EnvironmentID, "other after inserts")

	inserted := requireCounterExact(t, db, dep.EnvironmentID, "after inserts")
	if inserted < 180*int64(storage.WindowRowBytes+storage.ReceiptRowBytes) {
		t.Fatalf("counter %d after 180 windows: less than their fixed charge", inserted)
	}
	// chalupa's own events (a quota warning) are not charged.
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: "quota:x", EnvironmentID: dep.EnvironmentID,
			Kind: "quota-exceeded", Message: "m", OccurredAt: start})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := requireCounterExact(t, db, dep.EnvironmentID, "after a chalupa event"); got != inserted {
		t.Fatalf("a chalupa event moved the counter: %d, was %d", got, inserted)
	}

	// Fold the first two hours of both sessions.
	for _, sess := range []string{"sess-0", "sess-1"} {
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			f, err := storage.FoldTelemetryWindows(ctx, tx, storage.TelemetrySessionRef{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID, ID: sess},
				start.Add(2*time.Hour))
			if f.SourceRows != 60 {
				t.Errorf("%s: folded %d windows, want 60", sess, f.SourceRows)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	folded := requireCounterExact(t, db, dep.EnvironmentID, "after the fold")
	if folded >= inserted {
		t.Fatalf("fold of 120 windows into 4 hourly rows left the counter at %d (was %d)", folded, inserted)
	}
	// A late window folded into an hour that already has its rollup
	// merges: no new hourly row is charged.
	// (sess-1 holds the odd minutes: minute 28 is new to it.)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		at := start.Add(28 * time.Minute)
		if err := storage.InsertTelemetryWindow(ctx, tx, storage.TelemetryWindow{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID,
			SessionID: "sess-1", WindowStart: at, ReceivedAt: at, Metrics: fullMetrics(1)}); err != nil {
			return err
		}
		_, err := storage.FoldTelemetryWindows(ctx, tx, storage.TelemetrySessionRef{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID, ID: "sess-1"},
			start.Add(2*time.Hour))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := requireCounterExact(t, db, dep.EnvironmentID, "after a merging fold"); got != folded {
		t.Fatalf("a window folded into an existing hour moved the counter to %d, was %d", got, folded)
	}

	// Erase in small batches, so several units each take their share off.
	e, _, err := func() (storage.TelemetryErasure, bool, error) {
		var e storage.TelemetryErasure
		var resumed bool
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			var err error
			e, resumed, err = storage.StartTelemetryErasure(ctx, tx, dep.EnvironmentID, "erase-1", start)
			return err
		})
		return e, resumed, err
	}()
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range storage.TelemetryEraseOrder {
		for {
			var n int64
			if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
				var err error
				n, err = storage.EraseTelemetryBatch(ctx, tx, table, dep.EnvironmentID, e.ID, 7)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			requireCounterExact(t, db, dep.EnvironmentID, "during the erase of "+string(table))
			if n < 7 {
				break
			}
		}
	}
	if left := requireCounterExact(t, db, dep.EnvironmentID, "after the erase"); left != kept {
		t.Fatalf("after erasing telemetry the counter is %d: want %d, the run and the producer event it keeps", left, kept)
	}
	if got := requireCounterExact(t, db, other.EnvironmentID, "other at the end"); got != otherBytes {
		t.Fatalf("another environment's counter moved: %d, was %d", got, otherBytes)
	}
}

// tableBytes is the pages (bytes) SQLite's dbstat says table and its
// indexes use.
func tableBytes(t *testing.T, db *storage.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Read.QueryRow(`SELECT coalesce(sum(d.pgsize), 0) FROM dbstat d JOIN sqlite_schema s ON s.name = d.name WHERE s.tbl_name = ?`,
		table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestChargedBytesTrackTheFile: on a real SQLite file, the charge of each
// counted table's rows is within [0.8, 1.6] of the pages the table and its
// indexes take (dbstat), so the budget bounds the file. The fixed sizes of
// storage_budget_query.go were measured with this test (-v prints them).
// The full run seeds four deployments; the fast lane (-short) two, whose
// thousands of rows a table still put the pages' fixed overhead well
// inside the bounds.
func TestChargedBytesTrackTheFile(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const windows = 1440
	deployments := 4
	if testing.Short() {
		deployments = 2
	}
	var envID int64
	for i := range deployments {
		dep := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: envID, ID: fmt.Sprintf("droplet-%d-0123456789", i)})
		envID = dep.EnvironmentID
		seedCounted(t, db, dep, start, windows)
		// Runs as a CI job reports them (several a deployment), and a
		// summary of every metric on each session, as the finalizer
		// writes it.
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			for r := range 200 {
				run := storage.Run{EnvironmentID: dep.EnvironmentID, RunID: fmt.Sprintf("gh-%d-%d", i, r), DeploymentID: dep.ID, Suite: "unit/go",
					Status: "passed", CommitSHA: strings.Repeat("a", 40), StartedAt: start, FinishedAt: start, ReceivedAt: start}
				for a := range 8 {
					run.Artifacts = append(run.Artifacts, storage.Artifact{Name: fmt.Sprintf("junit-%d.xml", a), MediaType: "application/xml",
						SHA256: strings.Repeat("b", 64), LocatorKind: "https", LocatorURL: "https://ci.example.com/a/" + strings.Repeat("c", 80)})
				}
				if _, err := storage.RecordRun(ctx, tx, run, 0); err != nil {
					return err
				}
				ev := storage.LifecycleEvent{ID: fmt.Sprintf("agent:%d:ci-%d-%d", dep.EnvironmentID, i, r), EnvironmentID: dep.EnvironmentID,
					DeploymentID: dep.ID, Kind: "ci-finished", Message: "ci-finished", OccurredAt: start}
				if _, err := storage.RecordProducerEvent(ctx, tx, ev, sha256.Sum256([]byte(ev.ID)), 0); err != nil {
					return err
				}
			}
			// Sessions as the final:true pattern makes them (one window
			// each, ended at once), each with an anomaly.
			for k := range 500 {
				sess := fmt.Sprintf("01JD%022d", k)
				at := start.Add(time.Duration(k) * time.Minute)
				if _, err := storage.RecordSessionWindow(ctx, tx, dep.EnvironmentID, dep.ID, sess, at, at.Add(time.Minute), at, true); err != nil {
					return err
				}
				if err := storage.RecordTelemetryAnomaly(ctx, tx, storage.TelemetryAnomaly{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID,
					SessionID: sess, Kind: "memory-pressure", FirstSeenAt: at, LastSeenAt: at.Add(time.Minute)}); err != nil {
					return err
				}
			}
			var metrics []string
			for _, m := range storage.TelemetryMetrics {
				metrics = append(metrics, fmt.Sprintf(`%q:{"samples":17280,"mean":123456789.123456,"max":987654321.123456}`, m.Name))
			}
			summary := `{"startedAt":"2026-12-01T10:00:00Z","endedAt":"2026-12-01T12:13:00Z","durationSeconds":7980,"windowsSeen":130,"gapMinutes":3,` +
				`"gpuIdleMinutes":41,"metrics":{` + strings.Join(metrics, ",") + `},"endReason":"deployment-ended"}`
			_, err := tx.ExecContext(ctx, `UPDATE telemetry_sessions SET summary = ?, summarized_at = 1 WHERE environment_id = ? AND deployment_id = ?`,
				summary, dep.EnvironmentID, dep.ID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// Fold the first day into hourly rows, one session at a time.
		for _, sess := range []string{"sess-0", "sess-1"} {
			if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
				_, err := storage.FoldTelemetryWindows(ctx, tx, storage.TelemetrySessionRef{EnvironmentID: dep.EnvironmentID, DeploymentID: dep.ID, ID: sess},
					start.Add(12*time.Hour))
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	requireCounterExact(t, db, envID, "after seeding")
	tables := []string{"telemetry_windows", "telemetry_receipts", "telemetry_sessions", "telemetry_hourly", "telemetry_anomalies", "runs", "run_artifacts", "lifecycle_events"}
	for _, table := range tables {
		t.Run(table, func(t *testing.T) {
			var charged, rows int64
			if err := db.Read.QueryRow(`SELECT coalesce(sum(`+storage.ChargeSQL(table)+`), 0), count(*) FROM `+table+` WHERE environment_id = ?`,
				envID).Scan(&charged, &rows); err != nil {
				t.Fatal(err)
			}
			file := tableBytes(t, db, table)
			ratio := float64(charged) / float64(file)
			t.Logf("%s: %d rows, %d bytes of pages (%.0f a row), charged %d (%.0f a row), charge/file %.2f",
				table, rows, file, float64(file)/float64(rows), charged, float64(charged)/float64(rows), ratio)
			if ratio < 0.8 || ratio > 1.6 {
				t.Errorf("%s: charged %d bytes for %d bytes of pages (%.2f), want 0.8–1.6", table, charged, file, ratio)
			}
		})
	}
}

// TestMigrationBackfillsStorageCounter: migration 0019 counts the rows a
// database already holds once, with the same charges the writer units add
// (docs/operations.md, "Quotas"): each environment's counter equals its
// rows' sum after the migration, chalupa's own events uncounted.
func TestMigrationBackfillsStorageCounter(t *testing.T) {
	ctx := context.Background()
	var before []string
	for _, n := range schemaFiles(t) {
		if version(t, n) < 19 {
			before = append(before, n)
		}
	}
	db := openDB(t, t.TempDir()+"/chalupa.db")
	if _, err := db.Migrate(ctx, storage.MigrateOptions{FS: schemaCopy(t, before)}); err != nil {
		t.Fatal(err)
	}
	hash := strings.Repeat("ab", 32)
	stmts := []string{
		`INSERT INTO environments (id, org_id, slug, name, created_at, updated_at) VALUES (1, 1, 'demo-harbor', 'd', 0, 0), (2, 1, 'quiet', 'q', 0, 0), (3, 1, 'empty', 'e', 0, 0)`,
		`INSERT INTO deployments (environment_id, id, launched_at) VALUES (1, 'droplet-1', 0), (2, 'dep-2', 0)`,
		`INSERT INTO telemetry_sessions (environment_id, deployment_id, id, created_at, first_window_at, last_window_at, windows, summary)
		 VALUES (1, 'droplet-1', '01JDSESSION', 0, 0, 60000, 2, '{"windowsSeen":2}'), (2, 'dep-2', 's', 0, 0, 0, 1, NULL)`,
		`INSERT INTO telemetry_windows (environment_id, deployment_id, session_id, window_start, received_at, final, cpu_pct_n, cpu_pct_sum, cpu_pct_min, cpu_pct_max, cpu_pct_last)
		 VALUES (1, 'droplet-1', '01JDSESSION', 0, 1, 0, 12, 1.5, 0.1, 0.2, 0.15), (1, 'droplet-1', '01JDSESSION', 60000, 1, 0, NULL, NULL, NULL, NULL, NULL),
		        (2, 'dep-2', 's', 0, 1, 1, NULL, NULL, NULL, NULL, NULL)`,
		`INSERT INTO telemetry_receipts (environment_id, deployment_id, session_id, window_start, body_hash, received_at)
		 VALUES (1, 'droplet-1', '01JDSESSION', 0, x'` + hash + `', 1), (1, 'droplet-1', '01JDSESSION', 60000, x'` + hash + `', 1), (2, 'dep-2', 's', 0, x'` + hash + `', 1)`,
		`INSERT INTO telemetry_hourly (environment_id, deployment_id, session_id, hour_start, windows, first_window_at, last_window_at) VALUES (1, 'droplet-1', 'old', 0, 60, 0, 1)`,
		`INSERT INTO telemetry_anomalies (environment_id, deployment_id, session_id, kind, first_seen_at, last_seen_at, windows) VALUES (1, 'droplet-1', '01JDSESSION', 'gpu-idle', 0, 1, 2)`,
		`INSERT INTO runs (environment_id, run_id, deployment_id, suite, status, commit_sha, started_at, finished_at, fingerprint, received_at)
		 VALUES (1, 'gh-1', 'droplet-1', 'unit/go', 'passed', '` + strings.Repeat("a", 40) + `', 0, 1, x'` + hash + `', 1)`,
		`INSERT INTO run_artifacts (environment_id, run_id, ordinal, name, media_type, size_bytes, sha256, locator_kind, locator_url, locator_id)
		 VALUES (1, 'gh-1', 0, 'junit.xml', 'application/xml', 1, '` + hash + `', 'https', 'https://ci.example.com/junit.xml', NULL),
		        (1, 'gh-1', 1, 'cover', 'text/plain', 1, '` + hash + `', 'local', NULL, 'cover-1.out')`,
		`INSERT INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, message, occurred_at, body_sha256)
		 VALUES ('agent:1:boot', 1, 1, 'droplet-1', 'booted', 'reported by the agent', 0, x'` + hash + `'),
		        ('quota:x', 1, 1, NULL, 'quota-exceeded', 'chalupa''s own warning', 0, NULL)`,
	}
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s[:40], err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, env := range []struct {
		id   int64
		rows bool
	}{{1, true}, {2, true}, {3, false}} {
		t.Run(fmt.Sprint(env.id), func(t *testing.T) {
			got := requireCounterExact(t, db, env.id, "after the migration")
			if (got > 0) != env.rows {
				t.Fatalf("environment %d: counter %d after the backfill", env.id, got)
			}
		})
	}
	// The producer event counts, chalupa's own does not.
	var events int64
	if err := db.Read.QueryRow(`SELECT sum(` + storage.ChargeSQL("lifecycle_events") + `) FROM lifecycle_events WHERE environment_id = 1 AND body_sha256 IS NOT NULL`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if want := storage.ProducerEventCharge(storage.LifecycleEvent{ID: "agent:1:boot", DeploymentID: "droplet-1", Kind: "booted", Message: "reported by the agent"}); events != want {
		t.Fatalf("the producer event is charged %d in SQL, %d in Go", events, want)
	}
}

// TestChargedBytesTrackLargeArtifacts: the largest run a report may carry
// (64 artifacts with 2,000-character URLs) is charged within [0.8, 1.6] of
// the pages its rows take: each such row fills a page alone.
func TestChargedBytesTrackLargeArtifacts(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	dep := storagetest.Deployment(t, db, storage.Deployment{})
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for r := range 100 {
			run := storage.Run{EnvironmentID: dep.EnvironmentID, RunID: fmt.Sprintf("run-%012d", r), DeploymentID: dep.ID, Suite: "unit/go",
				Status: "passed", StartedAt: start, FinishedAt: start, ReceivedAt: start}
			for a := range 64 {
				u := fmt.Sprintf("https://ci.example.com/%d/%d/", r, a)
				run.Artifacts = append(run.Artifacts, storage.Artifact{Name: fmt.Sprintf("artifact-%02d.xml", a), MediaType: "application/xml",
					SHA256: strings.Repeat("0f", 32), LocatorKind: "https", LocatorURL: u + strings.Repeat("a", 2000-len(u))})
			}
			if _, err := storage.RecordRun(ctx, tx, run, 0); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	requireCounterExact(t, db, dep.EnvironmentID, "after the runs")
	var charged int64
	if err := db.Read.QueryRow(`SELECT sum(` + storage.ChargeSQL("run_artifacts") + `) FROM run_artifacts`).Scan(&charged); err != nil {
		t.Fatal(err)
	}
	file := tableBytes(t, db, "run_artifacts")
	ratio := float64(charged) / float64(file)
	t.Logf("run_artifacts: 6,400 rows, %d bytes of pages, charged %d, charge/file %.2f", file, charged, ratio)
	if ratio < 0.8 || ratio > 1.6 {
		t.Errorf("charged %d bytes for %d bytes of pages (%.2f), want 0.8–1.6", charged, file, ratio)
	}
}
