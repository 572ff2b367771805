package alerter

import (
	"context"
	"errors"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// The memory path (docs/operations.md, "Alerts", faults that stop the
// database): a change to a Memory condition (storage-unavailable,
// disk-low) whose write fails is held here, its messages sent directly by
// the sinks' goroutines and retried with the same back-off, and the alert
// with its messages (and what was delivered) is written once a write
// succeeds again, with the same ids. A crash while it is held loses it;
// the detector raises it again when it finds the fault at start.

// memMsg is one message held in memory.
type memMsg struct {
	row      storage.OutboxRow
	inflight bool
}

// memAlert is one condition change held in memory.
type memAlert struct {
	cond    alerts.Condition
	subject alerts.Subject
	alertID string
	opened  time.Time
	detail  string
	// existed: the alert was open in the database before its writes
	// failed (only its end is held).
	existed  bool
	open     bool
	resolved time.Time
	flushing bool
	msgs     []*memMsg
}

// memFind returns the latest entry of kind on subject; a.mu held.
func (a *Alerter) memFind(kind string, subject alerts.Subject) *memAlert {
	for i := len(a.mem) - 1; i >= 0; i-- {
		if e := a.mem[i]; e.cond.Kind == kind && e.subject == subject {
			return e
		}
	}
	return nil
}

// memSet handles a change to a condition already held in memory (so its
// order is kept until it is recorded); false when none is held.
func (a *Alerter) memSet(_ context.Context, cond alerts.Condition, subject alerts.Subject, holds bool, detail string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.memFind(cond.Kind, subject)
	if e == nil {
		return false
	}
	if e.open == holds {
		return true
	}
	now := a.clock.Now()
	if holds {
		// Opened again before the first was recorded: a new alert.
		// The earlier entry stays, in order.
		ne := &memAlert{cond: cond, subject: subject, alertID: ulid.Make().String(), opened: now, detail: detail, open: true}
		a.memQueue(ne, alerts.Fired, now)
		a.mem = append(a.mem, ne)
		a.wakeUp()
		return true
	}
	e.open, e.resolved = false, now
	a.memQueue(e, alerts.Resolved, now)
	a.wakeUp()
	return true
}

// memHold holds a change whose write failed; false when it cannot (the
// change needs no message: it already holds, or nothing is open).
func (a *Alerter) memHold(ctx context.Context, cond alerts.Condition, subject alerts.Subject, holds bool, detail string, now time.Time) bool {
	open, err := storage.OpenAlertFor(ctx, a.db.Read, cond.Kind, subject.Kind, subject.ID)
	found := err == nil
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.memFind(cond.Kind, subject); e != nil {
		return true // memSet's; a race with another Set
	}
	switch {
	case holds && found, !holds && !found:
		return true
	case holds:
		e := &memAlert{cond: cond, subject: subject, alertID: ulid.Make().String(), opened: now, detail: detail, open: true}
		a.memQueue(e, alerts.Fired, now)
		a.mem = append(a.mem, e)
	default:
		e := &memAlert{cond: cond, subject: subject, alertID: open.ID, opened: open.OpenedAt, detail: open.Detail, existed: true, resolved: now}
		a.memQueue(e, alerts.Resolved, now)
		a.mem = append(a.mem, e)
	}
	return true
}

// memQueue adds e's message of ev for every sink; a.mu held.
func (a *Alerter) memQueue(e *memAlert, ev alerts.Event, now time.Time) {
	for _, s := range a.sinks {
		e.msgs = append(e.msgs, &memMsg{row: a.row(s.Name(), e.alertID, ev, e.cond, e.subject, e.detail, e.opened, now)})
	}
}

// memDue returns sink's held messages to send now, in order, marked in
// flight, and when the next one falls due otherwise.
func (a *Alerter) memDue(sink string, now time.Time) ([]*memMsg, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*memMsg
	for _, e := range a.mem {
		if e.flushing {
			return out, time.Time{}
		}
		for _, m := range e.msgs {
			if m.row.Sink != sink || !m.row.DeliveredAt.IsZero() {
				continue
			}
			if m.row.NextAttemptAt.After(now) {
				return out, m.row.NextAttemptAt
			}
			m.inflight = true
			out = append(out, m)
		}
	}
	return out, time.Time{}
}

// memDone records a held message's send.
func (a *Alerter) memDone(m *memMsg, err error) {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	m.inflight = false
	m.row.Attempts++
	if m.row.FirstAttemptAt.IsZero() {
		m.row.FirstAttemptAt = now
	}
	if err == nil {
		m.row.DeliveredAt, m.row.LastError = now, ""
		a.metrics.delivered(m.row.Sink)
		return
	}
	m.row.LastError = errKind(err)
	m.row.NextAttemptAt = now.Add(a.backoff(m.row.Attempts))
	a.metrics.failed(m.row.Sink)
	a.log.Warn().Str("sink", m.row.Sink).Str("error", m.row.LastError).Msg("alert delivery failed (held in memory)")
}

// memFlush writes the held changes, in order, each with its messages and
// what was delivered; it stops at the first that fails (storage still
// refuses) and returns how many it recorded.
func (a *Alerter) memFlush(ctx context.Context) int {
	n := 0
	for {
		a.mu.Lock()
		if len(a.mem) == 0 {
			a.mu.Unlock()
			return n
		}
		e := a.mem[0]
		for _, m := range e.msgs {
			if m.inflight {
				a.mu.Unlock()
				return n
			}
		}
		e.flushing = true
		rows := make([]storage.OutboxRow, len(e.msgs))
		for i, m := range e.msgs {
			rows[i] = m.row
		}
		al := storage.Alert{ID: e.alertID, Kind: e.cond.Kind, SubjectKind: e.subject.Kind, SubjectID: e.subject.ID,
			Severity: string(e.cond.Severity), Detail: e.detail, OpenedAt: e.opened, LastSentAt: e.opened}
		if !e.open {
			al.ResolvedAt = e.resolved
		}
		existed := e.existed
		a.mu.Unlock()
		err := a.write(ctx, func(tx storage.Tx) error {
			if existed {
				if err := storage.ResolveAlert(ctx, tx, al.ID, al.ResolvedAt); err != nil && !errors.Is(err, storage.ErrNotFound) {
					return err
				}
			} else if err := storage.InsertAlert(ctx, tx, al); errors.Is(err, storage.ErrConflict) {
				// Recorded already, or opened in the database meanwhile:
				// the messages belong to the alert that is there.
				if _, err := storage.AlertByID(ctx, tx, al.ID); errors.Is(err, storage.ErrNotFound) {
					open, err := storage.OpenAlertFor(ctx, tx, al.Kind, al.SubjectKind, al.SubjectID)
					if err != nil {
						return err
					}
					for i := range rows {
						rows[i].AlertID = open.ID
					}
				}
			} else if err != nil {
				return err
			}
			for _, r := range rows {
				if err := storage.InsertOutbox(ctx, tx, r); err != nil && !errors.Is(err, storage.ErrConflict) {
					return err
				}
			}
			return nil
		})
		a.mu.Lock()
		e.flushing = false
		if err != nil {
			a.mu.Unlock()
			return n
		}
		a.mem = a.mem[1:]
		a.mu.Unlock()
		n++
	}
}
