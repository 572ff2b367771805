package alerter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// Result is what one tick did.
type Result struct {
	// Recorded counts alerts held in memory that were written to the
	// database this tick.
	Recorded int
	// Expired names the sinks whose messages expired this tick.
	Expired []string
	// Repeated counts alerts whose repeat was queued.
	Repeated int
	// Merged counts coalesced messages made (storms and "n more").
	Merged int
	// Dispatched counts messages handed to the sinks' goroutines, by
	// sink.
	Dispatched map[string]int
	// Next is when the worker must tick again by itself; zero when
	// nothing is open, pending or due (no timer).
	Next time.Time
}

// Tick records the alerts held in memory if storage takes writes again,
// expires messages older than MaxAge (raising alert-delivery-failing),
// queues the repeats due, and hands each idle sink its due messages in its
// own goroutine (at most PerTick); it does not wait for the sends.
func (a *Alerter) Tick(ctx context.Context) (Result, error) {
	a.tickMu.Lock()
	defer a.tickMu.Unlock()
	res := Result{Dispatched: map[string]int{}}
	now := a.clock.Now()
	var errs []error
	res.Recorded = a.memFlush(ctx)

	err := a.write(ctx, func(tx storage.Tx) error {
		var err error
		res.Expired, err = storage.ExpireOutbox(ctx, tx, now.Add(-MaxAge), now)
		return err
	})
	if err != nil {
		errs = append(errs, err)
	}
	if len(res.Expired) > 0 {
		a.log.Warn().Strs("sinks", res.Expired).Msg("alert messages expired undelivered")
		if err := a.Set(ctx, alerts.KindAlertDeliveryFailing, alerts.Subject{Kind: alerts.SubjectPlatform}, true, deliveryDetail(res.Expired)); err != nil {
			errs = append(errs, err)
		}
	}
	if n, err := a.repeat(ctx, now); err != nil {
		errs = append(errs, err)
	} else {
		res.Repeated = n
	}

	var next time.Time
	later := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, s := range a.sinks {
		name := s.Name()
		a.mu.Lock()
		busy := a.busy[name]
		a.mu.Unlock()
		if busy {
			continue // its goroutine wakes the worker when it returns
		}
		batch, wait, merged, err := a.prepare(ctx, name, now)
		res.Merged += merged
		if err != nil {
			errs = append(errs, err)
		}
		mem, memWait := a.memDue(name, now)
		later(wait)
		later(memWait)
		if len(batch) == 0 && len(mem) == 0 {
			continue
		}
		res.Dispatched[name] = len(batch) + len(mem)
		a.dispatch(ctx, s, mem, batch)
	}
	if t, err := storage.NextAlertRepeat(ctx, a.db.Read, now, RepeatCritical, RepeatWarning); err != nil {
		errs = append(errs, err)
	} else {
		later(t)
	}
	if t, err := storage.OutboxOldestPending(ctx, a.db.Read); err != nil {
		errs = append(errs, err)
	} else if !t.IsZero() {
		later(t.Add(MaxAge))
	}
	a.mu.Lock()
	if len(a.mem) > 0 {
		later(now.Add(BackoffBase)) // try to record them again
	}
	a.mu.Unlock()
	if !next.IsZero() && next.Before(now) {
		next = now
	}
	res.Next = next
	a.updateGauges(ctx)
	return res, errors.Join(errs...)
}

// repeat queues the repeated message of each open, unacknowledged, unmuted
// alert whose repeat is due (at most RepeatsPerTick).
func (a *Alerter) repeat(ctx context.Context, now time.Time) (int, error) {
	n := 0
	err := a.write(ctx, func(tx storage.Tx) error {
		n = 0
		due, err := storage.AlertsRepeatDue(ctx, tx, now, RepeatCritical, RepeatWarning, RepeatsPerTick)
		if err != nil {
			return err
		}
		for _, al := range due {
			cond, ok := alerts.Lookup(al.Kind)
			if !ok {
				cond = alerts.Condition{Kind: al.Kind}
			}
			// The stored severity: Escalate may have raised it above
			// the table's.
			cond.Severity = alerts.Severity(al.Severity)
			subject := alerts.Subject{Kind: al.SubjectKind, ID: al.SubjectID}
			for _, s := range a.sinks {
				if err := storage.InsertOutbox(ctx, tx, a.row(s.Name(), al.ID, alerts.Repeated, cond, subject, al.Detail, al.OpenedAt, now)); err != nil {
					return err
				}
			}
			if err := storage.SetAlertSent(ctx, tx, al.ID, now); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// prepare returns sink's messages to send now, in order, and when its
// next message falls due otherwise. A message that was never tried waits
// until no new one has come for Settle (at most Coalesce after the oldest
// waiting one; repeats excepted), while the sink was sent one less than
// Coalesce ago, and while it has had RateCap in the last RateWindow; waiting messages of one event and kind
// are coalesced into one, and those that waited for the rate cap into one
// "n more" message.
func (a *Alerter) prepare(ctx context.Context, sink string, now time.Time) ([]storage.OutboxRow, time.Time, int, error) {
	rows, err := storage.PendingOutbox(ctx, a.db.Read, sink, MergeMax)
	if err != nil || len(rows) == 0 {
		return nil, time.Time{}, 0, err
	}
	last, err := storage.OutboxLastSent(ctx, a.db.Read, sink)
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	sent, oldest, err := storage.OutboxSentSince(ctx, a.db.Read, sink, now.Add(-RateWindow))
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	var fresh []storage.OutboxRow
	for _, r := range rows {
		if r.Attempts == 0 && !r.Coalesced {
			fresh = append(fresh, r)
		}
	}
	var freshWait time.Time
	if len(fresh) > 0 {
		// Repeats are queued together by one tick: they need not settle.
		var oldestFresh, newestFresh time.Time
		for _, r := range fresh {
			if r.Event == string(alerts.Repeated) {
				continue
			}
			if oldestFresh.IsZero() {
				oldestFresh, newestFresh = r.CreatedAt, r.CreatedAt
			}
			oldestFresh, newestFresh = minTime(oldestFresh, r.CreatedAt), maxTime(newestFresh, r.CreatedAt)
		}
		if settled := minTime(newestFresh.Add(Settle), oldestFresh.Add(Coalesce)); !oldestFresh.IsZero() && now.Before(settled) {
			freshWait = settled
		}
		if !last.IsZero() && now.Before(last.Add(Coalesce)) {
			freshWait = maxTime(freshWait, last.Add(Coalesce))
		}
		if sent >= RateCap {
			a.mu.Lock()
			a.capped[sink] = true
			a.mu.Unlock()
			if t := oldest.Add(RateWindow); t.After(freshWait) {
				freshWait = t
			}
		}
	}
	merged := 0
	if len(fresh) > 0 && freshWait.IsZero() {
		a.mu.Lock()
		capped := a.capped[sink]
		a.capped[sink] = false
		a.mu.Unlock()
		if len(fresh) == 1 {
			capped = false
		}
		if merged, err = a.coalesce(ctx, sink, rows, fresh, capped, now); err != nil {
			return nil, time.Time{}, 0, err
		}
		if merged > 0 {
			if rows, err = storage.PendingOutbox(ctx, a.db.Read, sink, MergeMax); err != nil {
				return nil, time.Time{}, merged, err
			}
		}
	}
	var batch []storage.OutboxRow
	budget := RateCap - sent
	for _, r := range rows {
		if len(batch) == PerTick {
			return batch, now, merged, nil
		}
		if r.Attempts == 0 && !r.Coalesced && !freshWait.IsZero() {
			return batch, freshWait, merged, nil
		}
		if r.NextAttemptAt.After(now) {
			return batch, r.NextAttemptAt, merged, nil
		}
		if r.Attempts == 0 {
			if budget <= 0 {
				a.mu.Lock()
				a.capped[sink] = true
				a.mu.Unlock()
				return batch, oldestOr(oldest, now).Add(RateWindow), merged, nil
			}
			budget--
		}
		batch = append(batch, r)
	}
	return batch, time.Time{}, merged, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func oldestOr(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

// coalesce merges sink's waiting messages: all of them into one "n more"
// message when they waited for the rate cap, else each run of consecutive
// messages (by seq: no other message between them) of one event and kind. It returns how many merged messages it
// wrote.
func (a *Alerter) coalesce(ctx context.Context, sink string, rows, fresh []storage.OutboxRow, capped bool, now time.Time) (int, error) {
	var groups [][]storage.OutboxRow
	if capped {
		groups = [][]storage.OutboxRow{fresh}
	} else {
		// Runs of consecutive messages of one event and kind: merging
		// across another message would reorder a subject's messages.
		prev := storage.OutboxRow{}
		for _, r := range rows {
			fresh := r.Attempts == 0 && !r.Coalesced
			if fresh && prev.ID != "" && r.Event == prev.Event && r.Kind == prev.Kind {
				groups[len(groups)-1] = append(groups[len(groups)-1], r)
			} else if fresh {
				groups = append(groups, []storage.OutboxRow{r})
			}
			prev = storage.OutboxRow{}
			if fresh {
				prev = r
			}
		}
	}
	n := 0
	err := a.write(ctx, func(tx storage.Tx) error {
		n = 0
		for _, g := range groups {
			if len(g) < 2 {
				continue
			}
			m := mergeRows(sink, g, capped, now)
			ids := make([]string, len(g))
			for i, r := range g {
				ids[i] = r.ID
			}
			if err := storage.MergeOutbox(ctx, tx, m, ids); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// mergeRows is the coalesced message of rows (docs/operations.md,
// "Alerts", storms): the first alerts.MaxSubjects subjects and a count.
func mergeRows(sink string, rows []storage.OutboxRow, capped bool, now time.Time) storage.OutboxRow {
	var subjects []alerts.Subject
	seen := map[alerts.Subject]bool{}
	more := 0
	sev := alerts.Warning
	var lines []string
	sameKind := true
	for _, r := range rows {
		if alerts.Severity(r.Severity) == alerts.Critical {
			sev = alerts.Critical
		}
		if r.Kind != rows[0].Kind || r.Event != rows[0].Event {
			sameKind = false
		}
		var ss []alerts.Subject
		_ = json.Unmarshal([]byte(r.Subjects), &ss)
		for _, s := range ss {
			if seen[s] {
				continue
			}
			seen[s] = true
			if len(subjects) < alerts.MaxSubjects {
				subjects = append(subjects, s)
			} else {
				more++
			}
		}
		if len(lines) < alerts.MaxSubjects {
			lines = append(lines, "- "+r.Title)
		}
	}
	m := storage.OutboxRow{ID: ulid.Make().String(), Sink: sink, Event: rows[0].Event, Severity: string(sev), More: more,
		At: rows[0].At, CreatedAt: rows[0].CreatedAt, NextAttemptAt: now}
	var b strings.Builder
	tail := ""
	if capped || !sameKind {
		m.Title = fmt.Sprintf("[%s] %d more alert messages", sev, len(rows))
		fmt.Fprintf(&b, "This sink had %d messages in the last %s (its rate cap); %d more followed:\n\n", RateCap, RateWindow, len(rows))
	} else {
		m.Kind = rows[0].Kind
		total := len(subjects) + more
		m.Title = fmt.Sprintf("[%s] %s %s on %d subjects", sev, rows[0].Kind, rows[0].Event, total)
		fmt.Fprintf(&b, "%s %s on %d subjects within %s:\n\n", rows[0].Kind, rows[0].Event, total, Coalesce)
		if cond, ok := alerts.Lookup(rows[0].Kind); ok {
			tail = fmt.Sprintf("\nWhat it means: %s\n", cond.Meaning)
			if rows[0].Event != string(alerts.Resolved) {
				tail += fmt.Sprintf("First thing to do: %s\n", cond.Action)
			}
		}
	}
	b.WriteString(strings.Join(lines, "\n") + "\n")
	if len(rows) > len(lines) {
		fmt.Fprintf(&b, "… and %d more.\n", len(rows)-len(lines))
	}
	b.WriteString(tail)
	subj, _ := json.Marshal(subjects)
	m.Subjects = string(subj)
	m.Body = capBody(b.String())
	return m
}

// message is row as the sink receives it.
func message(r storage.OutboxRow) alerts.Message {
	var ss []alerts.Subject
	_ = json.Unmarshal([]byte(r.Subjects), &ss)
	return alerts.Message{ID: r.ID, AlertID: r.AlertID, Event: alerts.Event(r.Event), Kind: r.Kind, Severity: alerts.Severity(r.Severity),
		Subjects: ss, More: r.More, Title: r.Title, Text: r.Body, At: r.At}
}

// backoff is the wait after a message's attempts-th failure: BackoffBase
// doubling to BackoffMax, spread by ±Jitter.
func (a *Alerter) backoff(attempts int) time.Duration {
	d := BackoffBase
	for i := 1; i < attempts && d < BackoffMax; i++ {
		d *= 2
	}
	d = min(d, BackoffMax)
	return time.Duration(float64(d) * (1 - Jitter + 2*Jitter*a.rand()))
}

// errKind names a send error's kind for the outbox (never its text,
// which could carry a receiver's words).
func errKind(err error) string {
	switch {
	case errors.Is(err, alerts.ErrPermanent):
		return "permanent"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	default:
		return "refused"
	}
}

// dispatch sends mem (messages held in memory) and then batch to s in s's
// own goroutine, in order, stopping at the first failure: a later message
// about a subject never overtakes an earlier one.
func (a *Alerter) dispatch(ctx context.Context, s alerts.Sink, mem []*memMsg, batch []storage.OutboxRow) {
	name := s.Name()
	a.mu.Lock()
	a.busy[name] = true
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer func() {
			a.mu.Lock()
			a.busy[name] = false
			a.mu.Unlock()
			a.wg.Done()
			a.wakeUp()
		}()
		for _, m := range mem {
			err := a.send(ctx, s, message(m.row))
			a.memDone(m, err)
			if err != nil {
				break
			}
		}
		delivered := false
		for _, r := range batch {
			err := a.send(ctx, s, message(r))
			now := a.clock.Now()
			if err == nil {
				delivered = true
				a.metrics.delivered(name)
				if werr := a.write(ctx, func(tx storage.Tx) error { return storage.OutboxDelivered(ctx, tx, r.ID, now) }); werr != nil {
					a.log.Error().Err(werr).Str("sink", name).Msg("recording an alert delivery failed; the message will be sent again with its id")
					return
				}
				continue
			}
			a.metrics.failed(name)
			kind := errKind(err)
			ev := a.log.Warn().Str("sink", name).Str("error", kind).Int("attempt", r.Attempts+1)
			if code, ok := alerts.HTTPStatus(err); ok {
				ev = ev.Int("status", code) // the number only, nothing else from the receiver
			}
			ev.Msg("alert delivery failed")
			permanent := kind == "permanent"
			if werr := a.write(ctx, func(tx storage.Tx) error {
				return storage.OutboxFailed(ctx, tx, r.ID, now, now.Add(a.backoff(r.Attempts+1)), kind, permanent)
			}); werr != nil {
				a.log.Error().Err(werr).Str("sink", name).Msg("recording an alert delivery failure failed")
			}
			if permanent {
				if err := a.Set(ctx, alerts.KindAlertDeliveryFailing, alerts.Subject{Kind: alerts.SubjectPlatform}, true, deliveryDetail([]string{name})); err != nil {
					a.log.Error().Err(err).Msg("raising alert-delivery-failing failed")
				}
			}
			break
		}
		if delivered {
			a.liftDeliveryFailing(ctx)
		}
	}()
}

// liftDeliveryFailing resolves alert-delivery-failing once no sink's latest
// expired message is newer than its latest delivered one.
func (a *Alerter) liftDeliveryFailing(ctx context.Context) {
	if _, err := storage.OpenAlertFor(ctx, a.db.Read, alerts.KindAlertDeliveryFailing, alerts.SubjectPlatform, ""); err != nil {
		return
	}
	if holds, _, err := a.checkDeliveryFailing(ctx, alerts.Subject{}); err == nil && !holds {
		if err := a.Set(ctx, alerts.KindAlertDeliveryFailing, alerts.Subject{Kind: alerts.SubjectPlatform}, false, ""); err != nil {
			a.log.Error().Err(err).Msg("resolving alert-delivery-failing failed")
		}
	}
}

// send is one Send bounded by SendTimeout on the alerter's clock.
func (a *Alerter) send(ctx context.Context, s alerts.Sink, m alerts.Message) error {
	ctx, cancel := context.WithCancelCause(ctx)
	t := a.clock.AfterFunc(SendTimeout, func() { cancel(context.DeadlineExceeded) })
	defer t.Stop()
	defer cancel(nil)
	err := s.Send(ctx, m)
	if err != nil && context.Cause(ctx) == context.DeadlineExceeded {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}
