package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// TelemetryCounts holds one number per telemetry table: rows removed by an
// erasure, or rows held (docs/operations.md, "Erasing telemetry").
type TelemetryCounts struct {
	Sessions, Windows, Hourly, Receipts, Anomalies int64
}

// TelemetryTable names one of the five telemetry tables an erasure
// empties.
type TelemetryTable string

// The telemetry tables, in EraseOrder's order.
const (
	TableTelemetryWindows   TelemetryTable = "telemetry_windows"
	TableTelemetryHourly    TelemetryTable = "telemetry_hourly"
	TableTelemetryAnomalies TelemetryTable = "telemetry_anomalies"
	TableTelemetryReceipts  TelemetryTable = "telemetry_receipts"
	TableTelemetrySessions  TelemetryTable = "telemetry_sessions"
)

// TelemetryEraseOrder is the order an erasure empties the tables in:
// detail and rollups first, then anomalies, then retry receipts (so that,
// at every commit, a stored window still has its receipt and a replay of
// it is deduplicated rather than stored twice), and sessions last.
var TelemetryEraseOrder = []TelemetryTable{
	TableTelemetryWindows, TableTelemetryHourly, TableTelemetryAnomalies, TableTelemetryReceipts, TableTelemetrySessions,
}

// eraseTable is how one table is erased in batches: its key columns after
// environment_id and the telemetry_erasures column counting it.
type eraseTable struct {
	key, counter string
}

var eraseTables = map[TelemetryTable]eraseTable{
	TableTelemetryWindows:   {"deployment_id, session_id, window_start", "windows"},
	TableTelemetryHourly:    {"deployment_id, session_id, hour_start", "hourly"},
	TableTelemetryAnomalies: {"deployment_id, session_id, kind", "anomalies"},
	TableTelemetryReceipts:  {"deployment_id, session_id, window_start", "receipts"},
	TableTelemetrySessions:  {"deployment_id, id", "sessions"},
}

// add adds n to the count of table t.
func (c *TelemetryCounts) add(t TelemetryTable, n int64) {
	switch t {
	case TableTelemetryWindows:
		c.Windows += n
	case TableTelemetryHourly:
		c.Hourly += n
	case TableTelemetryAnomalies:
		c.Anomalies += n
	case TableTelemetryReceipts:
		c.Receipts += n
	case TableTelemetrySessions:
		c.Sessions += n
	}
}

// Total is the sum over the five tables.
func (c TelemetryCounts) Total() int64 {
	return c.Sessions + c.Windows + c.Hourly + c.Receipts + c.Anomalies
}

// TelemetryErasure is one erasure of an environment's telemetry
// (telemetry_erasures): Removed counts the rows its batches removed.
type TelemetryErasure struct {
	ID            string
	EnvironmentID int64
	StartedAt     time.Time
	// FinishedAt is zero while the erasure is in progress (or was
	// interrupted).
	FinishedAt time.Time
	Removed    TelemetryCounts
}

const erasureColumns = `id, environment_id, started_at, finished_at, sessions, windows, hourly, receipts, anomalies`

func scanErasure(sc interface{ Scan(...any) error }) (TelemetryErasure, error) {
	var e TelemetryErasure
	var started int64
	var finished sql.NullInt64
	err := sc.Scan(&e.ID, &e.EnvironmentID, &started, &finished,
		&e.Removed.Sessions, &e.Removed.Windows, &e.Removed.Hourly, &e.Removed.Receipts, &e.Removed.Anomalies)
	e.StartedAt = time.UnixMilli(started).UTC()
	e.FinishedAt = fromMS(finished)
	return e, err
}

// StartTelemetryErasure returns the environment's unfinished erasure when
// there is one (an earlier erase was interrupted: resumed is true), else
// creates erasure id started at now.
func StartTelemetryErasure(ctx context.Context, q Querier, environmentID int64, id string, now time.Time) (e TelemetryErasure, resumed bool, err error) {
	e, err = scanErasure(q.QueryRowContext(ctx,
		`SELECT `+erasureColumns+` FROM telemetry_erasures WHERE environment_id = ? AND finished_at IS NULL`, environmentID))
	switch {
	case err == nil:
		return e, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return e, false, fmt.Errorf("read telemetry erasure: %w", err)
	}
	if _, err := q.ExecContext(ctx,
		`INSERT INTO telemetry_erasures (id, environment_id, started_at) VALUES (?, ?, ?)`,
		id, environmentID, ms(now)); err != nil {
		return e, false, fmt.Errorf("start telemetry erasure: %w", err)
	}
	return TelemetryErasure{ID: id, EnvironmentID: environmentID, StartedAt: time.UnixMilli(ms(now)).UTC()}, false, nil
}

// EraseTelemetryBatch deletes at most limit of the environment's rows from
// table and adds the number deleted to erasure erasureID, in the caller's
// unit, so the erasure's counts always equal the rows removed. Erasing
// receipts also takes them off deployments.telemetry_receipts of the
// deployments the batch touched, so the counter stays exact between units. It returns the rows deleted: fewer than limit means
// the table holds none of the environment's rows any more (unless an agent
// sent telemetry since).
func EraseTelemetryBatch(ctx context.Context, q Querier, table TelemetryTable, environmentID int64, erasureID string, limit int) (int64, error) {
	et, ok := eraseTables[table]
	if !ok {
		return 0, fmt.Errorf("erase telemetry: unknown table %q", table)
	}
	// The batch is a range of the primary key: up to the key of the
	// limit-th row (an index walk of limit entries), or the rest.
	width := strings.Count(et.key, ",") + 1
	bound := make([]any, width)
	ptrs := make([]any, width)
	for i := range bound {
		ptrs[i] = &bound[i]
	}
	err := q.QueryRowContext(ctx, `SELECT `+et.key+` FROM `+string(table)+` WHERE environment_id = ?
		 ORDER BY `+et.key+` LIMIT 1 OFFSET ?`, environmentID, limit-1).Scan(ptrs...)
	del := `DELETE FROM ` + string(table) + ` WHERE environment_id = ?`
	args := []any{environmentID}
	switch {
	case err == nil:
		del += ` AND (` + et.key + `) <= (?` + strings.Repeat(", ?", width-1) + `)`
		args = append(args, bound...)
	case !errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("erase %s: %w", table, err)
	}
	// Every deleted row returns its charge, taken off the environment's
	// storage counter in this unit (docs/operations.md, "Quotas").
	var n, freed int64
	if table == TableTelemetryReceipts {
		rows, err := q.QueryContext(ctx, del+` RETURNING deployment_id, `+chargeExpr(string(table)), args...)
		if err != nil {
			return 0, fmt.Errorf("erase %s: %w", table, err)
		}
		touched := map[string]int64{}
		for rows.Next() {
			var d string
			var c int64
			if err := rows.Scan(&d, &c); err != nil {
				rows.Close()
				return 0, fmt.Errorf("erase %s: %w", table, err)
			}
			touched[d]++
			n++
			freed += c
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("erase %s: %w", table, err)
		}
		for d, k := range touched {
			if _, err := q.ExecContext(ctx,
				`UPDATE deployments SET telemetry_receipts = max(0, telemetry_receipts - ?) WHERE environment_id = ? AND id = ?`,
				k, environmentID, d); err != nil {
				return 0, fmt.Errorf("count erased telemetry receipts: %w", err)
			}
		}
	} else {
		rows, err := q.QueryContext(ctx, del+` RETURNING `+chargeExpr(string(table)), args...)
		if err != nil {
			return 0, fmt.Errorf("erase %s: %w", table, err)
		}
		for rows.Next() {
			var c int64
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return 0, fmt.Errorf("erase %s: %w", table, err)
			}
			n++
			freed += c
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("erase %s: %w", table, err)
		}
	}
	if err := addEnvironmentStorage(ctx, q, environmentID, -freed); err != nil {
		return 0, err
	}
	if n > 0 {
		if _, err := q.ExecContext(ctx,
			`UPDATE telemetry_erasures SET `+et.counter+` = `+et.counter+` + ? WHERE id = ?`, n, erasureID); err != nil {
			return 0, fmt.Errorf("count erased %s: %w", table, err)
		}
	}
	return n, nil
}

// TelemetryErasedEventKind is the lifecycle event kind an erasure records
// when it finishes.
const TelemetryErasedEventKind = "telemetry-erased"

// FinishTelemetryErasure completes erasure id of an environment of
// organization orgID at now: it recounts every deployment's receipt counter
// of the environment (0 once its receipts are gone), marks the erasure
// finished and records a telemetry-erased lifecycle event whose id is the
// erasure's and whose message holds the counts (never a metric value). It
// returns the erasure as finished; finishedNow is false, with nothing
// written, when another call finished it first. Errors: ErrNotFound for an
// unknown erasure.
func FinishTelemetryErasure(ctx context.Context, q Querier, orgID int64, id string, now time.Time) (e TelemetryErasure, finishedNow bool, err error) {
	e, err = scanErasure(q.QueryRowContext(ctx, `SELECT `+erasureColumns+` FROM telemetry_erasures WHERE id = ?`, id))
	if err != nil {
		return e, false, notFound(err)
	}
	if !e.FinishedAt.IsZero() {
		return e, false, nil
	}
	if _, err := q.ExecContext(ctx,
		`UPDATE deployments SET telemetry_receipts =
		     (SELECT count(*) FROM telemetry_receipts r WHERE r.environment_id = deployments.environment_id AND r.deployment_id = deployments.id)
		 WHERE environment_id = ?`, e.EnvironmentID); err != nil {
		return e, false, fmt.Errorf("reset telemetry receipt counters: %w", err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE telemetry_erasures SET finished_at = ? WHERE id = ?`, ms(now), id); err != nil {
		return e, false, fmt.Errorf("finish telemetry erasure: %w", err)
	}
	r := e.Removed
	msg := fmt.Sprintf("telemetry erased: %d sessions, %d source windows, %d hourly rollups, %d retry receipts, %d anomalies",
		r.Sessions, r.Windows, r.Hourly, r.Receipts, r.Anomalies)
	if _, err := q.ExecContext(ctx,
		`INSERT INTO lifecycle_events (id, org_id, environment_id, kind, message, occurred_at) VALUES (?, ?, ?, ?, ?, ?)`,
		id, orgID, e.EnvironmentID, TelemetryErasedEventKind, msg, ms(now)); err != nil {
		return e, false, fmt.Errorf("record telemetry-erased event: %w", err)
	}
	e.FinishedAt = time.UnixMilli(ms(now)).UTC()
	return e, true, nil
}

// TelemetryRowCounts counts the rows each telemetry table holds for one
// environment, or for every environment when environmentID is 0. Run it
// on one read transaction for a consistent audit.
func TelemetryRowCounts(ctx context.Context, q Querier, environmentID int64) (TelemetryCounts, error) {
	var c TelemetryCounts
	for _, t := range TelemetryEraseOrder {
		var n int64
		query, args := `SELECT count(*) FROM `+string(t), []any{}
		if environmentID != 0 {
			query, args = query+` WHERE environment_id = ?`, []any{environmentID}
		}
		if err := q.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
			return c, fmt.Errorf("count %s: %w", t, err)
		}
		c.add(t, n)
	}
	return c, nil
}
