package alerter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

var (
	t0       = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	platform = alerts.Subject{Kind: alerts.SubjectPlatform}
	errDown  = errors.New("receiver down")
)

// fakeSink records the messages it accepted; fail, when set, decides a
// send's error first; block, when set, holds a send until its context ends.
type fakeSink struct {
	name    string
	mu      sync.Mutex
	got     []alerts.Message
	tries   []string // every attempted id, in order
	fail    func(m alerts.Message) error
	block   atomic.Bool
	entered chan string
}

func newSink(name string) *fakeSink { return &fakeSink{name: name, entered: make(chan string, 10000)} }

func (s *fakeSink) Name() string { return s.name }

func (s *fakeSink) Send(ctx context.Context, m alerts.Message) error {
	s.entered <- m.ID
	if s.block.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries = append(s.tries, m.ID)
	if s.fail != nil {
		if err := s.fail(m); err != nil {
			return err
		}
	}
	s.got = append(s.got, m)
	return nil
}

func (s *fakeSink) messages() []alerts.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]alerts.Message(nil), s.got...)
}

func (s *fakeSink) setFail(f func(alerts.Message) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

func newAlerter(t *testing.T, db *storage.DB, clock clockwork.Clock, write func(context.Context, storage.TxFunc) error, sinks ...alerts.Sink) *alerter.Alerter {
	t.Helper()
	a, err := alerter.New(alerter.Config{DB: db, Sinks: sinks, Clock: clock, Log: zerolog.Nop(), Write: write, Rand: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tick lets new messages settle (alerter.Settle), runs one tick and waits
// for the sends it started.
func tick(t *testing.T, a *alerter.Alerter, clock *clockwork.FakeClock) alerter.Result {
	t.Helper()
	clock.Advance(alerter.Settle)
	res, err := a.Tick(context.Background())
	if err != nil {
		t.Fatalf("tick: %v", err)
	}
	a.Wait()
	return res
}

func set(t *testing.T, a *alerter.Alerter, kind string, s alerts.Subject, holds bool) {
	t.Helper()
	if err := a.Set(context.Background(), kind, s, holds, "detail words"); err != nil {
		t.Fatalf("set %s %v %v: %v", kind, s, holds, err)
	}
}

func events(ms []alerts.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Event)+" "+m.Kind)
	}
	return out
}

func pending(t *testing.T, db *storage.DB) int {
	t.Helper()
	n, err := storage.OutboxPendingCount(context.Background(), db.Read)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFireRepeatResolve: a condition fires once, a Set that finds it
// already holding writes nothing, it repeats hourly (critical) and daily
// (warning) and resolves with one message; with nothing open the worker
// needs no timer.
func TestFireRepeatResolve(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, nil, sink)

	if res := tick(t, a, clock); !res.Next.IsZero() {
		t.Fatalf("nothing open: next wake-up %v, want none", res.Next)
	}
	set(t, a, alerts.KindClockSuspect, platform, true)
	set(t, a, alerts.KindQuotaExceeded, alerts.Subject{Kind: alerts.SubjectEnvironment, ID: "prod"}, true)
	set(t, a, alerts.KindClockSuspect, platform, true) // already holds: nothing
	if n := pending(t, db); n != 2 {
		t.Fatalf("pending after two conditions and a repeated Set: %d, want 2", n)
	}
	tick(t, a, clock)
	if got := events(sink.messages()); len(got) != 2 {
		t.Fatalf("fired: %v", got)
	}
	for _, m := range sink.messages() {
		if m.Event != alerts.Fired || m.AlertID == "" || m.Text == "" {
			t.Errorf("fired message %+v", m)
		}
		if !strings.Contains(m.Text, "First thing to do: ") {
			t.Errorf("fired message without its first action: %q", m.Text)
		}
	}
	clock.Advance(59 * time.Minute)
	if res := tick(t, a, clock); len(res.Dispatched) != 0 {
		t.Fatalf("59 min: dispatched %v, want nothing", res.Dispatched)
	}
	clock.Advance(time.Minute)
	res := tick(t, a, clock)
	if got := events(sink.messages()); len(got) != 3 || got[2] != "repeated clock-suspect" {
		t.Fatalf("after an hour: %v, want the critical one repeated", got)
	}
	if m := sink.messages()[2]; !strings.Contains(m.Text, "First thing to do: ") {
		t.Errorf("repeated message without its first action: %q", m.Text)
	}
	if want := clock.Now().Add(alerter.RepeatCritical); !res.Next.Equal(want) {
		t.Errorf("next wake-up %v, want the next repeat %v", res.Next, want)
	}
	clock.Advance(23 * time.Hour)
	tick(t, a, clock)
	var warnRepeats int
	for _, m := range sink.messages() {
		if m.Event == alerts.Repeated && m.Kind == alerts.KindQuotaExceeded {
			warnRepeats++
		}
	}
	if warnRepeats != 1 {
		t.Fatalf("after a day: %d warning repeats, want 1 (%v)", warnRepeats, events(sink.messages()))
	}
	set(t, a, alerts.KindClockSuspect, platform, false)
	set(t, a, alerts.KindQuotaExceeded, alerts.Subject{Kind: alerts.SubjectEnvironment, ID: "prod"}, false)
	set(t, a, alerts.KindClockSuspect, platform, false) // already ended: nothing
	clock.Advance(alerter.Coalesce)
	tick(t, a, clock)
	n := len(sink.messages())
	last := sink.messages()[n-2:]
	for _, m := range last {
		if m.Event != alerts.Resolved {
			t.Errorf("last messages %v, want the two resolutions", events(last))
		}
		// A resolution tells what ended, not what to do.
		if strings.Contains(m.Text, "First thing to do") || !strings.Contains(m.Text, "What it means: ") {
			t.Errorf("resolved message tells the operator to act, or lost its meaning: %q", m.Text)
		}
	}
	if res := tick(t, a, clock); !res.Next.IsZero() {
		t.Errorf("all resolved and delivered: next wake-up %v, want none", res.Next)
	}
}

// TestSameIDAcrossRetriesAndRestart: a message committed with its
// condition but not delivered before a "crash" (the database closed and
// opened again, a new alerter) is delivered after the restart with the id
// it was committed with, and every retry carries the same id.
func TestSameIDAcrossRetriesAndRestart(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	a := newAlerter(t, db, clock, nil, newSink("webhook"))
	set(t, a, alerts.KindReaperOverdue, platform, true)
	rows, err := storage.PendingOutbox(ctx, db.Read, "webhook", 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("pending %v %v", rows, err)
	}
	id := rows[0].ID
	path := db.Path
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db2, err := storage.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db2.Close() })
	sink := newSink("webhook")
	fails := 2
	sink.setFail(func(alerts.Message) error {
		if fails > 0 {
			fails--
			return errDown
		}
		return nil
	})
	a2 := newAlerter(t, db2, clock, nil, sink)
	for i := 0; i < 10 && len(sink.messages()) == 0; i++ {
		tick(t, a2, clock)
		clock.Advance(alerter.BackoffMax)
	}
	if len(sink.tries) < 3 || sink.tries[0] != id || sink.tries[1] != id || sink.tries[2] != id {
		t.Fatalf("tries %v, want the committed id %s three times (two failures, one delivery)", sink.tries, id)
	}
	if got := sink.messages(); len(got) == 0 || got[0].ID != id || got[0].Event != alerts.Fired {
		t.Fatalf("delivered %v, want the fired message %s first", events(got), id)
	}
}

// TestSinkDownTenMinutes: a sink down for 10 minutes, then back, receives
// every message once per id, in order per subject.
func TestSinkDownTenMinutes(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("email")
	sink.setFail(func(alerts.Message) error {
		if clock.Now().Before(t0.Add(10 * time.Minute)) {
			return errDown
		}
		return nil
	})
	a := newAlerter(t, db, clock, nil, sink)
	subjects := []alerts.Subject{{Kind: alerts.SubjectBox, ID: "b1"}, {Kind: alerts.SubjectBox, ID: "b2"}}
	for i, s := range subjects {
		set(t, a, alerts.KindAgentUpgradeFailed, s, true)
		tick(t, a, clock)
		clock.Advance(time.Minute)
		set(t, a, alerts.KindJobFailed, s, true)
		tick(t, a, clock)
		clock.Advance(time.Minute)
		if i == 0 {
			set(t, a, alerts.KindAgentUpgradeFailed, s, false)
		}
		tick(t, a, clock)
	}
	for i := 0; i < 120 && pending(t, db) > 0; i++ {
		clock.Advance(30 * time.Second)
		tick(t, a, clock)
	}
	if n := pending(t, db); n != 0 {
		t.Fatalf("%d messages still pending an hour after the sink came back", n)
	}
	seen := map[string]int{}
	order := map[string][]string{}
	for _, m := range sink.messages() {
		seen[m.ID]++
		for _, s := range m.Subjects {
			order[s.String()] = append(order[s.String()], string(m.Event)+" "+m.Kind)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
	// Messages that waited together are coalesced (one per event and
	// kind); each subject still hears everything, in order.
	for subject, want := range map[string][]string{
		"box b1": {"fired agent-upgrade-failed", "fired job-failed", "resolved agent-upgrade-failed"},
		"box b2": {"fired agent-upgrade-failed", "fired job-failed"},
	} {
		if got := order[subject]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s's messages in order %v, want %v", subject, got, want)
		}
	}
	for _, m := range sink.messages() {
		if m.At.After(t0.Add(10*time.Minute)) || m.ID == "" {
			t.Errorf("message %s stamped %v, want its condition's time", m.ID, m.At)
		}
	}
}

// TestFailingSinkDoesNotDelayAnother: a sink whose send hangs holds only
// its own goroutine: another sink receives the same alert while it hangs,
// and the hung send ends at SendTimeout as a timeout, retried later.
func TestFailingSinkDoesNotDelayAnother(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	slow, fast := newSink("slow"), newSink("fast")
	slow.block.Store(true)
	a := newAlerter(t, db, clock, nil, slow, fast)
	set(t, a, alerts.KindDiskLow, platform, true)
	clock.Advance(alerter.Settle)
	ticked := make(chan error, 1)
	go func() { _, err := a.Tick(ctx); ticked <- err }() // a tick that waited for the slow sink would hang here
	<-slow.entered                                       // the slow sink's send is under way and hangs
	select {
	case <-fast.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the fast sink got nothing while the slow one hung")
	}
	// The tick, Set and the writer are not held either.
	select {
	case err := <-ticked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tick waited for the slow sink")
	}
	set(t, a, alerts.KindClockSuspect, platform, true)
	if _, err := a.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	clock.BlockUntilContext(ctx, 1) // the slow send's timeout timer
	clock.Advance(alerter.SendTimeout)
	a.Wait()
	rows, err := storage.PendingOutbox(ctx, db.Read, "slow", 10)
	if err != nil || len(rows) != 2 {
		t.Fatalf("slow sink's pending %d %v, want both", len(rows), err)
	}
	if rows[0].Attempts != 1 || rows[0].LastError != "timeout" {
		t.Errorf("slow sink's first message: %d attempts, error %q; want 1, timeout", rows[0].Attempts, rows[0].LastError)
	}
}

// TestExpiryRaisesDeliveryFailing: a message undelivered for 24 h expires
// and raises one alert-delivery-failing condition, which resolves once the
// sink delivers again.
func TestExpiryRaisesDeliveryFailing(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	sink.setFail(func(alerts.Message) error { return errDown })
	a := newAlerter(t, db, clock, nil, sink)
	set(t, a, alerts.KindReaperTokenRefused, platform, true)
	rows, _ := storage.PendingOutbox(ctx, db.Read, "webhook", 10)
	id := rows[0].ID
	for clock.Now().Before(t0.Add(alerter.MaxAge - time.Minute)) {
		tick(t, a, clock)
		clock.Advance(10 * time.Minute)
	}
	if _, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindAlertDeliveryFailing, alerts.SubjectPlatform, ""); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("alert-delivery-failing before 24 h: %v", err)
	}
	clock.Advance(time.Minute)
	res := tick(t, a, clock)
	if fmt.Sprint(res.Expired) != "[webhook]" {
		t.Fatalf("expired %v, want [webhook]", res.Expired)
	}
	row, err := storage.OutboxByID(ctx, db.Read, id)
	if err != nil || row.ExpiredAt.IsZero() {
		t.Fatalf("message after 24 h: %+v %v, want expired", row, err)
	}
	open, err := storage.OpenAlerts(ctx, db.Read)
	if err != nil {
		t.Fatal(err)
	}
	var failing int
	for _, al := range open {
		if al.Kind == alerts.KindAlertDeliveryFailing {
			failing++
		}
	}
	if failing != 1 {
		t.Fatalf("%d open alert-delivery-failing alerts, want 1", failing)
	}
	sink.setFail(nil)
	clock.Advance(alerter.BackoffMax)
	tick(t, a, clock)
	if _, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindAlertDeliveryFailing, alerts.SubjectPlatform, ""); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("alert-delivery-failing after the sink delivered again: %v, want resolved", err)
	}
}

// TestStorm: 1,000 conditions starting together go out as one message per
// sink naming alerts.MaxSubjects subjects and counting the rest.
func TestStorm(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	email, hook := newSink("email"), newSink("webhook")
	a := newAlerter(t, db, clock, nil, email, hook)
	for i := 0; i < 1000; i++ {
		set(t, a, alerts.KindMassDue, alerts.Subject{Kind: alerts.SubjectDeployment, ID: fmt.Sprintf("d%04d", i)}, true)
	}
	tick(t, a, clock)
	for _, s := range []*fakeSink{email, hook} {
		got := s.messages()
		if len(got) != 1 {
			t.Fatalf("%s received %d messages, want 1", s.name, len(got))
		}
		m := got[0]
		if len(m.Subjects) != alerts.MaxSubjects || m.More != 1000-alerts.MaxSubjects || m.Kind != alerts.KindMassDue || m.Event != alerts.Fired {
			t.Errorf("%s: %d subjects, %d more, %s %s; want %d, %d, fired %s", s.name, len(m.Subjects), m.More, m.Event, m.Kind,
				alerts.MaxSubjects, 1000-alerts.MaxSubjects, alerts.KindMassDue)
		}
		if len(m.Text) > alerter.MaxBody {
			t.Errorf("%s: body %d bytes, over the cap", s.name, len(m.Text))
		}
	}
	if n := pending(t, db); n != 0 {
		t.Errorf("%d messages pending after the storm's message", n)
	}
	if m := hook.messages()[0]; !strings.Contains(m.Text, "First thing to do: ") {
		t.Errorf("the storm's fired message lacks the first thing to do: %q", m.Text)
	}
	// Their end goes as one resolved message, which tells what ended, not
	// what to do.
	for i := 0; i < 1000; i++ {
		set(t, a, alerts.KindMassDue, alerts.Subject{Kind: alerts.SubjectDeployment, ID: fmt.Sprintf("d%04d", i)}, false)
	}
	clock.Advance(alerter.Coalesce)
	tick(t, a, clock)
	got := hook.messages()
	if len(got) != 2 || got[1].Event != alerts.Resolved {
		t.Fatalf("after the end: %v, want one resolved message", events(got))
	}
	if strings.Contains(got[1].Text, "First thing to do") || !strings.Contains(got[1].Text, "What it means: ") {
		t.Errorf("the storm's resolved message tells the operator to act, or lost its meaning: %q", got[1].Text)
	}
}

// TestRateCap: a sink gets RateCap messages in an hour; the rest wait for
// the window and go as one "n more" message.
func TestRateCap(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, nil, sink)
	for i := 0; i < alerter.RateCap+5; i++ {
		set(t, a, alerts.KindJobFailed, alerts.Subject{Kind: alerts.SubjectBox, ID: fmt.Sprintf("b%02d", i)}, true)
		tick(t, a, clock)
		clock.Advance(alerter.Coalesce)
	}
	if n := len(sink.messages()); n != alerter.RateCap {
		t.Fatalf("%d messages within the hour, want the cap %d", n, alerter.RateCap)
	}
	clock.Advance(alerter.RateWindow - time.Duration(alerter.RateCap+5)*alerter.Coalesce)
	tick(t, a, clock)
	got := sink.messages()
	if len(got) != alerter.RateCap+1 {
		t.Fatalf("%d messages after the hour, want %d (one \"n more\")", len(got), alerter.RateCap+1)
	}
	last := got[len(got)-1]
	if len(last.Subjects) != 5 || last.Title != "[warning] 5 more alert messages" {
		t.Errorf("the n-more message: %q with %d subjects", last.Title, len(last.Subjects))
	}
}

// TestRecheckAtStart: at start each open alert is evaluated again through
// its kind's check; one whose condition ended while chalupa was down
// resolves, one that still holds stays open.
func TestRecheckAtStart(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, nil, sink)
	set(t, a, alerts.KindClockSuspect, platform, true)
	set(t, a, alerts.KindReplicaFailing, platform, true)
	tick(t, a, clock)

	a2 := newAlerter(t, db, clock, nil, sink)
	for kind, holds := range map[string]bool{alerts.KindClockSuspect: false, alerts.KindReplicaFailing: true} {
		if err := a2.RegisterCheck(kind, func(context.Context, alerts.Subject) (bool, string, error) { return holds, "", nil }); err != nil {
			t.Fatal(err)
		}
	}
	n, err := a2.Recheck(ctx)
	if err != nil || n != 1 {
		t.Fatalf("recheck resolved %d (%v), want 1", n, err)
	}
	if _, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindClockSuspect, alerts.SubjectPlatform, ""); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("clock-suspect after the re-check: %v, want resolved", err)
	}
	if _, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindReplicaFailing, alerts.SubjectPlatform, ""); err != nil {
		t.Errorf("replica-failing after the re-check: %v, want open", err)
	}
	clock.Advance(alerter.Coalesce)
	tick(t, a2, clock)
	got := sink.messages()
	if last := got[len(got)-1]; last.Event != alerts.Resolved || last.Kind != alerts.KindClockSuspect {
		t.Errorf("last message %s %s, want clock-suspect resolved", last.Event, last.Kind)
	}
}

// TestMemoryPath: while the writer refuses, a storage fault's alert is
// held in memory and sent directly; once writes return it is recorded with
// the same message id, delivered, and not sent again. A kind not marked
// Memory gets the write's error.
func TestMemoryPath(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	var refuse atomic.Bool
	refuse.Store(true)
	write := func(ctx context.Context, fn storage.TxFunc) error {
		if refuse.Load() {
			return errors.New("disk I/O error")
		}
		return db.Writer.Do(ctx, fn)
	}
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, write, sink)
	if err := a.Set(ctx, alerts.KindJobFailed, alerts.Subject{Kind: alerts.SubjectBox, ID: "b1"}, true, ""); err == nil {
		t.Fatal("job-failed with a refusing writer: nil error, want the write's")
	}
	set(t, a, alerts.KindStorageUnavailable, platform, true)
	set(t, a, alerts.KindStorageUnavailable, platform, true) // holds: nothing
	if _, err := a.Tick(ctx); err == nil {
		t.Error("tick while the writer refuses: nil error, want the write's")
	}
	a.Wait()
	got := sink.messages()
	if len(got) != 1 || got[0].Kind != alerts.KindStorageUnavailable || got[0].Event != alerts.Fired {
		t.Fatalf("sent while storage refuses: %v, want the storage-unavailable alert", events(got))
	}
	if open, err := storage.OpenAlerts(ctx, db.Read); err != nil || len(open) != 0 {
		t.Fatalf("alerts in the database while it refuses writes: %v %v", open, err)
	}
	refuse.Store(false)
	res := tick(t, a, clock)
	if res.Recorded != 1 {
		t.Fatalf("recorded %d held alerts once writes returned, want 1", res.Recorded)
	}
	al, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindStorageUnavailable, alerts.SubjectPlatform, "")
	if err != nil || al.ID != got[0].AlertID {
		t.Fatalf("recorded alert %+v %v, want id %s", al, err, got[0].AlertID)
	}
	row, err := storage.OutboxByID(ctx, db.Read, got[0].ID)
	if err != nil || row.DeliveredAt.IsZero() {
		t.Fatalf("recorded message %+v %v, want delivered with the same id", row, err)
	}
	clock.Advance(time.Minute)
	set(t, a, alerts.KindStorageUnavailable, platform, false)
	clock.Advance(alerter.Coalesce)
	tick(t, a, clock)
	if got := events(sink.messages()); fmt.Sprint(got) != "[fired storage-unavailable resolved storage-unavailable]" {
		t.Errorf("messages %v, want one fired and one resolved", got)
	}
}

// TestRunWokenBySetAndMetrics: Run, idle with nothing open, is woken by
// Set (the fake clock never moves) and delivers; the metrics count the
// delivery, the failure, the pending message and the open alert.
func TestRunWokenBySetAndMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	ok, down := newSink("email"), newSink("webhook")
	down.setFail(func(alerts.Message) error { return errDown })
	reg := prometheus.NewRegistry()
	a, err := alerter.New(alerter.Config{DB: db, Sinks: []alerts.Sink{ok, down}, Clock: clock, Log: zerolog.Nop(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	set(t, a, alerts.KindReaperOverdue, platform, true)
	// Woken by Set, the worker lets the message settle on a timer.
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(alerter.Settle)
	<-ok.entered
	<-down.entered
	want := map[string]float64{
		`chalupa_alerts_delivered_total{sink="email"}`:   1,
		`chalupa_alerts_delivered_total{sink="webhook"}`: 0,
		`chalupa_alerts_failed_total{sink="email"}`:      0,
		`chalupa_alerts_failed_total{sink="webhook"}`:    1,
		`chalupa_alerts_open{severity="critical"}`:       1,
		`chalupa_alerts_open{severity="warning"}`:        0,
		`chalupa_alerts_pending`:                         1,
	}
	// The worker ticks again when the sends return; wait for the gauges
	// it sets then (evidence, not a sleep of a guessed length).
	var got map[string]float64
	for i := 0; i < 1000; i++ {
		got = gather(t, reg)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}

// gather returns reg's alert series as `name{label="value"}` → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			switch {
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestMemoryPathFlaps: a storage fault that ends and starts again while
// the writer refuses sends each change directly, in order, and is recorded
// as two alerts (the first resolved, the second open) when writes return,
// with nothing sent twice.
func TestMemoryPathFlaps(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	var refuse atomic.Bool
	refuse.Store(true)
	write := func(ctx context.Context, fn storage.TxFunc) error {
		if refuse.Load() {
			return errors.New("database or disk is full")
		}
		return db.Writer.Do(ctx, fn)
	}
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, write, sink)
	for _, holds := range []bool{true, false, true} {
		set(t, a, alerts.KindDiskLow, platform, holds)
		a.Tick(ctx) //nolint:errcheck // the writer refuses; the held messages still go
		a.Wait()
		clock.Advance(time.Minute)
	}
	if got := events(sink.messages()); fmt.Sprint(got) != "[fired disk-low resolved disk-low fired disk-low]" {
		t.Fatalf("sent while the writer refuses: %v", got)
	}
	refuse.Store(false)
	if res := tick(t, a, clock); res.Recorded != 2 {
		t.Fatalf("recorded %d held alerts, want 2", res.Recorded)
	}
	open, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindDiskLow, alerts.SubjectPlatform, "")
	if err != nil || open.ID != sink.messages()[2].AlertID {
		t.Fatalf("open disk-low alert %+v %v, want the second one", open, err)
	}
	first, err := storage.AlertByID(ctx, db.Read, sink.messages()[0].AlertID)
	if err != nil || first.ResolvedAt.IsZero() {
		t.Fatalf("first disk-low alert %+v %v, want resolved", first, err)
	}
	clock.Advance(alerter.BackoffMax)
	tick(t, a, clock)
	if n := len(sink.messages()); n != 3 {
		t.Errorf("%d messages after recording, want the 3 sent directly and no more", n)
	}
}

// TestAckAndMuteStopRepeats: an acknowledged alert stops repeating until
// it resolves; a muted kind's alert opens without a message.
func TestAckAndMuteStopRepeats(t *testing.T) {
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
	muteEnd := clock.Now().Add(2 * time.Hour)
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		if err := storage.AckAlert(ctx, tx, al.ID, clock.Now()); err != nil {
			return err
		}
		return storage.MuteAlertKind(ctx, tx, alerts.KindClockStep, muteEnd, clock.Now())
	}); err != nil {
		t.Fatal(err)
	}
	set(t, a, alerts.KindClockStep, platform, true)
	clock.Advance(90 * time.Minute)
	if res := tick(t, a, clock); !res.Next.Equal(muteEnd) {
		t.Errorf("only an acknowledged alert and a muted one open: next wake-up %v, want the mute's end", res.Next)
	}
	if got := events(sink.messages()); fmt.Sprint(got) != "[fired reaper-overdue]" {
		t.Errorf("messages %v, want only the first fired (acknowledged: no repeat; muted: no fired)", got)
	}
	clock.Advance(time.Hour)
	tick(t, a, clock)
	if got := events(sink.messages()); fmt.Sprint(got) != "[fired reaper-overdue repeated clock-step]" {
		t.Errorf("after the mute: %v, want the muted alert's repeat", got)
	}
}

// TestStormArrivingOverSeconds: a storm a detector raises over a few
// seconds, with the worker ticking meanwhile, still goes as one message
// per sink: new messages wait until none has come for alerter.Settle.
func TestStormArrivingOverSeconds(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, nil, sink)
	for batch := 0; batch < 4; batch++ {
		for i := 0; i < 50; i++ {
			set(t, a, alerts.KindMassDue, alerts.Subject{Kind: alerts.SubjectEnvironment, ID: fmt.Sprintf("env%d-%02d", batch, i)}, true)
		}
		clock.Advance(alerter.Settle / 2)
		res, err := a.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a.Wait()
		if len(res.Dispatched) != 0 || !res.Next.Equal(clock.Now().Add(alerter.Settle/2)) {
			t.Fatalf("batch %d: dispatched %v, next %v; want nothing until the storm settles", batch, res.Dispatched, res.Next)
		}
	}
	tick(t, a, clock)
	got := sink.messages()
	if len(got) != 1 || len(got[0].Subjects) != alerts.MaxSubjects || got[0].More != 200-alerts.MaxSubjects {
		t.Fatalf("received %d messages (first: %d subjects, %d more), want one naming %d and counting %d",
			len(got), len(got[0].Subjects), got[0].More, alerts.MaxSubjects, 200-alerts.MaxSubjects)
	}
}

// TestBodyCap: a detail larger than alerter.MaxBody is cut to the cap, on
// a rune boundary, saying so.
func TestBodyCap(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(t0)
	sink := newSink("webhook")
	a := newAlerter(t, db, clock, nil, sink)
	detail := strings.Repeat("é", alerter.MaxBody) // two bytes each
	if err := a.Set(ctx, alerts.KindJobFailed, alerts.Subject{Kind: alerts.SubjectBox, ID: "b1"}, true, detail); err != nil {
		t.Fatal(err)
	}
	tick(t, a, clock)
	got := sink.messages()
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	text := got[0].Text
	if len(text) > alerter.MaxBody || !utf8.ValidString(text) || !strings.Contains(text, "cut to the size cap") {
		t.Errorf("text of %d bytes (valid UTF-8 %v), want at most %d, cut and saying so", len(text), utf8.ValidString(text), alerter.MaxBody)
	}
}
