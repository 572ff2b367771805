package budget_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/budget"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// nullSink is a sink that is never sent to here: the test reads the
// alerter's outbox, where each message is queued in the transaction that
// changed the condition.
type nullSink struct{}

func (nullSink) Name() string                               { return "hook" }
func (nullSink) Send(context.Context, alerts.Message) error { return nil }

// queued are the budget messages queued for the sink so far, in order.
func queued(t *testing.T, db *storage.DB) []storage.OutboxRow {
	t.Helper()
	rows, err := storage.PendingOutbox(context.Background(), db.Read, "hook", 100)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func write(t *testing.T, db *storage.DB, fn storage.TxFunc) {
	t.Helper()
	if err := db.Writer.Do(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetCrossingsOncePerMonth: past 80 % the budget alert fires once
// as a warning; past 100 % it is sent again once as critical; further
// evaluations the same month send nothing, even after the projection falls
// back; at the month's turn it resolves, and the next month's crossings
// are sent again. The message names the droplets projected to the month's
// end (held, no agent).
func TestBudgetCrossingsOncePerMonth(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(now) // 2026-12-11 00:00 UTC, 240 h into December
	al, err := alerter.New(alerter.Config{DB: db, Sinks: []alerts.Sink{nullSink{}}, Clock: clock, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	det, err := budget.New(budget.Config{DB: db, Alerts: al, BudgetUSD: 800, Clock: clock, Fresh: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	env := storagetest.Environment(t, db, storage.Environment{Slug: "web"})
	// dep1: $1 an hour ($672 a month) since December began, held by the
	// reaper into February: projected to December's end, $672 (84 %).
	storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep1", DropletID: 101, LaunchedAt: monthStart,
		IdleDeadlineAt: now.Add(time.Hour), LastHeartbeatAt: now.Add(-time.Minute)})
	write(t, db, func(tx storage.Tx) error {
		if _, err := storage.CaptureRate(ctx, tx, env.ID, "dep1", 1, 672, monthStart, monthStart); err != nil {
			return err
		}
		return storage.SetReaperHold(ctx, tx, env.ID, "dep1", storage.ReaperHold{Until: time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC),
			Reason: "contact", Evidence: "test", Max: 90 * 24 * time.Hour})
	})
	adopt := func(droplet int64, created time.Time) {
		write(t, db, func(tx storage.Tx) error {
			_, err := storage.AdoptDroplet(ctx, tx, storage.AdoptedDroplet{EnvironmentID: env.ID, DeploymentID: "droplet-" + strconv.FormatInt(droplet, 10),
				DropletID: droplet, Region: "nyc3", Size: "s-1vcpu-1gb", CreatedAt: created, HourlyUSD: 1, MonthlyUSD: 672, ObservedAt: clock.Now()})
			return err
		})
	}
	evaluate := func(step string, wantMessages int) []storage.OutboxRow {
		t.Helper()
		if _, err := det.Evaluate(ctx); err != nil {
			t.Fatalf("%s: evaluate: %v", step, err)
		}
		rows := queued(t, db)
		if len(rows) != wantMessages {
			var got []string
			for _, r := range rows {
				got = append(got, r.Event+" "+r.Severity)
			}
			t.Fatalf("%s: %d messages queued (%v), want %d", step, len(rows), got, wantMessages)
		}
		return rows
	}
	expect := func(r storage.OutboxRow, event, severity string, words ...string) {
		t.Helper()
		if r.Kind != alerts.KindBudget || r.Event != event || r.Severity != severity {
			t.Fatalf("message %s %s %s, want budget %s %s", r.Kind, r.Event, r.Severity, event, severity)
		}
		for _, w := range words {
			if !strings.Contains(r.Body, w) {
				t.Fatalf("%s message does not say %q:\n%s", event, w, r.Body)
			}
		}
	}

	rows := evaluate("84 %", 1)
	expect(rows[0], "fired", "warning", "web/dep1 (droplet 101): held", "CHALUPA_BUDGET_USD_MONTH ($800.00)", "Month 2026-12")
	clock.Advance(time.Hour)
	evaluate("84 % again", 1)

	// An adopted droplet (no agent) since Dec 10: $528 more to the month's
	// end, past 100 %.
	adopt(202, time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC))
	rows = evaluate("past 100 %", 2)
	expect(rows[1], "fired", "critical", "web/droplet-202 (droplet 202): no agent", "web/dep1 (droplet 101): held")
	clock.Advance(time.Hour)
	evaluate("past 100 % again", 2)

	// The projection falls back under 100 % and over 80 %: nothing is sent
	// again this month, and the alert stays open.
	write(t, db, func(tx storage.Tx) error {
		_, err := storage.EndDeployment(ctx, tx, env.ID, "droplet-202", clock.Now())
		return err
	})
	evaluate("fallen back", 2)
	if open, err := storage.OpenAlertFor(ctx, db.Read, alerts.KindBudget, alerts.SubjectPlatform, ""); err != nil || open.Severity != "critical" {
		t.Fatalf("the budget alert is %+v (%v), want open at critical for the month", open, err)
	}

	// January: December's alert resolves; dep1, still held, projects to
	// $672 of January (84 %): the warning is sent again.
	clock.Advance(time.Date(2027, 1, 1, 0, 30, 0, 0, time.UTC).Sub(clock.Now()))
	rows = evaluate("next month", 4)
	expect(rows[2], "resolved", "warning") // a resolved message carries the table's severity
	expect(rows[3], "fired", "warning", "Month 2027-01", "web/dep1 (droplet 101): held")
	// And the 100 % step again in January.
	adopt(303, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	rows = evaluate("next month past 100 %", 5)
	expect(rows[4], "fired", "critical", "web/droplet-303 (droplet 303): no agent")
	evaluate("next month past 100 % again", 5)
}

// TestBudgetCheckAtStart: an open budget alert still holds at start while
// its month lasts, and not once the month has turned.
func TestBudgetCheckAtStart(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClockAt(now)
	al, err := alerter.New(alerter.Config{DB: db, Clock: clock, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	det, err := budget.New(budget.Config{DB: db, Alerts: al, BudgetUSD: 10, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := al.RegisterCheck(alerts.KindBudget, det.Check); err != nil {
		t.Fatal(err)
	}
	if err := al.Set(ctx, alerts.KindBudget, alerts.Subject{Kind: alerts.SubjectPlatform}, true, "words"); err != nil {
		t.Fatal(err)
	}
	if n, err := al.Recheck(ctx); err != nil || n != 0 {
		t.Fatalf("recheck in the month resolved %d (%v), want 0", n, err)
	}
	clock.Advance(monthEnd.Add(time.Minute).Sub(clock.Now()))
	if n, err := al.Recheck(ctx); err != nil || n != 1 {
		t.Fatalf("recheck after the month resolved %d (%v), want 1", n, err)
	}
}
