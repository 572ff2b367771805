package storage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The queries behind the operator's alert surfaces (docs/operations.md,
// "Alerts": `chalupa admin alerts`, ack, mute, and admin status's sinks).

// RecentAlerts returns up to limit resolved alerts, the latest resolved
// first.
func RecentAlerts(ctx context.Context, q Querier, limit int) ([]Alert, error) {
	return queryAlerts(ctx, q, `SELECT `+alertCols+` FROM alerts WHERE resolved_at IS NOT NULL ORDER BY resolved_at DESC, id DESC LIMIT ?`, limit)
}

// AlertMute is one muted kind (`admin alerts mute`).
type AlertMute struct {
	Kind string
	// Until is when the mute ends; MutedAt when it was set.
	Until, MutedAt time.Time
}

// AlertMutes returns the mutes in force at now, by kind.
func AlertMutes(ctx context.Context, q Querier, now time.Time) ([]AlertMute, error) {
	rows, err := q.QueryContext(ctx, `SELECT kind, until_at, muted_at FROM alert_mutes WHERE until_at > ? ORDER BY kind`, ms(now))
	if err != nil {
		return nil, fmt.Errorf("read alert mutes: %w", err)
	}
	defer rows.Close()
	var out []AlertMute
	for rows.Next() {
		var m AlertMute
		var until, at int64
		if err := rows.Scan(&m.Kind, &until, &at); err != nil {
			return nil, fmt.Errorf("read alert mutes: %w", err)
		}
		m.Until, m.MutedAt = time.UnixMilli(until).UTC(), time.UnixMilli(at).UTC()
		out = append(out, m)
	}
	return out, rows.Err()
}

// UnmuteAlertKind ends kind's mute; it reports whether one was in force at
// now.
func UnmuteAlertKind(ctx context.Context, q Querier, kind string, now time.Time) (bool, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM alert_mutes WHERE kind = ? AND until_at > ?`, kind, ms(now))
	if err != nil {
		return false, fmt.Errorf("unmute alert kind: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("unmute alert kind: %w", err)
	}
	// An ended mute's row is dropped too: it mutes nothing.
	if _, err := q.ExecContext(ctx, `DELETE FROM alert_mutes WHERE kind = ?`, kind); err != nil {
		return false, fmt.Errorf("unmute alert kind: %w", err)
	}
	return n > 0, nil
}

// SinkDelivery is one sink's delivery state in the outbox.
type SinkDelivery struct {
	Sink string
	// LastDeliveredAt is when its latest message was accepted; zero when
	// none ever was.
	LastDeliveredAt time.Time
	// Pending counts its messages waiting for delivery.
	Pending int
	// FailingSince is the first failed attempt of the current run of
	// failures: the earliest first attempt among its pending messages that
	// failed, or expired after its latest delivery; zero when none.
	FailingSince time.Time
	// LastError is the kind of its latest failure among those messages
	// (timeout, refused, permanent, expired); "" when none.
	LastError string
}

// OutboxSinkDelivery returns the delivery state of every sink the outbox
// names, by sink name.
func OutboxSinkDelivery(ctx context.Context, q Querier) (map[string]SinkDelivery, error) {
	rows, err := q.QueryContext(ctx, `WITH d AS (SELECT sink, MAX(delivered_at) AS last FROM alert_outbox GROUP BY sink),
		 f AS (SELECT o.* FROM alert_outbox o JOIN d ON d.sink = o.sink
		       WHERE o.last_error != '' AND o.merged_into IS NULL AND
		             ((o.`+outboxPending+`) OR (o.expired_at IS NOT NULL AND o.expired_at > COALESCE(d.last, 0))))
		 SELECT d.sink, d.last,
		        (SELECT COUNT(*) FROM alert_outbox p WHERE p.sink = d.sink AND p.delivered_at IS NULL AND p.expired_at IS NULL AND p.merged_into IS NULL),
		        (SELECT MIN(first_attempt_at) FROM f WHERE f.sink = d.sink),
		        COALESCE((SELECT last_error FROM f WHERE f.sink = d.sink ORDER BY COALESCE(f.expired_at, f.next_attempt_at) DESC, f.seq DESC LIMIT 1), '')
		 FROM d ORDER BY d.sink`)
	if err != nil {
		return nil, fmt.Errorf("read alert outbox: %w", err)
	}
	defer rows.Close()
	out := map[string]SinkDelivery{}
	for rows.Next() {
		var s SinkDelivery
		var last, since sql.NullInt64
		if err := rows.Scan(&s.Sink, &last, &s.Pending, &since, &s.LastError); err != nil {
			return nil, fmt.Errorf("read alert outbox: %w", err)
		}
		s.LastDeliveredAt, s.FailingSince = fromMS(last), fromMS(since)
		out[s.Sink] = s
	}
	return out, rows.Err()
}
