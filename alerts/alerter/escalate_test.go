package alerter_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestEscalate: Escalate raises an open warning to critical with one fired
// message at critical; raising it again, or to warning, sends nothing; the
// escalated alert repeats hourly at critical (its stored severity, not the
// table's warning); with nothing open it opens at the given severity.
func TestEscalate(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("hook")
	a := newAlerter(t, db, clock, nil, sink)

	set(t, a, alerts.KindBudget, platform, true)
	tick(t, a, clock)
	clock.Advance(alerter.Coalesce)
	if err := a.Escalate(ctx, alerts.KindBudget, platform, alerts.Critical, "past 100 %"); err != nil {
		t.Fatal(err)
	}
	for _, sev := range []alerts.Severity{alerts.Critical, alerts.Warning} {
		if err := a.Escalate(ctx, alerts.KindBudget, platform, sev, "again"); err != nil {
			t.Fatal(err)
		}
	}
	tick(t, a, clock)
	got := sink.messages()
	if len(got) != 2 || got[0].Severity != alerts.Warning || got[1].Event != alerts.Fired || got[1].Severity != alerts.Critical ||
		got[1].Title != "[critical] budget on platform" || !strings.Contains(got[1].Text, "past 100 %") || got[1].AlertID != got[0].AlertID {
		t.Fatalf("messages %+v, want the warning then one critical fired message of the same alert", got)
	}
	clock.Advance(alerter.RepeatCritical)
	tick(t, a, clock)
	got = sink.messages()
	if len(got) != 3 || got[2].Event != alerts.Repeated || got[2].Severity != alerts.Critical || !strings.HasPrefix(got[2].Title, "[critical] budget") {
		t.Fatalf("after an hour: %+v, want a critical repeat", got[len(got)-1])
	}

	if err := a.Escalate(ctx, alerts.KindClockSuspect, platform, alerts.Warning, "opened at warning"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(alerter.Coalesce)
	tick(t, a, clock)
	got = sink.messages()
	if last := got[len(got)-1]; last.Kind != alerts.KindClockSuspect || last.Event != alerts.Fired || last.Severity != alerts.Warning {
		t.Fatalf("escalate with nothing open sent %+v, want clock-suspect fired at warning", last)
	}
	if err := a.Escalate(ctx, alerts.KindBudget, platform, alerts.Info, ""); !errors.Is(err, alerter.ErrSeverity) {
		t.Fatalf("escalate to info: %v, want ErrSeverity", err)
	}
}

// TestQueueDigest: the digest goes to each sink as one message of event
// digest and severity info, about no alert and no subject.
func TestQueueDigest(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	mail, hook := newSink("email"), newSink("webhook")
	a := newAlerter(t, db, clock, nil, mail, hook)
	if err := a.QueueDigest(context.Background(), "[digest] chalupa", "Fleet: 3 active deployments."); err != nil {
		t.Fatal(err)
	}
	tick(t, a, clock)
	for _, s := range []*fakeSink{mail, hook} {
		got := s.messages()
		if len(got) != 1 || got[0].Event != alerts.Digest || got[0].Severity != alerts.Info || got[0].AlertID != "" || got[0].Kind != "" ||
			len(got[0].Subjects) != 0 || got[0].Title != "[digest] chalupa" || got[0].Text != "Fleet: 3 active deployments." || !got[0].At.Equal(t0) {
			t.Fatalf("%s got %+v, want one digest message", s.name, got)
		}
	}
}
