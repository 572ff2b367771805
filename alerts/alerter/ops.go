package alerter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// The operator's surfaces (docs/operations.md, "Alerts", operating
// alerts): list, acknowledge, mute and test. Each admin surface (API, CLI,
// MCP, console) calls these; none writes the tables itself.

// MaxMute is the longest mute (`admin alerts mute KIND --for`): a mute
// silences a condition's messages, and one forgotten for longer than a day
// would hide the next outage.
const MaxMute = 24 * time.Hour

// Lifecycle events of the operator's alert actions (platform organization,
// no environment; docs/operations.md, "Alerts").
const (
	EventMuted   = "alert-muted"
	EventUnmuted = "alert-unmuted"
	EventAcked   = "alert-acked"
	eventReason  = "manual"
)

// Errors of the operator's surfaces.
var (
	// ErrMuteBounds: a mute's duration is not in (0, MaxMute].
	ErrMuteBounds = errors.New("a mute lasts more than 0 and at most 24h (for longer, fix the cause or remove the sink)")
	// ErrAlertNotFound: no alert has that id.
	ErrAlertNotFound = errors.New("no alert with that id")
	// ErrAlertResolved: the alert already resolved; there is nothing to
	// acknowledge.
	ErrAlertResolved = errors.New("the alert has resolved; nothing to acknowledge")
	// ErrNoSinks: no sink is configured (CHALUPA_ALERT_*), so a test has
	// nowhere to go.
	ErrNoSinks = errors.New("no alert sink is configured (CHALUPA_ALERT_SMTP_URL, CHALUPA_ALERT_WEBHOOK_URL)")
	// ErrUnknownSink: a test named a sink that is not configured.
	ErrUnknownSink = errors.New("no configured sink has that name")
)

// SinkState is one sink's delivery state (`admin alerts`, `admin
// status`). Messages held in memory while storage refuses writes are not
// counted.
type SinkState struct {
	// Name is the sink's name ("email", "webhook"), never its URL.
	Name string
	// LastDeliveredAt is when the sink last accepted a message; zero when
	// never.
	LastDeliveredAt time.Time
	// Pending counts its messages waiting for delivery.
	Pending int
	// FailingSince is the first failed attempt of the current run of
	// failures; zero while it is not failing.
	FailingSince time.Time
	// LastError is the kind of the latest failure of that run (timeout,
	// refused, permanent, expired).
	LastError string
}

// Overview is what `admin alerts` shows.
type Overview struct {
	// Open are the open alerts, oldest first.
	Open []storage.Alert
	// Recent are the latest resolved alerts, latest first.
	Recent []storage.Alert
	// Sinks are the configured sinks' states, in configuration order.
	Sinks []SinkState
	// Mutes are the mutes in force, by kind.
	Mutes []storage.AlertMute
}

// SinkStates returns every configured sink's delivery state, in
// configuration order.
func (a *Alerter) SinkStates(ctx context.Context) ([]SinkState, error) {
	d, err := storage.OutboxSinkDelivery(ctx, a.db.Read)
	if err != nil {
		return nil, fmt.Errorf("alerts: sinks: %w", err)
	}
	out := make([]SinkState, 0, len(a.sinks))
	for _, s := range a.sinks {
		x := d[s.Name()]
		out = append(out, SinkState{Name: s.Name(), LastDeliveredAt: x.LastDeliveredAt, Pending: x.Pending, FailingSince: x.FailingSince, LastError: x.LastError})
	}
	return out, nil
}

// List returns the open alerts, the latest recent resolved ones (at most
// recent), the sinks' states and the mutes in force.
func (a *Alerter) List(ctx context.Context, recent int) (Overview, error) {
	var o Overview
	var err error
	if o.Open, err = storage.OpenAlerts(ctx, a.db.Read); err != nil {
		return Overview{}, fmt.Errorf("alerts: list: %w", err)
	}
	if o.Recent, err = storage.RecentAlerts(ctx, a.db.Read, recent); err != nil {
		return Overview{}, fmt.Errorf("alerts: list: %w", err)
	}
	if o.Mutes, err = storage.AlertMutes(ctx, a.db.Read, a.clock.Now()); err != nil {
		return Overview{}, fmt.Errorf("alerts: list: %w", err)
	}
	if o.Sinks, err = a.SinkStates(ctx); err != nil {
		return Overview{}, err
	}
	return o, nil
}

// Ack acknowledges the open alert id: it repeats no more until it
// resolves (its resolved message still goes), and an alert-acked event
// records it. Acknowledging an acknowledged alert changes nothing. It
// returns the alert. Errors: ErrAlertNotFound, ErrAlertResolved, the
// write's.
func (a *Alerter) Ack(ctx context.Context, id string) (storage.Alert, error) {
	now := a.clock.Now()
	var al storage.Alert
	err := a.write(ctx, func(tx storage.Tx) error {
		var err error
		if al, err = storage.AlertByID(ctx, tx, id); errors.Is(err, storage.ErrNotFound) {
			return ErrAlertNotFound
		} else if err != nil {
			return err
		}
		if !al.ResolvedAt.IsZero() {
			return ErrAlertResolved
		}
		if !al.AckedAt.IsZero() {
			return nil
		}
		if err := storage.AckAlert(ctx, tx, id, now); err != nil {
			return err
		}
		al.AckedAt = now.UTC().Truncate(time.Millisecond)
		_, err = storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{ID: fmt.Sprintf("%s:%s", EventAcked, id),
			Kind: EventAcked, Reason: eventReason, Message: fmt.Sprintf("alert %s (%s on %s) acknowledged: no repeats until it resolves", id, al.Kind,
				alerts.Subject{Kind: al.SubjectKind, ID: al.SubjectID}), OccurredAt: now})
		return err
	})
	if err != nil {
		if errors.Is(err, ErrAlertNotFound) || errors.Is(err, ErrAlertResolved) {
			return storage.Alert{}, err
		}
		return storage.Alert{}, fmt.Errorf("alerts: ack: %w", err)
	}
	a.wakeUp() // the next wake-up no longer includes its repeat
	return al, nil
}

// Mute mutes kind for d (at most MaxMute): its alerts open and resolve as
// usual, but no fired or repeated message is queued until the mute ends;
// an alert-muted event records it, by (words naming who). A second mute
// replaces the first. It returns the mute. Errors: ErrUnknownKind,
// ErrMuteBounds, the write's.
func (a *Alerter) Mute(ctx context.Context, kind string, d time.Duration, by string) (storage.AlertMute, error) {
	if _, ok := alerts.Lookup(kind); !ok {
		return storage.AlertMute{}, ErrUnknownKind
	}
	if d <= 0 || d > MaxMute {
		return storage.AlertMute{}, ErrMuteBounds
	}
	now := a.clock.Now()
	until := now.Add(d)
	err := a.write(ctx, func(tx storage.Tx) error {
		if err := storage.MuteAlertKind(ctx, tx, kind, until, now); err != nil {
			return err
		}
		_, err := storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{ID: fmt.Sprintf("%s:%s:%d", EventMuted, kind, now.UnixMilli()),
			Kind: EventMuted, Reason: eventReason, Message: fmt.Sprintf("alerts of kind %s muted for %s, until %s (%s)", kind, d, until.UTC().Format(time.RFC3339), by),
			OccurredAt: now})
		return err
	})
	if err != nil {
		return storage.AlertMute{}, fmt.Errorf("alerts: mute: %w", err)
	}
	a.wakeUp()
	return storage.AlertMute{Kind: kind, Until: until.UTC().Truncate(time.Millisecond), MutedAt: now.UTC().Truncate(time.Millisecond)}, nil
}

// Unmute ends kind's mute, recording an alert-unmuted event; it reports
// whether a mute was in force (none: nothing is written). Errors:
// ErrUnknownKind, the write's.
func (a *Alerter) Unmute(ctx context.Context, kind, by string) (bool, error) {
	if _, ok := alerts.Lookup(kind); !ok {
		return false, ErrUnknownKind
	}
	now := a.clock.Now()
	var was bool
	err := a.write(ctx, func(tx storage.Tx) error {
		var err error
		if was, err = storage.UnmuteAlertKind(ctx, tx, kind, now); err != nil || !was {
			return err
		}
		_, err = storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{ID: fmt.Sprintf("%s:%s:%d", EventUnmuted, kind, now.UnixMilli()),
			Kind: EventUnmuted, Reason: eventReason, Message: fmt.Sprintf("alerts of kind %s unmuted (%s)", kind, by), OccurredAt: now})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("alerts: unmute: %w", err)
	}
	if was {
		a.wakeUp()
	}
	return was, nil
}

// TestResult is what one sink said to a test message.
type TestResult struct {
	// Sink is the sink's name.
	Sink string
	// MessageID is the test message's id (the webhook-id, the
	// Message-ID's local part).
	MessageID string
	// Delivered is true when the receiver accepted it.
	Delivered bool
	// Failure is the failure's kind when it did not: timeout, refused
	// (retryable: a 5xx, a refused connection) or permanent (the receiver
	// refuses this message, e.g. a 4xx).
	Failure string
	// Detail is the sink's own words for the failure (e.g. "webhook: the
	// receiver answered 500"): sinks never put a URL, password or secret
	// in them (alerts.Sink).
	Detail string
}

// Test sends a test message now to the sink named sink, or to every sink
// when sink is "", bypassing the outbox (nothing is queued or retried),
// each send bounded by SendTimeout, and returns what each said, in
// configuration order. Errors: ErrNoSinks, ErrUnknownSink.
func (a *Alerter) Test(ctx context.Context, sink string) ([]TestResult, error) {
	if len(a.sinks) == 0 {
		return nil, ErrNoSinks
	}
	var targets []alerts.Sink
	for _, s := range a.sinks {
		if sink == "" || s.Name() == sink {
			targets = append(targets, s)
		}
	}
	if len(targets) == 0 {
		return nil, ErrUnknownSink
	}
	now := a.clock.Now()
	out := make([]TestResult, len(targets))
	var wg sync.WaitGroup
	for i, s := range targets {
		m := alerts.Message{ID: ulid.Make().String(), Event: alerts.Test, Severity: alerts.Info,
			Subjects: []alerts.Subject{{Kind: alerts.SubjectPlatform}}, Title: "[info] chalupa test message",
			Text: fmt.Sprintf("A test message from chalupa (`chalupa admin alerts test`), sent at %s to the sink %s.\n\n"+
				"Nothing is wrong: it reports no condition. If you read this, alerts reach you.\n", now.UTC().Format(time.RFC3339), s.Name()),
			At: now}
		out[i] = TestResult{Sink: s.Name(), MessageID: m.ID}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := a.send(ctx, s, m)
			if err == nil {
				out[i].Delivered = true
				return
			}
			out[i].Failure, out[i].Detail = errKind(err), err.Error()
			a.log.Warn().Str("sink", s.Name()).Str("error", out[i].Failure).Msg("alert test message failed")
		}()
	}
	wg.Wait()
	return out, nil
}
