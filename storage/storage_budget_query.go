package storage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrStorageQuota is returned by CheckEnvironmentStorage when the
// environment holds more charged bytes than its budget (docs/operations.md,
// "Quotas").
var ErrStorageQuota = errors.New("environment storage budget reached")

// Charged row sizes (bytes): what one row of each table counted against an
// environment's storage budget costs beyond the bytes of its text columns
// (docs/operations.md, "Quotas"). Each is the row's fixed-width part plus
// its share of b-tree pages and index entries, measured with SQLite's dbstat
// on a real file by TestChargedBytesTrackTheFile (the charge stays within
// the bounds that test states), rounded up.
const (
	// WindowRowBytes is one telemetry_windows row with all 13 metrics
	// (65 numbers, most of them 8-byte floats): windows without some
	// metrics are charged the same.
	WindowRowBytes = 560
	// ReceiptRowBytes is one telemetry_receipts row (a 32-byte hash, two
	// times).
	ReceiptRowBytes = 80
	// SessionRowBytes is one telemetry_sessions row with its terminal
	// summary (JSON of up to 13 metrics, about 1 KB), written later by
	// retention and charged now, so the finalizer never moves the counter.
	// A summarized row outgrows what a WITHOUT ROWID page keeps in place
	// and takes an overflow page of its own: 4.7 KB measured.
	SessionRowBytes = 4800
	// HourlyRowBytes is one telemetry_hourly row (78 numbers).
	HourlyRowBytes = 680
	// AnomalyRowBytes is one telemetry_anomalies row.
	AnomalyRowBytes = 48
	// RunRowBytes is one runs row with its two index entries.
	RunRowBytes = 160
	// ArtifactRowBytes is one run_artifacts row with its unique index
	// entry (which repeats the run id and name: charged twice below); a
	// row of more than a quarter page is charged its page share
	// (pageShare).
	ArtifactRowBytes = 64
	// EventRowBytes is one producer lifecycle_events row (a 32-byte body
	// hash, its index entries).
	EventRowBytes = 112
)

// chargeSQL is, per counted table, the SQL expression of one row's charge:
// the constant above plus the bytes of its text columns, exactly what the
// Go functions below compute before the row is written. where limits a
// table to the rows that count (producer events only).
var chargeSQL = []struct {
	table, expr, where string
}{
	{"telemetry_windows", charge(WindowRowBytes, "deployment_id", "session_id"), ""},
	{"telemetry_receipts", charge(ReceiptRowBytes, "deployment_id", "session_id"), ""},
	{"telemetry_sessions", charge(SessionRowBytes, "deployment_id", "id"), ""},
	{"telemetry_hourly", charge(HourlyRowBytes, "deployment_id", "session_id"), ""},
	{"telemetry_anomalies", charge(AnomalyRowBytes, "deployment_id", "session_id", "kind"), ""},
	{"runs", charge(RunRowBytes, "run_id", "deployment_id", "suite", "status", "commit_sha"), ""},
	{"run_artifacts", pageShareSQL(charge(ArtifactRowBytes, "run_id", "run_id", "name", "name", "media_type", "sha256", "locator_kind",
		"coalesce(locator_url, '')", "coalesce(locator_id, '')")), ""},
	{"lifecycle_events", charge(EventRowBytes, "id", "coalesce(deployment_id, '')", "kind", "reason", "message"), "body_sha256 IS NOT NULL"},
}

// charge is the SQL expression constant + the byte length of each column.
func charge(constant int, cols ...string) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(constant))
	for _, c := range cols {
		fmt.Fprintf(&b, " + length(CAST(%s AS BLOB))", c)
	}
	return b.String()
}

// Page packing of large rows (bytes): SQLite stores whole rows in a
// 4,096-byte page (4,000 of it for rows, headers aside), so a row of more
// than a quarter page takes the share of the page it leaves no room beside:
// a 2,100-byte artifact row (a 2,000-character URL) takes a page of its own.
// Artifacts are the one counted row whose text can be that long.
const (
	pageBytes      = 4096
	pageRowBytes   = 4000
	pageShareAbove = pageBytes / 4
)

// pageShare is the bytes a row of b bytes takes with its page's unused rest.
func pageShare(b int64) int64 {
	if b <= pageShareAbove {
		return b
	}
	return pageBytes / max(1, pageRowBytes/b)
}

// pageShareSQL is pageShare of the SQL expression expr.
func pageShareSQL(expr string) string {
	return fmt.Sprintf("(CASE WHEN (%[1]s) <= %[2]d THEN (%[1]s) ELSE %[3]d / max(1, %[4]d / (%[1]s)) END)", expr, pageShareAbove, pageBytes, pageRowBytes)
}

// chargeExpr returns the charge expression of table (one of chargeSQL's).
func chargeExpr(table string) string {
	for _, c := range chargeSQL {
		if c.table == table {
			return c.expr
		}
	}
	panic("storage: no charge for table " + table)
}

// WindowCharge is the charged bytes of one accepted telemetry window's
// detail row and receipt (bytes).
func WindowCharge(deploymentID, sessionID string) int64 {
	return windowRowCharge(deploymentID, sessionID) + receiptCharge(deploymentID, sessionID)
}

func windowRowCharge(dep, sess string) int64 { return int64(WindowRowBytes + len(dep) + len(sess)) }
func receiptCharge(dep, sess string) int64   { return int64(ReceiptRowBytes + len(dep) + len(sess)) }
func sessionCharge(dep, sess string) int64   { return int64(SessionRowBytes + len(dep) + len(sess)) }
func hourlyCharge(dep, sess string) int64    { return int64(HourlyRowBytes + len(dep) + len(sess)) }
func anomalyCharge(dep, sess, kind string) int64 {
	return int64(AnomalyRowBytes + len(dep) + len(sess) + len(kind))
}

// RunCharge is the charged bytes of run r with its artifacts (bytes).
func RunCharge(r Run) int64 {
	n := int64(RunRowBytes + len(r.RunID) + len(r.DeploymentID) + len(r.Suite) + len(r.Status) + len(r.CommitSHA))
	for _, a := range r.Artifacts {
		n += pageShare(int64(ArtifactRowBytes + 2*len(r.RunID) + 2*len(a.Name) + len(a.MediaType) + len(a.SHA256) + len(a.LocatorKind) +
			len(a.LocatorURL) + len(a.LocatorID)))
	}
	return n
}

// ProducerEventCharge is the charged bytes of a producer lifecycle event
// as RecordProducerEvent stores it (bytes).
func ProducerEventCharge(ev LifecycleEvent) int64 {
	return int64(EventRowBytes + len(ev.ID) + len(ev.DeploymentID) + len(ev.Kind) + len(ev.Reason) + len(ev.Message))
}

// addEnvironmentStorage moves the environment's charged bytes by delta
// (negative when rows go), in the caller's unit: the counter and the rows
// it counts always commit together.
func addEnvironmentStorage(ctx context.Context, q Querier, environmentID, delta int64) error {
	if delta == 0 {
		return nil
	}
	if _, err := q.ExecContext(ctx, `UPDATE environments SET storage_bytes = max(0, storage_bytes + ?) WHERE id = ?`,
		delta, environmentID); err != nil {
		return fmt.Errorf("count environment storage: %w", err)
	}
	return nil
}

// CheckEnvironmentStorage reads the environment's charged bytes (a primary
// key read of environments.storage_bytes) and returns them with
// ErrStorageQuota when they exceed budget (bytes; 0 is unlimited). Called in
// a writer unit after its rows were written, so a refusal rolls the unit
// back whole (docs/operations.md, "Quotas"). Errors: ErrNotFound for an
// unknown environment.
func CheckEnvironmentStorage(ctx context.Context, q Querier, environmentID, budget int64) (int64, error) {
	var n int64
	if err := q.QueryRowContext(ctx, `SELECT storage_bytes FROM environments WHERE id = ?`, environmentID).Scan(&n); err != nil {
		return 0, notFound(err)
	}
	if budget > 0 && n > budget {
		return n, ErrStorageQuota
	}
	return n, nil
}

// RecountEnvironmentStorage sums the charges of every counted row of the
// environment: what environments.storage_bytes must equal. It reads every
// row of the environment, so it is for tests and audits only, never a
// request path (migration 0019 backfilled the counter with the same sums).
func RecountEnvironmentStorage(ctx context.Context, q Querier, environmentID int64) (int64, error) {
	var total int64
	for _, c := range chargeSQL {
		query := `SELECT coalesce(sum(` + c.expr + `), 0) FROM ` + c.table + ` WHERE environment_id = ?`
		if c.where != "" {
			query += ` AND ` + c.where
		}
		var n int64
		if err := q.QueryRowContext(ctx, query, environmentID).Scan(&n); err != nil {
			return 0, fmt.Errorf("recount %s: %w", c.table, err)
		}
		total += n
	}
	return total, nil
}

// ChargeSQL returns the SQL expression of one row's charge in table (a
// counted table; it panics for another), for tests that compare the
// counter with the rows.
func ChargeSQL(table string) string { return chargeExpr(table) }
