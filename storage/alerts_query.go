package storage

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Alert is one row of alerts (docs/operations.md, "Alerts"): a condition of
// a kind on a subject, from when it started until it ended.
type Alert struct {
	ID          string
	Kind        string
	SubjectKind string
	SubjectID   string
	// Severity is "critical" or "warning".
	Severity string
	// Detail is the condition's words when it started; never a secret.
	Detail   string
	OpenedAt time.Time
	// ResolvedAt is zero while the alert is open.
	ResolvedAt time.Time
	// LastSentAt is when its last fired or repeated message was queued.
	LastSentAt time.Time
	// AckedAt is zero unless acknowledged (no repeats until it resolves).
	AckedAt time.Time
}

const alertCols = `id, kind, subject_kind, subject_id, severity, detail, opened_at, resolved_at, last_sent_at, acked_at`

func scanAlert(sc interface{ Scan(...any) error }) (Alert, error) {
	var a Alert
	var opened, sent int64
	var resolved, acked sql.NullInt64
	if err := sc.Scan(&a.ID, &a.Kind, &a.SubjectKind, &a.SubjectID, &a.Severity, &a.Detail, &opened, &resolved, &sent, &acked); err != nil {
		return Alert{}, err
	}
	a.OpenedAt, a.LastSentAt = time.UnixMilli(opened).UTC(), time.UnixMilli(sent).UTC()
	a.ResolvedAt, a.AckedAt = fromMS(resolved), fromMS(acked)
	return a, nil
}

func queryAlerts(ctx context.Context, q Querier, query string, args ...any) ([]Alert, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	defer rows.Close()
	var out []Alert
	for rows.Next() {
		a, err := scanAlert(rows)
		if err != nil {
			return nil, fmt.Errorf("read alerts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	return out, nil
}

// OpenAlertFor returns the open alert of kind on the subject; ErrNotFound
// when none is open.
func OpenAlertFor(ctx context.Context, q Querier, kind, subjectKind, subjectID string) (Alert, error) {
	a, err := scanAlert(q.QueryRowContext(ctx, `SELECT `+alertCols+` FROM alerts
		 WHERE kind = ? AND subject_kind = ? AND subject_id = ? AND resolved_at IS NULL`, kind, subjectKind, subjectID))
	if err != nil {
		if err = notFound(err); err == ErrNotFound {
			return Alert{}, err
		}
		return Alert{}, fmt.Errorf("read open alert: %w", err)
	}
	return a, nil
}

// AlertByID returns the alert id; ErrNotFound when there is none.
func AlertByID(ctx context.Context, q Querier, id string) (Alert, error) {
	a, err := scanAlert(q.QueryRowContext(ctx, `SELECT `+alertCols+` FROM alerts WHERE id = ?`, id))
	if err != nil {
		if err = notFound(err); err == ErrNotFound {
			return Alert{}, err
		}
		return Alert{}, fmt.Errorf("read alert: %w", err)
	}
	return a, nil
}

// InsertAlert opens a; ErrConflict when an alert of its kind on its
// subject is already open, or its id is taken.
func InsertAlert(ctx context.Context, q Querier, a Alert) error {
	_, err := q.ExecContext(ctx, `INSERT INTO alerts (`+alertCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.Kind, a.SubjectKind, a.SubjectID, a.Severity, a.Detail, ms(a.OpenedAt), msPtr(a.ResolvedAt), ms(a.LastSentAt), msPtr(a.AckedAt))
	if isUniqueViolation(err) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("insert alert: %w", err)
	}
	return nil
}

// ResolveAlert ends the open alert id at at; ErrNotFound when it is not
// open.
func ResolveAlert(ctx context.Context, q Querier, id string, at time.Time) error {
	return alertUpdate(ctx, q, `UPDATE alerts SET resolved_at = ? WHERE id = ? AND resolved_at IS NULL`, ms(at), id)
}

// SetAlertSent records that the open alert id's fired or repeated message
// was queued at at; repeats count from it.
func SetAlertSent(ctx context.Context, q Querier, id string, at time.Time) error {
	return alertUpdate(ctx, q, `UPDATE alerts SET last_sent_at = ? WHERE id = ? AND resolved_at IS NULL`, ms(at), id)
}

// AckAlert acknowledges the open alert id: no repeats until it resolves
// (`admin alerts ack`). ErrNotFound when it is not open.
func AckAlert(ctx context.Context, q Querier, id string, at time.Time) error {
	return alertUpdate(ctx, q, `UPDATE alerts SET acked_at = COALESCE(acked_at, ?) WHERE id = ? AND resolved_at IS NULL`, ms(at), id)
}

func alertUpdate(ctx context.Context, q Querier, query string, args ...any) error {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("update alert: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update alert: %w", err)
	} else if n == 0 {
		return ErrNotFound
	}
	return nil
}

// MuteAlertKind mutes kind until until (`admin alerts mute`; the caller
// bounds it to 24 h): no fired or repeated message is queued meanwhile.
func MuteAlertKind(ctx context.Context, q Querier, kind string, until, now time.Time) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO alert_mutes (kind, until_at, muted_at) VALUES (?, ?, ?)
		 ON CONFLICT (kind) DO UPDATE SET until_at = excluded.until_at, muted_at = excluded.muted_at`, kind, ms(until), ms(now)); err != nil {
		return fmt.Errorf("mute alert kind: %w", err)
	}
	return nil
}

// AlertKindMuted reports whether kind is muted at now.
func AlertKindMuted(ctx context.Context, q Querier, kind string, now time.Time) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM alert_mutes WHERE kind = ? AND until_at > ?`, kind, ms(now)).Scan(&n); err != nil {
		return false, fmt.Errorf("read alert mutes: %w", err)
	}
	return n > 0, nil
}

// OpenAlerts returns every open alert, oldest first.
func OpenAlerts(ctx context.Context, q Querier) ([]Alert, error) {
	return queryAlerts(ctx, q, `SELECT `+alertCols+` FROM alerts WHERE resolved_at IS NULL ORDER BY opened_at, id`)
}

// OpenAlertCounts counts open alerts by severity.
func OpenAlertCounts(ctx context.Context, q Querier) (map[string]int, error) {
	rows, err := q.QueryContext(ctx, `SELECT severity, COUNT(*) FROM alerts WHERE resolved_at IS NULL GROUP BY severity`)
	if err != nil {
		return nil, fmt.Errorf("count open alerts: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var sev string
		var n int
		if err := rows.Scan(&sev, &n); err != nil {
			return nil, fmt.Errorf("count open alerts: %w", err)
		}
		out[sev] = n
	}
	return out, rows.Err()
}

// repeatWhere selects open, unacknowledged alerts with the time their
// next repeat is due as due_at: critical every crit, warning every warn,
// and not before their kind's mute ends.
const repeatWhere = `FROM (SELECT ` + alertCols + `,
		MAX(last_sent_at + CASE severity WHEN 'critical' THEN ? ELSE ? END,
		    COALESCE((SELECT until_at FROM alert_mutes m WHERE m.kind = a.kind AND m.until_at > ?), 0)) AS due_at
	  FROM alerts a WHERE resolved_at IS NULL AND acked_at IS NULL)`

// AlertsRepeatDue returns up to limit open, unacknowledged alerts whose
// kind is not muted and whose repeat is due at now: last sent crit (critical) or warn (warning)
// ago or more; oldest due first.
func AlertsRepeatDue(ctx context.Context, q Querier, now time.Time, crit, warn time.Duration, limit int) ([]Alert, error) {
	return queryAlerts(ctx, q, `SELECT `+alertCols+` `+repeatWhere+` WHERE due_at <= ? ORDER BY due_at, id LIMIT ?`,
		crit.Milliseconds(), warn.Milliseconds(), ms(now), ms(now), limit)
}

// NextAlertRepeat returns when the next repeat falls due (it may be past);
// the zero time when no alert would repeat.
func NextAlertRepeat(ctx context.Context, q Querier, now time.Time, crit, warn time.Duration) (time.Time, error) {
	var at sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MIN(due_at) `+repeatWhere, crit.Milliseconds(), warn.Milliseconds(), ms(now)).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("read next alert repeat: %w", err)
	}
	return fromMS(at), nil
}

// OutboxRow is one message to one sink in alert_outbox (docs/operations.md,
// "Alerts", delivery).
type OutboxRow struct {
	Seq int64
	// ID is the message's stable id.
	ID string
	// AlertID is empty for a coalesced message or a test.
	AlertID  string
	Sink     string
	Event    string
	Kind     string
	Severity string
	// Subjects is the JSON array of the message's subjects.
	Subjects  string
	More      int
	Coalesced bool
	Title     string
	Body      string
	// At is when the condition changed.
	At        time.Time
	CreatedAt time.Time
	Attempts  int
	// FirstAttemptAt is zero until the first send ended (delivered or not).
	FirstAttemptAt time.Time
	NextAttemptAt  time.Time
	DeliveredAt    time.Time
	ExpiredAt      time.Time
	MergedInto     string
	// LastError is the last failure's kind (timeout, refused, permanent,
	// expired); never a URL or a secret.
	LastError string
}

const outboxCols = `seq, id, COALESCE(alert_id, ''), sink, event, kind, severity, subjects, more, coalesced, title, body, at, created_at,
	attempts, first_attempt_at, next_attempt_at, delivered_at, expired_at, COALESCE(merged_into, ''), last_error`

func scanOutbox(sc interface{ Scan(...any) error }) (OutboxRow, error) {
	var r OutboxRow
	var at, created, next int64
	var coalesced int
	var first, delivered, expired sql.NullInt64
	if err := sc.Scan(&r.Seq, &r.ID, &r.AlertID, &r.Sink, &r.Event, &r.Kind, &r.Severity, &r.Subjects, &r.More, &coalesced, &r.Title, &r.Body,
		&at, &created, &r.Attempts, &first, &next, &delivered, &expired, &r.MergedInto, &r.LastError); err != nil {
		return OutboxRow{}, err
	}
	r.Coalesced = coalesced != 0
	r.At, r.CreatedAt, r.NextAttemptAt = time.UnixMilli(at).UTC(), time.UnixMilli(created).UTC(), time.UnixMilli(next).UTC()
	r.FirstAttemptAt, r.DeliveredAt, r.ExpiredAt = fromMS(first), fromMS(delivered), fromMS(expired)
	return r, nil
}

func queryOutbox(ctx context.Context, q Querier, query string, args ...any) ([]OutboxRow, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read alert outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxRow
	for rows.Next() {
		r, err := scanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("read alert outbox: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read alert outbox: %w", err)
	}
	return out, nil
}

// InsertOutbox queues r (its Seq is assigned; Attempts, FirstAttemptAt and
// ExpiredAt are taken as given, so a message held in memory while storage
// refused writes is recorded with its delivery). ErrConflict when its id is
// taken.
func InsertOutbox(ctx context.Context, q Querier, r OutboxRow) error {
	var alertID any
	if r.AlertID != "" {
		alertID = r.AlertID
	}
	_, err := q.ExecContext(ctx, `INSERT INTO alert_outbox (id, alert_id, sink, event, kind, severity, subjects, more, coalesced, title, body, at, created_at,
		 attempts, first_attempt_at, next_attempt_at, delivered_at, expired_at, last_error)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, alertID, r.Sink, r.Event, r.Kind, r.Severity, r.Subjects, r.More, boolInt(r.Coalesced), r.Title, r.Body, ms(r.At), ms(r.CreatedAt),
		r.Attempts, msPtr(r.FirstAttemptAt), ms(r.NextAttemptAt), msPtr(r.DeliveredAt), msPtr(r.ExpiredAt), r.LastError)
	if isUniqueViolation(err) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("insert alert outbox: %w", err)
	}
	return nil
}

const outboxPending = `delivered_at IS NULL AND expired_at IS NULL AND merged_into IS NULL`

// PendingOutbox returns up to limit of sink's undelivered, unexpired,
// unmerged messages in delivery order.
func PendingOutbox(ctx context.Context, q Querier, sink string, limit int) ([]OutboxRow, error) {
	return queryOutbox(ctx, q, `SELECT `+outboxCols+` FROM alert_outbox WHERE sink = ? AND `+outboxPending+`
		 ORDER BY COALESCE(ord, seq), seq LIMIT ?`, sink, limit)
}

// OutboxByID returns the message id; ErrNotFound when there is none.
func OutboxByID(ctx context.Context, q Querier, id string) (OutboxRow, error) {
	rs, err := queryOutbox(ctx, q, `SELECT `+outboxCols+` FROM alert_outbox WHERE id = ?`, id)
	if err != nil {
		return OutboxRow{}, err
	}
	if len(rs) == 0 {
		return OutboxRow{}, ErrNotFound
	}
	return rs[0], nil
}

// OutboxDelivered records the message id delivered at at.
func OutboxDelivered(ctx context.Context, q Querier, id string, at time.Time) error {
	if _, err := q.ExecContext(ctx, `UPDATE alert_outbox SET delivered_at = ?, attempts = attempts + 1,
		 first_attempt_at = COALESCE(first_attempt_at, ?), last_error = '' WHERE id = ?`, ms(at), ms(at), id); err != nil {
		return fmt.Errorf("update alert outbox: %w", err)
	}
	return nil
}

// OutboxFailed records a failed send of the message id at at: its next
// attempt at next, and the failure's kind. A permanent failure expires it
// at once (expire true).
func OutboxFailed(ctx context.Context, q Querier, id string, at, next time.Time, errKind string, expire bool) error {
	var expired any
	if expire {
		expired = ms(at)
	}
	if _, err := q.ExecContext(ctx, `UPDATE alert_outbox SET attempts = attempts + 1, first_attempt_at = COALESCE(first_attempt_at, ?),
		 next_attempt_at = ?, last_error = ?, expired_at = ? WHERE id = ?`, ms(at), ms(next), errKind, expired, id); err != nil {
		return fmt.Errorf("update alert outbox: %w", err)
	}
	return nil
}

// ExpireOutbox expires every pending message created at or before before
// (the delivery age, docs/operations.md "Alerts") and returns the sinks
// that had one, each once, sorted.
func ExpireOutbox(ctx context.Context, q Querier, before, now time.Time) ([]string, error) {
	rows, err := q.QueryContext(ctx, `UPDATE alert_outbox SET expired_at = ?, last_error = CASE last_error WHEN '' THEN 'expired' ELSE last_error END
		 WHERE `+outboxPending+` AND created_at <= ? RETURNING sink`, ms(now), ms(before))
	if err != nil {
		return nil, fmt.Errorf("expire alert outbox: %w", err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("expire alert outbox: %w", err)
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out, rows.Err()
}

// MergeOutbox queues merged, a coalesced message (a storm, or the rate
// cap's "n more"), in the place of its first member, and marks members
// (ids of pending messages of merged's sink) merged into it: they are never
// sent themselves. merged.CreatedAt should be the oldest member's, so the
// delivery age counts from the first condition.
func MergeOutbox(ctx context.Context, q Querier, merged OutboxRow, members []string) error {
	if len(members) == 0 {
		return nil
	}
	merged.Coalesced = true
	if err := InsertOutbox(ctx, q, merged); err != nil {
		return err
	}
	var first sql.NullInt64
	ph := strings.Repeat(",?", len(members))[1:]
	args := make([]any, 0, len(members)+1)
	args = append(args, merged.Sink)
	for _, m := range members {
		args = append(args, m)
	}
	if err := q.QueryRowContext(ctx, `SELECT MIN(COALESCE(ord, seq)) FROM alert_outbox WHERE sink = ? AND id IN (`+ph+`)`, args...).Scan(&first); err != nil {
		return fmt.Errorf("merge alert outbox: %w", err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE alert_outbox SET ord = ? WHERE id = ?`, first, merged.ID); err != nil {
		return fmt.Errorf("merge alert outbox: %w", err)
	}
	args = append([]any{merged.ID}, args...)
	if _, err := q.ExecContext(ctx, `UPDATE alert_outbox SET merged_into = ? WHERE sink = ? AND `+outboxPending+` AND id IN (`+ph+`)`, args...); err != nil {
		return fmt.Errorf("merge alert outbox: %w", err)
	}
	return nil
}

// OutboxSentSince counts sink's messages whose first send ended after
// since (the rate cap) and returns the oldest such time.
func OutboxSentSince(ctx context.Context, q Querier, sink string, since time.Time) (int, time.Time, error) {
	var n int
	var oldest sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*), MIN(first_attempt_at) FROM alert_outbox WHERE sink = ? AND first_attempt_at > ?`,
		sink, ms(since)).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("read alert outbox: %w", err)
	}
	return n, fromMS(oldest), nil
}

// OutboxLastSent returns when sink's latest first send ended; zero when
// none.
func OutboxLastSent(ctx context.Context, q Querier, sink string) (time.Time, error) {
	var at sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MAX(first_attempt_at) FROM alert_outbox WHERE sink = ?`, sink).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("read alert outbox: %w", err)
	}
	return fromMS(at), nil
}

// OutboxPendingCount counts the messages waiting for delivery, every sink.
func OutboxPendingCount(ctx context.Context, q Querier) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM alert_outbox WHERE `+outboxPending).Scan(&n); err != nil {
		return 0, fmt.Errorf("count alert outbox: %w", err)
	}
	return n, nil
}

// OutboxOldestPending returns when the oldest pending message was created;
// zero when none (the delivery age's next expiry).
func OutboxOldestPending(ctx context.Context, q Querier) (time.Time, error) {
	var at sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MIN(created_at) FROM alert_outbox WHERE `+outboxPending).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("read alert outbox: %w", err)
	}
	return fromMS(at), nil
}

// OutboxFailingSinks returns the sinks whose latest expired message is
// newer than their latest delivered one: the alert-delivery-failing
// condition (docs/operations.md, "Alerts", delivery).
func OutboxFailingSinks(ctx context.Context, q Querier) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT sink FROM alert_outbox GROUP BY sink
		 HAVING MAX(expired_at) IS NOT NULL AND MAX(expired_at) > COALESCE(MAX(delivered_at), 0) ORDER BY sink`)
	if err != nil {
		return nil, fmt.Errorf("read alert outbox: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("read alert outbox: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
