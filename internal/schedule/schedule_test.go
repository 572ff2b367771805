package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

type row struct {
	name string
	now  time.Time
	want time.Time
}

func run(t *testing.T, s Schedule, rows []row) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got := s.Next(r.now)
			if !got.Equal(r.want) {
				t.Fatalf("Next(%s) = %s, want %s", r.now.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano), r.want.Format(time.RFC3339Nano))
			}
			if !got.After(r.now) {
				t.Fatalf("Next(%s) = %s is not strictly after now", r.now, got)
			}
		})
	}
}

var (
	ist    = time.FixedZone("IST", 5*3600+1800) // +05:30: "minute past the hour" differs from UTC
	nepal  = time.FixedZone("NPT", 5*3600+2700) // +05:45
	behind = time.FixedZone("-03", -3*3600)
)

func TestHourlyAt43(t *testing.T) {
	run(t, HourlyAt(43), []row{
		{"exactly at :43 runs next hour", at("2026-03-10T10:43:00Z"), at("2026-03-10T11:43:00Z")},
		{"one ns before :43", at("2026-03-10T10:42:59.999999999Z"), at("2026-03-10T10:43:00Z")},
		{"one ns after :43", at("2026-03-10T10:43:00.000000001Z"), at("2026-03-10T11:43:00Z")},
		{"top of the hour", at("2026-03-10T10:00:00Z"), at("2026-03-10T10:43:00Z")},
		{"between :43 and the hour", at("2026-03-10T10:50:00Z"), at("2026-03-10T11:43:00Z")},
		{"hour rollover one ns before the hour", at("2026-03-10T10:59:59.999999999Z"), at("2026-03-10T11:43:00Z")},
		{"day rollover", at("2026-03-10T23:50:00Z"), at("2026-03-11T00:43:00Z")},
		{"exactly 23:43 rolls the day", at("2026-03-10T23:43:00Z"), at("2026-03-11T00:43:00Z")},
		{"month and year rollover", at("2025-12-31T23:44:00Z"), at("2026-01-01T00:43:00Z")},
		{"leap day", at("2028-02-28T23:59:00Z"), at("2028-02-29T00:43:00Z")},
		{"half-hour zone is judged in UTC", at("2026-03-10T16:00:00+05:30"), at("2026-03-10T10:43:00Z")},
		{"half-hour zone at its local :43", time.Date(2026, 3, 10, 16, 43, 0, 0, ist), at("2026-03-10T11:43:00Z")},
		{"negative offset zone", time.Date(2026, 3, 10, 7, 43, 0, 0, behind), at("2026-03-10T11:43:00Z")},
	})
}

func TestHourlyAtEdgeMinutes(t *testing.T) {
	t.Run("minute 0", func(t *testing.T) {
		run(t, HourlyAt(0), []row{
			{"exactly on the hour", at("2026-03-10T10:00:00Z"), at("2026-03-10T11:00:00Z")},
			{"one ns before the hour", at("2026-03-10T10:59:59.999999999Z"), at("2026-03-10T11:00:00Z")},
			{"midnight", at("2026-03-10T23:30:00Z"), at("2026-03-11T00:00:00Z")},
		})
	})
	t.Run("minute 59", func(t *testing.T) {
		run(t, HourlyAt(59), []row{
			{"exactly at :59", at("2026-03-10T10:59:00Z"), at("2026-03-10T11:59:00Z")},
			{"one ns before :59", at("2026-03-10T10:58:59.999999999Z"), at("2026-03-10T10:59:00Z")},
			{"top of the hour", at("2026-03-10T11:00:00Z"), at("2026-03-10T11:59:00Z")},
		})
	})
}

func TestEveryAlignedQuarterHour(t *testing.T) {
	run(t, EveryAligned(15*time.Minute), []row{
		{"exactly on the hour", at("2026-03-10T10:00:00Z"), at("2026-03-10T10:15:00Z")},
		{"one ns before :15", at("2026-03-10T10:14:59.999999999Z"), at("2026-03-10T10:15:00Z")},
		{"exactly at :15", at("2026-03-10T10:15:00Z"), at("2026-03-10T10:30:00Z")},
		{"one ns after :30", at("2026-03-10T10:30:00.000000001Z"), at("2026-03-10T10:45:00Z")},
		{"exactly :45 rolls the hour", at("2026-03-10T10:45:00Z"), at("2026-03-10T11:00:00Z")},
		{"day rollover", at("2026-03-10T23:59:59Z"), at("2026-03-11T00:00:00Z")},
		{"year rollover", at("2025-12-31T23:45:00Z"), at("2026-01-01T00:00:00Z")},
		{"quarter-hour zone is judged in UTC", time.Date(2026, 3, 10, 12, 0, 0, 0, nepal), at("2026-03-10T06:30:00Z")},
	})
}

func TestEveryIsRelative(t *testing.T) {
	run(t, Every(10*time.Minute), []row{
		{"on a round time", at("2026-03-10T10:00:00Z"), at("2026-03-10T10:10:00Z")},
		{"off a round time: not aligned", at("2026-03-10T10:03:07.5Z"), at("2026-03-10T10:13:07.5Z")},
		{"day rollover", at("2026-03-10T23:55:00Z"), at("2026-03-11T00:05:00Z")},
	})
	now := time.Date(2026, 3, 10, 10, 0, 0, 0, ist)
	if got := Every(time.Minute).Next(now); got.Location() != ist {
		t.Errorf("Every kept no location: %v (it adds to now, nothing else)", got.Location())
	}
}

// Aligned schedules answer every run time exactly, within one period.
func TestAlignedProperties(t *testing.T) {
	base := at("2026-03-10T00:00:00Z")
	for _, c := range []struct {
		name   string
		s      Schedule
		period time.Duration
		ok     func(time.Time) bool
	}{
		{"HourlyAt(43)", HourlyAt(43), time.Hour, func(t time.Time) bool { return t.Minute() == 43 && t.Second() == 0 && t.Nanosecond() == 0 }},
		{"EveryAligned(15m)", EveryAligned(15 * time.Minute), 15 * time.Minute, func(t time.Time) bool { return t.Minute()%15 == 0 && t.Second() == 0 && t.Nanosecond() == 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := 0; i < 5000; i++ {
				now := base.Add(time.Duration(i) * 7919 * time.Millisecond * 13)
				next := c.s.Next(now)
				if !next.After(now) || next.Sub(now) > c.period || !c.ok(next) || next.Location() != time.UTC {
					t.Fatalf("Next(%s) = %s", now.Format(time.RFC3339Nano), next.Format(time.RFC3339Nano))
				}
			}
		})
	}
}

func TestConstructorsRefuseBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"Every(0)":           func() { Every(0) },
		"Every(-1s)":         func() { Every(-time.Second) },
		"EveryAligned(0)":    func() { EveryAligned(0) },
		"EveryAligned(7m)":   func() { EveryAligned(7 * time.Minute) },
		"EveryAligned(25h)":  func() { EveryAligned(25 * time.Hour) },
		"HourlyAt(-1)":       func() { HourlyAt(-1) },
		"HourlyAt(60)":       func() { HourlyAt(60) },
		"EveryAligned(-15m)": func() { EveryAligned(-15 * time.Minute) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("did not panic")
				}
			}()
			f()
		})
	}
}

func TestWaitReturnsAtTheRunTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := at("2026-03-10T10:42:00Z")
	clock := clockwork.NewFakeClockAt(start)
	type result struct {
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := Wait(ctx, clock, HourlyAt(43))
		done <- result{a, err}
	}()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute - time.Nanosecond)
	select {
	case r := <-done:
		t.Fatalf("Wait returned %v, %v one ns before the run time", r.at, r.err)
	default:
	}
	clock.Advance(time.Nanosecond)
	select {
	case r := <-done:
		if r.err != nil || !r.at.Equal(at("2026-03-10T10:43:00Z")) {
			t.Fatalf("Wait = %v, %v; want 10:43, nil", r.at, r.err)
		}
		if clock.Now().Before(r.at) {
			t.Fatalf("Wait returned before the clock reached %v", r.at)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return when the clock reached the run time")
	}
}

func TestWaitEndsWithTheContext(t *testing.T) {
	clock := clockwork.NewFakeClockAt(at("2026-03-10T10:00:00Z"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Wait(ctx, clock, Every(time.Hour))
		done <- err
	}()
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer bcancel()
	if err := clock.BlockUntilContext(bctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	case <-bctx.Done():
		t.Fatal("Wait did not return after cancel")
	}
	if err := clock.BlockUntilContext(bctx, 0); err != nil {
		t.Fatal(err)
	}
}
