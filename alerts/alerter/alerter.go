// Package alerter is the alerts evaluator and outbox worker
// (docs/operations.md, "Alerts"): Set opens or resolves an alert and
// queues its messages, one per sink, in the same writer transaction; the
// worker delivers them at least once, never with a new id, each sink in its
// own goroutine bounded by a timeout, with back-off and jitter, for up to
// 24 hours; it repeats open alerts (critical hourly, warning daily),
// coalesces storms, caps each sink's rate and holds the alerts of faults
// that stop the database taking writes in memory.
package alerter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// Defaults (docs/operations.md, "Alerts", delivery), each with its reason.
const (
	// SendTimeout bounds one Send: a slow receiver holds only its own
	// sink's goroutine, and only this long.
	SendTimeout = 10 * time.Second
	// MaxAge is how long a message is retried before it expires and
	// raises alert-delivery-failing: a day covers a receiver's overnight
	// outage; an alert older than that is stale news.
	MaxAge = 24 * time.Hour
	// BackoffBase and BackoffMax bound the wait between attempts of one
	// message: doubling from 30 s reaches the 30 min ceiling after six
	// failures, so a receiver back after 10 minutes hears within ~8 more.
	BackoffBase = 30 * time.Second
	BackoffMax  = 30 * time.Minute
	// Jitter is the fraction each back-off is spread by (±), so sinks and
	// restarts do not retry in step.
	Jitter = 0.2
	// RepeatCritical and RepeatWarning are how often an open,
	// unacknowledged alert's message repeats (docs/operations.md, "Alerts").
	RepeatCritical = time.Hour
	RepeatWarning  = 24 * time.Hour
	// Coalesce is the storm window: after a sink was sent a message, its
	// new messages wait until this much has passed and then go together,
	// one message per event and kind naming alerts.MaxSubjects subjects.
	Coalesce = 30 * time.Second
	// Settle is how long new messages wait for more to join them: a
	// detector raising a storm sets its conditions one after another, and
	// a message that left with the first would split the storm. Short
	// enough that an alert reaches its receiver within seconds; a stream
	// that never pauses for Settle goes Coalesce after its first message.
	Settle = 2 * time.Second
	// RateCap messages per RateWindow per sink; past it, the sink's new
	// messages wait for the window and then go as one "n more" message.
	RateCap    = 20
	RateWindow = time.Hour
	// MaxBody caps a message's text in bytes: a storm's body names its
	// subjects, and receivers (chat webhooks, mail relays) refuse large
	// bodies.
	MaxBody = 16 << 10
	// PerTick caps the messages one tick hands a sink; the rest wait for
	// the next tick, which follows at once.
	PerTick = 100
	// MergeMax caps the waiting messages one tick reads per sink to
	// coalesce: a storm larger than this goes in several messages.
	MergeMax = 5000
	// RepeatsPerTick caps the repeats one tick queues.
	RepeatsPerTick = 100
)

// Errors.
var (
	// ErrUnknownKind: Set or RegisterCheck named a kind that is not in
	// alerts.Conditions.
	ErrUnknownKind = errors.New("unknown alert condition kind")
)

// Check evaluates a condition on one subject again: whether it still
// holds, and its detail if it does. Registered per kind with RegisterCheck;
// run at start for each open alert.
type Check func(ctx context.Context, subject alerts.Subject) (holds bool, detail string, err error)

// Config is what New needs.
type Config struct {
	// DB is the database; required.
	DB *storage.DB
	// Sinks are the configured delivery channels, names unique; none is
	// allowed (alerts are recorded, nothing is sent).
	Sinks []alerts.Sink
	// Clock is the alerter's clock; nil is the real clock.
	Clock clockwork.Clock
	// Log receives delivery failures (the sink's name, never its URL).
	Log zerolog.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Write runs a writer unit; nil is DB.Writer.Do. Tests inject one
	// that refuses, as storage does when it cannot take writes.
	Write func(ctx context.Context, fn storage.TxFunc) error
	// Rand returns a number in [0, 1) for the back-off's jitter; nil is
	// math/rand/v2.
	Rand func() float64
}

// The detectors see the alerter as an alerts.Setter.
var _ alerts.Setter = (*Alerter)(nil)

// Alerter holds the conditions' alerts and delivers their messages.
type Alerter struct {
	db      *storage.DB
	sinks   []alerts.Sink
	clock   clockwork.Clock
	log     zerolog.Logger
	write   func(ctx context.Context, fn storage.TxFunc) error
	rand    func() float64
	metrics *metrics

	wake chan struct{}
	wg   sync.WaitGroup
	// tickMu keeps ticks one at a time (a sink handed the same messages
	// twice would send them twice).
	tickMu sync.Mutex

	mu     sync.Mutex
	checks map[string]Check
	busy   map[string]bool
	capped map[string]bool
	mem    []*memAlert
}

// New returns an alerter over cfg. Errors: a missing DB, a sink without
// a name or two with the same one, metrics that cannot register.
func New(cfg Config) (*Alerter, error) {
	if cfg.DB == nil {
		return nil, errors.New("alerter: no database")
	}
	seen := map[string]bool{}
	for _, s := range cfg.Sinks {
		if s.Name() == "" || seen[s.Name()] {
			return nil, fmt.Errorf("alerter: sink names must be unique and set (%q)", s.Name())
		}
		seen[s.Name()] = true
	}
	a := &Alerter{
		db: cfg.DB, sinks: cfg.Sinks, clock: cfg.Clock, log: cfg.Log, write: cfg.Write, rand: cfg.Rand,
		wake: make(chan struct{}, 1), checks: map[string]Check{}, busy: map[string]bool{}, capped: map[string]bool{},
	}
	if a.clock == nil {
		a.clock = clockwork.NewRealClock()
	}
	if a.write == nil {
		a.write = cfg.DB.Writer.Do
	}
	if a.rand == nil {
		a.rand = rand.Float64
	}
	m, err := newMetrics(cfg.Registerer, cfg.Sinks)
	if err != nil {
		return nil, err
	}
	a.metrics = m
	a.checks[alerts.KindAlertDeliveryFailing] = a.checkDeliveryFailing
	return a, nil
}

// RegisterCheck sets kind's check, run at start (Recheck) for each open
// alert of kind, so an alert whose end was lost in a crash or a restore
// resolves. A kind without a check stays open until Set ends it.
func (a *Alerter) RegisterCheck(kind string, check Check) error {
	if _, ok := alerts.Lookup(kind); !ok {
		return ErrUnknownKind
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checks[kind] = check
	return nil
}

// Set reports kind's condition on subject: holds true opens an alert and
// queues its fired message for every sink, false resolves the open alert
// and queues its resolved message, both in one writer transaction. Setting
// a condition to what it already is writes nothing. A muted kind's alerts
// open and resolve without messages. When the write fails for a kind
// marked Memory (storage-unavailable, disk-low) the change is held in
// memory, its messages sent directly, and recorded once storage takes
// writes again; Set then returns nil. Errors: ErrUnknownKind, the write's.
func (a *Alerter) Set(ctx context.Context, kind string, subject alerts.Subject, holds bool, detail string) error {
	cond, ok := alerts.Lookup(kind)
	if !ok {
		return ErrUnknownKind
	}
	if cond.Memory && a.memSet(ctx, cond, subject, holds, detail) {
		return nil
	}
	now := a.clock.Now()
	changed := false
	err := a.write(ctx, func(tx storage.Tx) error {
		changed = false
		open, err := storage.OpenAlertFor(ctx, tx, kind, subject.Kind, subject.ID)
		switch {
		case err == nil && holds, errors.Is(err, storage.ErrNotFound) && !holds:
			return nil
		case err != nil && !errors.Is(err, storage.ErrNotFound):
			return err
		}
		muted, err := storage.AlertKindMuted(ctx, tx, kind, now)
		if err != nil {
			return err
		}
		var al storage.Alert
		var ev alerts.Event
		if holds {
			al = storage.Alert{ID: ulid.Make().String(), Kind: kind, SubjectKind: subject.Kind, SubjectID: subject.ID,
				Severity: string(cond.Severity), Detail: detail, OpenedAt: now, LastSentAt: now}
			if err := storage.InsertAlert(ctx, tx, al); err != nil {
				return err
			}
			ev = alerts.Fired
		} else {
			al = open
			if err := storage.ResolveAlert(ctx, tx, al.ID, now); err != nil {
				return err
			}
			ev, detail = alerts.Resolved, al.Detail
		}
		changed = true
		if muted {
			return nil
		}
		for _, s := range a.sinks {
			if err := storage.InsertOutbox(ctx, tx, a.row(s.Name(), al.ID, ev, cond, subject, detail, al.OpenedAt, now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if cond.Memory && a.memHold(ctx, cond, subject, holds, detail, now) {
			a.wakeUp()
			return nil
		}
		return fmt.Errorf("alerts: set %s: %w", kind, err)
	}
	if changed {
		a.wakeUp()
	}
	return nil
}

// row is the outbox row of one message of event about alert alertID to
// sink.
func (a *Alerter) row(sink, alertID string, ev alerts.Event, cond alerts.Condition, subject alerts.Subject, detail string, opened, now time.Time) storage.OutboxRow {
	subj, _ := json.Marshal([]alerts.Subject{subject})
	title, body := render(ev, cond, subject, detail, opened, now)
	return storage.OutboxRow{ID: ulid.Make().String(), AlertID: alertID, Sink: sink, Event: string(ev), Kind: cond.Kind,
		Severity: string(cond.Severity), Subjects: string(subj), Title: title, Body: body, At: now, CreatedAt: now, NextAttemptAt: now}
}

// render is a message's title and text (docs/operations.md, "Alerts"):
// what, where and how bad; then what happened, the detail, what it means
// and, unless resolved, the first thing to do.
func render(ev alerts.Event, cond alerts.Condition, subject alerts.Subject, detail string, opened, now time.Time) (string, string) {
	var title, first string
	switch ev {
	case alerts.Resolved:
		title = fmt.Sprintf("[resolved] %s on %s", cond.Kind, subject)
		first = fmt.Sprintf("%s on %s ended at %s, after %s.", cond.Kind, subject, now.UTC().Format(time.RFC3339), now.Sub(opened).Round(time.Second))
	case alerts.Repeated:
		title = fmt.Sprintf("[%s] %s on %s (still holds)", cond.Severity, cond.Kind, subject)
		first = fmt.Sprintf("%s on %s still holds, since %s.", cond.Kind, subject, opened.UTC().Format(time.RFC3339))
	default:
		title = fmt.Sprintf("[%s] %s on %s", cond.Severity, cond.Kind, subject)
		first = fmt.Sprintf("%s on %s started at %s.", cond.Kind, subject, now.UTC().Format(time.RFC3339))
	}
	var b strings.Builder
	b.WriteString(first + "\n")
	if detail != "" {
		b.WriteString("\n" + detail + "\n")
	}
	fmt.Fprintf(&b, "\nWhat it means: %s\n", cond.Meaning)
	if ev != alerts.Resolved {
		// A resolution tells what ended; acting is for fired and repeated.
		fmt.Fprintf(&b, "First thing to do: %s\n", cond.Action)
	}
	return title, capBody(b.String())
}

// capBody cuts s to MaxBody bytes on a rune boundary, saying so.
func capBody(s string) string {
	const mark = "\n… (cut to the size cap)\n"
	if len(s) <= MaxBody {
		return s
	}
	cut := MaxBody - len(mark)
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Recheck evaluates every open alert's condition again through its kind's
// check (RegisterCheck) and resolves those that no longer hold; Run calls
// it at start. It returns how many it resolved; a failing check leaves its
// alert open and is logged.
func (a *Alerter) Recheck(ctx context.Context) (int, error) {
	open, err := storage.OpenAlerts(ctx, a.db.Read)
	if err != nil {
		return 0, fmt.Errorf("alerts: recheck: %w", err)
	}
	n := 0
	for _, al := range open {
		a.mu.Lock()
		check := a.checks[al.Kind]
		a.mu.Unlock()
		if check == nil {
			continue
		}
		subject := alerts.Subject{Kind: al.SubjectKind, ID: al.SubjectID}
		holds, _, err := check(ctx, subject)
		if err != nil {
			a.log.Warn().Err(err).Str("kind", al.Kind).Msg("re-checking an open alert failed; it stays open")
			continue
		}
		if holds {
			continue
		}
		if err := a.Set(ctx, al.Kind, subject, false, ""); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// checkDeliveryFailing is alert-delivery-failing's check: some sink's
// latest expired message is newer than its latest delivered one.
func (a *Alerter) checkDeliveryFailing(ctx context.Context, _ alerts.Subject) (bool, string, error) {
	failing, err := storage.OutboxFailingSinks(ctx, a.db.Read)
	if err != nil {
		return false, "", err
	}
	return len(failing) > 0, deliveryDetail(failing), nil
}

func deliveryDetail(sinks []string) string {
	return fmt.Sprintf("Messages to the sinks %s expired undelivered after %s.", strings.Join(sinks, ", "), MaxAge)
}

// wakeUp makes Run tick now.
func (a *Alerter) wakeUp() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run re-checks the open alerts, then ticks until ctx ends: at once after
// Set or a sink's deliveries, else when the next attempt, repeat, storm
// window or expiry falls due. With nothing open, pending or due it waits
// without a timer. It returns nil when ctx ends, after the sinks' sends in
// flight return.
func (a *Alerter) Run(ctx context.Context) error {
	defer a.wg.Wait()
	if _, err := a.Recheck(ctx); err != nil {
		a.log.Error().Err(err).Msg("re-checking open alerts failed")
	}
	for {
		res, err := a.Tick(ctx)
		if err != nil {
			a.log.Error().Err(err).Msg("alert tick failed")
			if res.Next.IsZero() || res.Next.After(a.clock.Now().Add(BackoffBase)) {
				res.Next = a.clock.Now().Add(BackoffBase)
			}
		}
		var timer clockwork.Timer
		var fire <-chan time.Time
		if !res.Next.IsZero() {
			timer = a.clock.NewTimer(max(res.Next.Sub(a.clock.Now()), 0))
			fire = timer.Chan()
		}
		select {
		case <-ctx.Done():
		case <-a.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// Wait returns when every send in flight has returned (tests; Run waits
// itself).
func (a *Alerter) Wait() { a.wg.Wait() }
