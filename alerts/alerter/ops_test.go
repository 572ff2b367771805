package alerter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

func eventsOf(t *testing.T, db *storage.DB, kind string) []string {
	t.Helper()
	rows, err := storage.ListLifecycleEvents(context.Background(), db.Read, storage.EventFilter{Kind: kind, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r.Message)
	}
	return out
}

// TestAckStopsRepeats: `admin alerts ack ID` stops an open alert's repeats
// until it resolves (its resolved message still goes), records an
// alert-acked event once; an unknown or resolved alert is refused.
func TestAckStopsRepeats(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, nil, sink)
	set(t, a, alerts.KindReaperOverdue, platform, true)
	tick(t, a, clock)
	al, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindReaperOverdue, alerts.SubjectPlatform, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Ack(ctx, al.ID)
	if err != nil || got.ID != al.ID || got.AckedAt.IsZero() {
		t.Fatalf("Ack: %+v, %v", got, err)
	}
	if _, err := a.Ack(ctx, al.ID); err != nil {
		t.Fatalf("second Ack: %v, want nil (nothing changes)", err)
	}
	for range 3 {
		clock.Advance(alerter.RepeatCritical)
		tick(t, a, clock)
	}
	if got := events(sink.messages()); fmt.Sprint(got) != "[fired reaper-overdue]" {
		t.Fatalf("3 h after the ack: %v, want the fired message only (no hourly repeat)", got)
	}
	set(t, a, alerts.KindReaperOverdue, platform, false)
	clock.Advance(alerter.Coalesce)
	tick(t, a, clock)
	if got := events(sink.messages()); fmt.Sprint(got) != "[fired reaper-overdue resolved reaper-overdue]" {
		t.Fatalf("after it ended: %v, want its resolved message", got)
	}
	if _, err := a.Ack(ctx, al.ID); !errors.Is(err, alerter.ErrAlertResolved) {
		t.Errorf("Ack of a resolved alert: %v, want ErrAlertResolved", err)
	}
	if _, err := a.Ack(ctx, "01NOSUCHALERT"); !errors.Is(err, alerter.ErrAlertNotFound) {
		t.Errorf("Ack of an unknown id: %v, want ErrAlertNotFound", err)
	}
	if ev := eventsOf(t, db, alerter.EventAcked); len(ev) != 1 || !strings.Contains(ev[0], al.ID) {
		t.Errorf("alert-acked events %q, want one naming the alert", ev)
	}
}

// TestMuteBoundsAndEvent: a mute lasts more than 0 and at most 24 h and
// names a known kind, else it is refused and nothing is written; an
// accepted one is recorded as an alert-muted event, holds back the kind's
// fired message until it ends, and unmute ends it early (recorded too).
func TestMuteBoundsAndEvent(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, nil, sink)
	for _, tc := range []struct {
		name string
		kind string
		d    time.Duration
		want error
	}{
		{"zero", alerts.KindClockStep, 0, alerter.ErrMuteBounds},
		{"negative", alerts.KindClockStep, -time.Hour, alerter.ErrMuteBounds},
		{"over a day", alerts.KindClockStep, 24*time.Hour + time.Millisecond, alerter.ErrMuteBounds},
		{"a week", alerts.KindClockStep, 7 * 24 * time.Hour, alerter.ErrMuteBounds},
		{"unknown kind", "no-such-kind", time.Hour, alerter.ErrUnknownKind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := a.Mute(ctx, tc.kind, tc.d, "test"); !errors.Is(err, tc.want) {
				t.Errorf("Mute(%s, %s): %v, want %v", tc.kind, tc.d, err, tc.want)
			}
		})
	}
	if ev := eventsOf(t, db, alerter.EventMuted); len(ev) != 0 {
		t.Fatalf("refused mutes recorded %q", ev)
	}
	m, err := a.Mute(ctx, alerts.KindClockStep, 24*time.Hour, "admin")
	if err != nil || !m.Until.Equal(t0.Add(24*time.Hour)) || !m.MutedAt.Equal(t0) {
		t.Fatalf("Mute 24h: %+v, %v; want until %v", m, err, t0.Add(24*time.Hour))
	}
	if ev := eventsOf(t, db, alerter.EventMuted); len(ev) != 1 || !strings.Contains(ev[0], "clock-step muted for 24h0m0s") {
		t.Fatalf("alert-muted events %q", ev)
	}
	o, err := a.List(ctx, 10)
	if err != nil || len(o.Mutes) != 1 || o.Mutes[0].Kind != alerts.KindClockStep {
		t.Fatalf("List mutes: %+v, %v", o.Mutes, err)
	}
	set(t, a, alerts.KindClockStep, platform, true)
	tick(t, a, clock)
	if n := len(sink.messages()); n != 0 {
		t.Fatalf("a muted kind sent %d messages", n)
	}
	if was, err := a.Unmute(ctx, alerts.KindClockStep, "admin"); err != nil || !was {
		t.Fatalf("Unmute: %v, %v", was, err)
	}
	if was, err := a.Unmute(ctx, alerts.KindClockStep, "admin"); err != nil || was {
		t.Fatalf("second Unmute: %v, %v; want false", was, err)
	}
	if ev := eventsOf(t, db, alerter.EventUnmuted); len(ev) != 1 {
		t.Fatalf("alert-unmuted events %q, want one", ev)
	}
	clock.Advance(alerter.RepeatCritical)
	tick(t, a, clock)
	if got := events(sink.messages()); fmt.Sprint(got) != "[repeated clock-step]" {
		t.Fatalf("an hour after the unmute: %v, want its repeat", got)
	}
}

// TestTestMessage: `admin alerts test` sends at once, outside the outbox,
// and answers each sink's outcome: delivered, or the failure's kind and
// the sink's words; a named sink alone; an unknown name or no sink at all
// is refused.
func TestTestMessage(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	ok, down, refuses := newSink("email"), newSink("webhook"), newSink("chat")
	down.setFail(func(alerts.Message) error { return errors.New("webhook: the receiver answered 500") })
	refuses.setFail(func(alerts.Message) error {
		return fmt.Errorf("chat: the receiver answered 400: %w", alerts.ErrPermanent)
	})
	a := newAlerter(t, db, clock, nil, ok, down, refuses)
	res, err := a.Test(ctx, "")
	if err != nil || len(res) != 3 {
		t.Fatalf("Test: %+v, %v", res, err)
	}
	for _, tc := range []struct {
		i                 int
		sink, kind, words string
	}{
		{0, "email", "", ""},
		{1, "webhook", "refused", "answered 500"},
		{2, "chat", "permanent", "answered 400"},
	} {
		t.Run(tc.sink, func(t *testing.T) {
			r := res[tc.i]
			if r.Sink != tc.sink || r.Delivered != (tc.kind == "") || r.Failure != tc.kind || !strings.Contains(r.Detail, tc.words) || r.MessageID == "" {
				t.Errorf("%+v, want sink %s failure %q with %q", r, tc.sink, tc.kind, tc.words)
			}
		})
	}
	if m := ok.messages(); len(m) != 1 || m[0].Event != alerts.Test || m[0].Severity != alerts.Info {
		t.Fatalf("the sink got %+v, want one test message", m)
	}
	if pending(t, db) != 0 {
		t.Error("a test message was queued in the outbox; it must bypass it")
	}
	if res, err := a.Test(ctx, "webhook"); err != nil || len(res) != 1 || res[0].Sink != "webhook" {
		t.Errorf("Test(webhook): %+v, %v", res, err)
	}
	if _, err := a.Test(ctx, "pager"); !errors.Is(err, alerter.ErrUnknownSink) {
		t.Errorf("Test(pager): %v, want ErrUnknownSink", err)
	}
	if _, err := newAlerter(t, db, clock, nil).Test(ctx, ""); !errors.Is(err, alerter.ErrNoSinks) {
		t.Errorf("Test without sinks: %v, want ErrNoSinks", err)
	}
}

// TestSinkStates: each configured sink's state says when it last
// delivered, how many messages wait, and since when it has been failing
// with which kind of failure; a sink that never had a message shows
// nothing.
func TestSinkStates(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	ok, down, idle := newSink("email"), newSink("webhook"), newSink("idle")
	a := newAlerter(t, db, clock, nil, ok, down)
	set(t, a, alerts.KindReaperOverdue, platform, true)
	tick(t, a, clock)
	delivered := clock.Now()
	down.setFail(func(alerts.Message) error { return errDown })
	clock.Advance(alerter.Coalesce)
	set(t, a, alerts.KindClockStep, platform, true)
	tick(t, a, clock)
	failedAt := clock.Now()
	clock.Advance(alerter.BackoffMax)
	tick(t, a, clock)
	st, err := a.SinkStates(ctx)
	if err != nil || len(st) != 2 {
		t.Fatalf("SinkStates: %+v, %v", st, err)
	}
	if s := st[0]; s.Name != "email" || s.Pending != 0 || !s.FailingSince.IsZero() || s.LastDeliveredAt.Before(delivered) {
		t.Errorf("email: %+v, want delivered, nothing pending, not failing", s)
	}
	if s := st[1]; s.Name != "webhook" || s.Pending != 1 || !s.FailingSince.Equal(failedAt) || s.LastError != "refused" || !s.LastDeliveredAt.Equal(delivered) {
		t.Errorf("webhook: %+v, want 1 pending, failing since %v (refused), last delivered %v", s, failedAt, delivered)
	}
	st, err = newAlerter(t, db, clock, nil, idle).SinkStates(ctx)
	if err != nil || len(st) != 1 || st[0] != (alerter.SinkState{Name: "idle"}) {
		t.Errorf("a sink without messages: %+v, %v", st, err)
	}
}
