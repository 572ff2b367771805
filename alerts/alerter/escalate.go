package alerter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// Additions to the alerter's API for the budget alert and the daily digest
// (docs/operations.md, "Alerts"); Set, RegisterCheck, Recheck, Tick and Run
// are unchanged.

// ErrSeverity: Escalate was given a severity other than critical or
// warning.
var ErrSeverity = errors.New("an alert's severity is critical or warning")

// rank orders severities, worst highest.
func rank(s alerts.Severity) int {
	switch s {
	case alerts.Critical:
		return 2
	case alerts.Warning:
		return 1
	}
	return 0
}

// Escalate reports kind's condition on subject as holding at severity sev,
// which overrides the condition table's (the budget's 100 % step is sent
// so: docs/operations.md, "Alerts", under Detectors). With no alert open
// it opens one at sev and queues its fired message for every sink, as Set
// does; with one open at a lower severity it stores sev and detail and
// queues a fired message at sev; with one open at sev or worse it does
// nothing. Repeats follow the stored severity (critical hourly). A muted
// kind changes without messages. It has no memory path: it is not for the
// kinds marked Memory. Errors: ErrUnknownKind, ErrSeverity, the write's.
func (a *Alerter) Escalate(ctx context.Context, kind string, subject alerts.Subject, sev alerts.Severity, detail string) error {
	cond, ok := alerts.Lookup(kind)
	if !ok {
		return ErrUnknownKind
	}
	if rank(sev) == 0 {
		return ErrSeverity
	}
	cond.Severity = sev
	now := a.clock.Now()
	changed := false
	err := a.write(ctx, func(tx storage.Tx) error {
		changed = false
		open, err := storage.OpenAlertFor(ctx, tx, kind, subject.Kind, subject.ID)
		found := err == nil
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		if found && rank(alerts.Severity(open.Severity)) >= rank(sev) {
			return nil
		}
		muted, err := storage.AlertKindMuted(ctx, tx, kind, now)
		if err != nil {
			return err
		}
		al := storage.Alert{ID: ulid.Make().String(), Kind: kind, SubjectKind: subject.Kind, SubjectID: subject.ID,
			Severity: string(sev), Detail: detail, OpenedAt: now, LastSentAt: now}
		if found {
			al.ID, al.OpenedAt = open.ID, open.OpenedAt
			err = storage.EscalateAlert(ctx, tx, open.ID, string(sev), detail, now)
		} else {
			err = storage.InsertAlert(ctx, tx, al)
		}
		if err != nil {
			return err
		}
		changed = true
		if muted {
			return nil
		}
		for _, s := range a.sinks {
			// A fired message at the new severity: the alert is news
			// again (render says when it started).
			if err := storage.InsertOutbox(ctx, tx, a.row(s.Name(), al.ID, alerts.Fired, cond, subject, detail, al.OpenedAt, now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("alerts: escalate %s: %w", kind, err)
	}
	if changed {
		a.wakeUp()
	}
	return nil
}

// QueueDigest queues the daily digest (docs/operations.md, "Alerts", under
// Digest): one message per sink of event alerts.Digest and severity
// alerts.Info, about no alert and no subject, with title and text as given
// (capped at MaxBody), in one writer transaction; the worker delivers it
// like any message (retries, expiry, rate cap). With no sink it writes
// nothing. Errors: the write's.
func (a *Alerter) QueueDigest(ctx context.Context, title, text string) error {
	if len(a.sinks) == 0 {
		return nil
	}
	now := a.clock.Now()
	subj, _ := json.Marshal([]alerts.Subject{})
	err := a.write(ctx, func(tx storage.Tx) error {
		for _, s := range a.sinks {
			r := storage.OutboxRow{ID: ulid.Make().String(), Sink: s.Name(), Event: string(alerts.Digest), Severity: string(alerts.Info),
				Subjects: string(subj), Title: title, Body: capBody(text), At: now, CreatedAt: now, NextAttemptAt: now}
			if err := storage.InsertOutbox(ctx, tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("alerts: queue digest: %w", err)
	}
	a.wakeUp()
	return nil
}
