package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
	"github.com/chalupa-run/chalupa/storage"
)

// foldSessionMinutes is the minute windows per seeded session: two weeks,
// every minute, as the fold benchmark (BenchmarkFold) generates them, so a
// session's windows fill whole hours.
const foldSessionMinutes = 14 * 24 * 60

// foldSeedAge is how old the newest seeded window is: past the 7 days after
// which retention folds (with a day to spare), so every seeded window is
// foldable by the first pass.
const foldSeedAge = 8 * 24 * time.Hour

// seedFoldDB creates chalupa's database in dataDir (migrated, as `chalupa
// serve` would) holding environment slug and rows minute source windows
// older than foldSeedAge, all 13 metrics each, in sessions of
// foldSessionMinutes, one deployment per session ("fold-dep-N", created by
// a heartbeat received now, so neither the reaper nor heartbeat retention
// touches it). The server started on dataDir afterwards finds the backlog a
// retention pass folds. The windows are generated inside SQLite, one
// session per writer unit.
func seedFoldDB(ctx context.Context, dataDir, slug string, rows int) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	db, err := storage.Open(ctx, filepath.Join(dataDir, harness.DatabaseFileName))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Migrate(ctx, storage.MigrateOptions{Logger: zerolog.Nop()}); err != nil {
		return err
	}
	now := time.Now().UTC()
	var env storage.Environment
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		env, err = storage.CreateEnvironment(ctx, tx, slug, "load test", now)
		return err
	}); err != nil {
		return fmt.Errorf("seed environment: %w", err)
	}
	sessions := (rows + foldSessionMinutes - 1) / foldSessionMinutes
	start := now.Add(-foldSeedAge).Truncate(time.Hour).Add(-foldSessionMinutes * time.Minute)
	var cols, vals strings.Builder
	for i, m := range storage.TelemetryMetrics {
		fmt.Fprintf(&cols, ", %[1]s_n, %[1]s_sum, %[1]s_min, %[1]s_max, %[1]s_last", m.Column)
		// Integer-valued, varying per minute and metric, min ≤ last ≤ max.
		fmt.Fprintf(&vals, ", 12, 12 * ((i * %[1]d) %% 97 + 0.25), (i * %[1]d) %% 97 - 2.75, (i * %[1]d) %% 97 + 3.25, (i * %[1]d + 1) %% 97 + 0.25", 7+i)
	}
	insert := fmt.Sprintf(`WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m WHERE i + 1 < ?4)
		INSERT INTO telemetry_windows (environment_id, deployment_id, session_id, window_start, received_at, final%s)
		SELECT ?1, ?2, ?3, ?5 + i * 60000, ?5 + i * 60000 + 60000, 0%s FROM m`, cols.String(), vals.String())
	for s := range sessions {
		n := min(foldSessionMinutes, rows-s*foldSessionMinutes)
		dep := fmt.Sprintf("fold-dep-%d", s)
		sess := fmt.Sprintf("fold-sess-%d", s)
		if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			if _, err := storage.RecordHeartbeat(ctx, tx, storage.Heartbeat{
				DeploymentID: dep, EnvironmentID: env.ID, KeyID: "env_" + slug + "_seed", ReceivedAt: now, SentAt: now,
				AgentVersion: "load/1", Region: "nyc3", Size: "s-2vcpu-4gb", LimitMinutes: 30,
				LastActivityAt: now, IdleDeadlineAt: now.Add(30 * time.Minute),
			}, false); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insert, env.ID, dep, sess, n, start.UnixMilli()); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO telemetry_sessions (environment_id, deployment_id, id, created_at,
				first_window_at, last_window_at, windows, detail_from, version) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?4, ?6)`,
				env.ID, dep, sess, start.UnixMilli(), start.Add(time.Duration(n-1)*time.Minute).UnixMilli(), n)
			return err
		}); err != nil {
			return fmt.Errorf("seed session %d: %w", s, err)
		}
	}
	return nil
}
