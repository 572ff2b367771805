package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// RequestLatencyBounds are the upper bounds of the stored latency buckets
// (request_hours.latency_buckets; docs/operations.md, "Operations report"),
// the same as the daemon's /metrics histogram. A row's bucket slice has one
// more entry: requests slower than the last bound. Changing the bounds
// changes the meaning of stored rows: add a migration that rewrites them.
var RequestLatencyBounds = []time.Duration{
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

// LatencyBucket returns the index of d's bucket in a RequestHour's Buckets:
// the first bound d does not exceed, len(RequestLatencyBounds) above them all.
func LatencyBucket(d time.Duration) int {
	return sort.Search(len(RequestLatencyBounds), func(i int) bool { return d <= RequestLatencyBounds[i] })
}

// LatencyQuantile returns the q quantile (0 < q ≤ 1) of the requests counted
// in buckets, as the upper bound of the bucket holding the request of rank
// ceil(q·total): no request in that bucket was slower. over is true when
// that request is in the overflow bucket (slower than the last bound, which
// is then returned). ok is false when buckets count no request.
func LatencyQuantile(buckets []int64, q float64) (d time.Duration, over, ok bool) {
	var total int64
	for _, n := range buckets {
		total += n
	}
	if total == 0 {
		return 0, false, false
	}
	rank := int64(q * float64(total))
	if float64(rank) < q*float64(total) {
		rank++
	}
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, n := range buckets {
		seen += n
		if seen >= rank {
			if i >= len(RequestLatencyBounds) {
				return RequestLatencyBounds[len(RequestLatencyBounds)-1], true, true
			}
			return RequestLatencyBounds[i], false, true
		}
	}
	return RequestLatencyBounds[len(RequestLatencyBounds)-1], true, true
}

// RequestHour is one hour's requests of one route group (request_hours).
type RequestHour struct {
	// HourStart is the UTC hour the requests were served in.
	HourStart time.Time
	// Group is the route group (public, probe, admin, ingest, console) or
	// "unrouted" for paths no group owns.
	Group string
	// Requests counts requests; ServerErrors those answered 5xx.
	Requests, ServerErrors int64
	// Buckets counts requests per latency bucket: len(RequestLatencyBounds)+1
	// entries (see LatencyBucket).
	Buckets []int64
}

// ProcessHour is the process's evidence written with an hour's request rows
// (process_hours).
type ProcessHour struct {
	HourStart time.Time
	// Wall and CPU are the wall time and process CPU time since this
	// process's previous row (or its start), stored in milliseconds.
	Wall, CPU time.Duration
	// DBBytes and WALBytes are the database and WAL file sizes in bytes
	// when the row was written.
	DBBytes, WALBytes int64
	RecordedAt        time.Time
}

// ErrBadBuckets is returned by AddOpsHour for a RequestHour whose Buckets
// do not have len(RequestLatencyBounds)+1 entries.
var ErrBadBuckets = errors.New("request hour: wrong number of latency buckets")

// AddOpsHour adds p and reqs to the stored rows of their hours, in tx (a
// writer unit): counts, buckets, wall and CPU time are added to a row the
// hour already has (a restart within the hour), sizes and RecordedAt are
// replaced. Errors: ErrBadBuckets; database faults.
func AddOpsHour(ctx context.Context, tx Querier, p ProcessHour, reqs []RequestHour) error {
	for _, r := range reqs {
		if len(r.Buckets) != len(RequestLatencyBounds)+1 {
			return ErrBadBuckets
		}
		var stored string
		merged := append([]int64(nil), r.Buckets...)
		err := tx.QueryRowContext(ctx, `SELECT latency_buckets FROM request_hours WHERE hour_start = ? AND route_group = ?`,
			ms(r.HourStart), r.Group).Scan(&stored)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read request hour: %w", err)
		default:
			var old []int64
			if err := json.Unmarshal([]byte(stored), &old); err != nil || len(old) != len(merged) {
				return fmt.Errorf("read request hour: %w", ErrBadBuckets)
			}
			for i := range merged {
				merged[i] += old[i]
			}
		}
		b, _ := json.Marshal(merged)
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO request_hours (hour_start, route_group, requests, server_errors, latency_buckets) VALUES (?, ?, ?, ?, ?)
			 ON CONFLICT (hour_start, route_group) DO UPDATE SET requests = requests + excluded.requests,
			     server_errors = server_errors + excluded.server_errors, latency_buckets = excluded.latency_buckets`,
			ms(r.HourStart), r.Group, r.Requests, r.ServerErrors, string(b)); err != nil {
			return fmt.Errorf("write request hour: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO process_hours (hour_start, wall_ms, cpu_ms, db_bytes, wal_bytes, recorded_at) VALUES (?, ?, ?, ?, ?, ?)
		 ON CONFLICT (hour_start) DO UPDATE SET wall_ms = wall_ms + excluded.wall_ms, cpu_ms = cpu_ms + excluded.cpu_ms,
		     db_bytes = excluded.db_bytes, wal_bytes = excluded.wal_bytes, recorded_at = excluded.recorded_at`,
		ms(p.HourStart), p.Wall.Milliseconds(), p.CPU.Milliseconds(), p.DBBytes, p.WALBytes, ms(p.RecordedAt)); err != nil {
		return fmt.Errorf("write process hour: %w", err)
	}
	return nil
}

// RequestHoursSince returns the request rows of hours starting at or after
// since, oldest first.
func RequestHoursSince(ctx context.Context, q Querier, since time.Time) ([]RequestHour, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT hour_start, route_group, requests, server_errors, latency_buckets FROM request_hours
		 WHERE hour_start >= ? ORDER BY hour_start, route_group`, ms(since))
	if err != nil {
		return nil, fmt.Errorf("read request hours: %w", err)
	}
	defer rows.Close()
	var out []RequestHour
	for rows.Next() {
		var r RequestHour
		var hour int64
		var b string
		if err := rows.Scan(&hour, &r.Group, &r.Requests, &r.ServerErrors, &b); err != nil {
			return nil, fmt.Errorf("read request hours: %w", err)
		}
		if err := json.Unmarshal([]byte(b), &r.Buckets); err != nil || len(r.Buckets) != len(RequestLatencyBounds)+1 {
			return nil, fmt.Errorf("read request hours: %w", ErrBadBuckets)
		}
		r.HourStart = time.UnixMilli(hour).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read request hours: %w", err)
	}
	return out, nil
}

// ProcessHoursSince returns the process rows of hours starting at or after
// since, oldest first.
func ProcessHoursSince(ctx context.Context, q Querier, since time.Time) ([]ProcessHour, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT hour_start, wall_ms, cpu_ms, db_bytes, wal_bytes, recorded_at FROM process_hours
		 WHERE hour_start >= ? ORDER BY hour_start`, ms(since))
	if err != nil {
		return nil, fmt.Errorf("read process hours: %w", err)
	}
	defer rows.Close()
	var out []ProcessHour
	for rows.Next() {
		var p ProcessHour
		var hour, wall, cpu, rec int64
		if err := rows.Scan(&hour, &wall, &cpu, &p.DBBytes, &p.WALBytes, &rec); err != nil {
			return nil, fmt.Errorf("read process hours: %w", err)
		}
		p.HourStart, p.RecordedAt = time.UnixMilli(hour).UTC(), time.UnixMilli(rec).UTC()
		p.Wall, p.CPU = time.Duration(wall)*time.Millisecond, time.Duration(cpu)*time.Millisecond
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read process hours: %w", err)
	}
	return out, nil
}

// Sizes returns the database file's and its WAL's sizes in bytes now (0 for
// a file that does not exist).
func (db *DB) Sizes() (dbBytes, walBytes int64) {
	if fi, err := os.Stat(db.Path); err == nil {
		dbBytes = fi.Size()
	}
	if fi, err := os.Stat(db.Path + "-wal"); err == nil {
		walBytes = fi.Size()
	}
	return dbBytes, walBytes
}

// LoopEvidence is what the stored evidence says about one background loop
// over a span (docs/operations.md, "Operations report").
type LoopEvidence struct {
	// Name is the loop (retention, costs, reaper, jobs).
	Name string
	// Runs, Failures and Backlog are the loop's figures; Counts says what
	// each counts for this loop.
	Runs, Failures, Backlog int64
	Counts                  string
}

// Loop evidence descriptions: what Runs, Failures and Backlog count.
const (
	retentionCounts = "runs: retention passes; failures: passes with an error; backlog: 1 if the newest pass left detail to fold"
	costsCounts     = "runs: stored reconciliation snapshots; failures: not stored (a failed pass stores no snapshot); backlog: none"
	reaperCounts    = "runs: droplets destroyed or (dry run) would be; failures: reaper warnings; backlog: deployments held now"
	jobsCounts      = "runs: jobs finished; failures: jobs failed; backlog: jobs queued now"
)

// LoopEvidenceSince reads the loops' stored evidence from since to now:
// retention_runs, cost_snapshots, the reaper's lifecycle events and held
// deployments, and jobs.
func LoopEvidenceSince(ctx context.Context, q Querier, since, now time.Time) ([]LoopEvidence, error) {
	s, n := ms(since), ms(now)
	type query struct {
		name, counts, sql string
		args              []any
	}
	queries := []query{
		{"retention", retentionCounts,
			`SELECT count(*), coalesce(sum(error <> ''), 0),
			     coalesce((SELECT backlog_pending FROM retention_runs WHERE started_at >= ? ORDER BY started_at DESC, id DESC LIMIT 1), 0)
			 FROM retention_runs WHERE started_at >= ?`, []any{s, s}},
		{"costs", costsCounts, `SELECT count(*), 0, 0 FROM cost_snapshots WHERE started_at >= ?`, []any{s}},
		{"reaper", reaperCounts,
			`SELECT coalesce(sum(kind IN ('reaper-destroyed', 'reaper-would-destroy')), 0), coalesce(sum(kind = 'reaper-warning'), 0),
			     (SELECT count(*) FROM deployments WHERE reaper_hold_until > ?)
			 FROM lifecycle_events WHERE occurred_at >= ? AND kind IN ('reaper-destroyed', 'reaper-would-destroy', 'reaper-warning')`,
			[]any{n, s}},
		{"jobs", jobsCounts,
			`SELECT count(*), coalesce(sum(status = 'failed'), 0), (SELECT count(*) FROM jobs WHERE status = 'queued')
			 FROM jobs WHERE finished_at >= ?`, []any{s}},
	}
	out := make([]LoopEvidence, 0, len(queries))
	for _, qu := range queries {
		e := LoopEvidence{Name: qu.name, Counts: qu.counts}
		if err := q.QueryRowContext(ctx, qu.sql, qu.args...).Scan(&e.Runs, &e.Failures, &e.Backlog); err != nil {
			return nil, fmt.Errorf("read %s evidence: %w", qu.name, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// QuotaEventsSince counts the quota-exceeded lifecycle events (one per
// quota, deployment or environment and clock hour; docs/operations.md,
// "Quotas") since since, by quota name.
func QuotaEventsSince(ctx context.Context, q Querier, since time.Time) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT id FROM lifecycle_events WHERE kind = 'quota-exceeded' AND occurred_at >= ?`, ms(since))
	if err != nil {
		return nil, fmt.Errorf("read quota events: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read quota events: %w", err)
		}
		// The id is quota:<quota>:<environment>:<deployment>:<hour>.
		parts := strings.SplitN(id, ":", 3)
		if len(parts) < 3 || parts[0] != "quota" {
			continue
		}
		out[parts[1]]++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read quota events: %w", err)
	}
	return out, nil
}
