package digest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/digest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

// TestScheduleNext: the digest is due once each local day at HH:MM in the
// zone: after (never at) now; across a DST change the wall-clock time
// holds (a 23- or 25-hour day), a time the spring-forward gap skips comes
// as many minutes after the gap, and a time the fall-back hour repeats
// comes once, the first time.
func TestScheduleNext(t *testing.T) {
	ny, paris := zone(t, "America/New_York"), zone(t, "Europe/Paris")
	for _, tc := range []struct {
		name      string
		h, m      int
		loc       *time.Location
		now, want time.Time
	}{
		{"UTC, later today", 7, 30, time.UTC, utc(2026, 12, 6, 6, 0), utc(2026, 12, 6, 7, 30)},
		{"UTC, at the time: tomorrow", 7, 30, time.UTC, utc(2026, 12, 6, 7, 30), utc(2026, 12, 7, 7, 30)},
		{"UTC, past the time: tomorrow", 7, 30, time.UTC, utc(2026, 12, 6, 8, 0), utc(2026, 12, 7, 7, 30)},
		{"Paris in winter (UTC+1)", 8, 0, paris, utc(2026, 12, 6, 6, 30), utc(2026, 12, 6, 7, 0)},
		{"Paris, local date ahead of UTC's", 0, 15, paris, utc(2026, 12, 6, 23, 30), utc(2026, 12, 7, 23, 15)},
		{"New York, spring-forward day: 07:30 EDT, 23 h after 07:30 EST", 7, 30, ny, utc(2027, 3, 13, 12, 30), utc(2027, 3, 14, 11, 30)},
		{"New York, 02:30 skipped by the gap: 03:30 EDT", 2, 30, ny, utc(2027, 3, 13, 17, 0), utc(2027, 3, 14, 7, 30)},
		{"New York, fall-back day: 01:30 the first time (EDT)", 1, 30, ny, utc(2026, 10, 31, 16, 0), utc(2026, 11, 1, 5, 30)},
		{"New York, after the first 01:30: not the second, the next day's", 1, 30, ny, utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)},
		{"New York, fall-back day: 07:30 EST, 25 h after 07:30 EDT", 7, 30, ny, utc(2026, 10, 31, 11, 30), utc(2026, 11, 1, 12, 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := digest.Schedule{Hour: tc.h, Minute: tc.m, Loc: tc.loc}
			if got := s.Next(tc.now); !got.Equal(tc.want) {
				t.Fatalf("Next(%v) = %v, want %v", tc.now, got.UTC(), tc.want)
			}
		})
	}
}

// TestParseSchedule: HH:MM and an IANA zone; refusals name the variable,
// never the value.
func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct{ hhmm, tz, refused string }{
		{"07:30", "", ""},
		{"23:59", "Europe/Paris", ""},
		{"24:00", "", "CHALUPA_ALERT_DIGEST"},
		{"7:30", "", "CHALUPA_ALERT_DIGEST"},
		{"07:60", "", "CHALUPA_ALERT_DIGEST"},
		{"0730", "", "CHALUPA_ALERT_DIGEST"},
		{"07:30", "Mars/Olympus_Mons", "CHALUPA_ALERT_TZ"},
		{"07:30", "Local", "CHALUPA_ALERT_TZ"},
	} {
		t.Run(tc.hhmm+" "+tc.tz, func(t *testing.T) {
			_, err := digest.ParseSchedule(tc.hhmm, tc.tz)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("error %v, want one naming %s", err, tc.refused)
			case err != nil && (strings.Contains(err.Error(), tc.hhmm) || tc.tz != "" && strings.Contains(err.Error(), tc.tz)):
				t.Fatalf("error %q carries the value", err)
			}
		})
	}
}

// recorder is a digest.Queuer that keeps what it is handed.
type recorder struct {
	mu    sync.Mutex
	texts []string
	got   chan string
}

func (r *recorder) QueueDigest(_ context.Context, title, text string) error {
	r.mu.Lock()
	r.texts = append(r.texts, title+"\n"+text)
	r.mu.Unlock()
	r.got <- title + "\n" + text
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.texts)
}

// TestRunAtTheLocalTimeOnADSTDay: the loop's one timer fires at 02:30
// America/New_York on the day that time does not exist (03:30 EDT), and the
// digest is sent once for it; the next timer is the next day's.
func TestRunAtTheLocalTimeOnADSTDay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := storagetest.NewDB(t)
	storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: utc(2027, 3, 13, 10, 0)})
	clock := clockwork.NewFakeClockAt(utc(2027, 3, 13, 17, 0)) // 12:00 EST
	rec := &recorder{got: make(chan string, 4)}
	d, err := digest.New(digest.Config{DB: db, Alerts: rec, Clock: clock, Log: zerolog.Nop(),
		Schedule: digest.Schedule{Hour: 2, Minute: 30, Loc: zone(t, "America/New_York")}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	due := utc(2027, 3, 14, 7, 30) // 03:30 EDT
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(due.Add(-time.Second).Sub(clock.Now()))
	clock.Advance(time.Second)
	text := <-rec.got
	if !strings.Contains(text, "Daily digest for the day to 2027-03-14 03:30 EDT") || !strings.Contains(text, "Fleet: 1 active deployments in 1 environments.") {
		t.Fatalf("digest:\n%s", text)
	}
	// The next timer is set (the next day's); no second digest was sent.
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := rec.count(); n != 1 {
		t.Fatalf("%d digests sent, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDigestContentsAndSilence: with nothing to say (no active
// deployment, nothing reaped in the day, no open alert) no digest is
// queued; otherwise one message of event digest reaches each sink with the
// fleet, the day's destroys, the month's cost to date and the open alerts.
func TestDigestContentsAndSilence(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	at := utc(2026, 12, 6, 7, 30)
	clock := clockwork.NewFakeClockAt(at)
	al, err := alerter.New(alerter.Config{DB: db, Sinks: []alerts.Sink{sinkNamed("email"), sinkNamed("webhook")}, Clock: clock, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := digest.New(digest.Config{DB: db, Alerts: al, Clock: clock, Schedule: digest.Schedule{Hour: 7, Minute: 30}})
	if err != nil {
		t.Fatal(err)
	}
	// A deployment that ended two days ago and an alert long resolved:
	// nothing to say today.
	old := storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: at.Add(-72 * time.Hour), Status: storage.DeploymentEnded})
	if sent, err := d.Send(ctx, at); err != nil || sent {
		t.Fatalf("quiet day: sent %v (%v), want nothing", sent, err)
	}
	if rows := outbox(t, db); len(rows) != 0 {
		t.Fatalf("quiet day queued %d messages", len(rows))
	}

	live := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: old.EnvironmentID, LaunchedAt: at.Add(-2 * time.Hour)})
	storagetest.Deployment(t, db, storage.Deployment{LaunchedAt: at.Add(-time.Hour)})
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		if _, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{ID: "reaped-1", EnvironmentID: live.EnvironmentID, DeploymentID: old.ID,
			Kind: "reaper-destroyed", Reason: "idle", OccurredAt: at.Add(-3 * time.Hour)}); err != nil {
			return err
		}
		_, err := storage.InsertCostSnapshot(ctx, tx, storage.CostSnapshot{Trigger: storage.CostTriggerSchedule, StartedAt: at.Add(-15 * time.Minute),
			Month: "2026-12", TotalUSD: 12.344})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := al.Set(ctx, alerts.KindClockSuspect, alerts.Subject{Kind: alerts.SubjectPlatform}, true, "words"); err != nil {
		t.Fatal(err)
	}
	if sent, err := d.Send(ctx, at); err != nil || !sent {
		t.Fatalf("sent %v (%v), want a digest", sent, err)
	}
	var digests []storage.OutboxRow
	for _, r := range outbox(t, db) {
		if r.AlertID == "" {
			digests = append(digests, r)
		}
	}
	if len(digests) != 2 || digests[0].Sink != "email" || digests[1].Sink != "webhook" {
		t.Fatalf("digest rows %+v, want one per sink", digests)
	}
	for _, r := range digests {
		if r.Event != string(alerts.Digest) || r.Severity != string(alerts.Info) || r.AlertID != "" {
			t.Fatalf("row %+v, want a digest at info about no alert", r)
		}
		for _, w := range []string{"Fleet: 2 active deployments in 2 environments.", "Reaped: 1 deployments destroyed by the reaper since 2026-12-05 07:30 UTC.",
			"Cost to date (2026-12, UTC month, estimate): $12.34", "Open alerts: 1.", "[critical] clock-suspect on platform"} {
			if !strings.Contains(r.Body, w) {
				t.Fatalf("digest does not say %q:\n%s", w, r.Body)
			}
		}
	}
}

type sinkNamed string

func (s sinkNamed) Name() string                             { return string(s) }
func (sinkNamed) Send(context.Context, alerts.Message) error { return nil }

// outbox is every queued message of both sinks, in queue order.
func outbox(t *testing.T, db *storage.DB) []storage.OutboxRow {
	t.Helper()
	var out []storage.OutboxRow
	for _, s := range []string{"email", "webhook"} {
		rows, err := storage.PendingOutbox(context.Background(), db.Read, s, 100)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rows...)
	}
	return out
}
