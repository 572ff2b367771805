// Package schedule is the background loops' schedule math: when a loop next
// runs, as pure functions of the current time. Nothing here reads a clock
// except Wait, which takes the loop's injected one, so every boundary is
// testable with plain time values and every loop with a fake clock.
//
// A loop is written as
//
//	for {
//		if _, err := schedule.Wait(ctx, clock, sched); err != nil {
//			return nil // ctx ended: shutdown
//		}
//		tick(ctx)
//	}
//
// computing the next run from the clock after each tick, so a slow tick
// delays the next run rather than queueing runs behind it.
package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
)

// Schedule says when a loop next runs.
type Schedule interface {
	// Next returns the first run time strictly after now.
	Next(now time.Time) time.Time
}

// Every returns a schedule that runs d after now: Next(now) is now+d, a
// relative interval, not aligned to the wall clock. A loop with nothing to
// align to (nonce pruning) then spreads its work from the daemon's start
// instead of running at the same round times as every other loop and every
// other daemon, and a wall-clock step cannot make it run twice. Use
// EveryAligned or HourlyAt for cadences people read off a clock.
//
// It panics if d is not positive (a programming error in a constant).
func Every(d time.Duration) Schedule {
	if d <= 0 {
		panic(fmt.Sprintf("schedule.Every: non-positive interval %v", d))
	}
	return every(d)
}

type every time.Duration

func (e every) Next(now time.Time) time.Time { return now.Add(time.Duration(e)) }

// EveryAligned returns a schedule that runs on the multiples of d counted
// from midnight UTC: Next(now) is the first such multiple strictly after now,
// in UTC. EveryAligned(15*time.Minute) runs at :00, :15, :30 and :45 of every
// hour, so cost samples from any daemon line up on the quarter hour.
//
// It panics unless d is positive and divides 24 hours (otherwise the run
// times would drift from day to day).
func EveryAligned(d time.Duration) Schedule {
	if d <= 0 || (24*time.Hour)%d != 0 {
		panic(fmt.Sprintf("schedule.EveryAligned: interval %v does not divide 24h", d))
	}
	return aligned{period: d}
}

// HourlyAt returns a schedule that runs once an hour at minute past the hour,
// UTC: Next(now) is the first hh:minute:00.000000000 strictly after now, in
// UTC. A run exactly at hh:minute was this hour's, so Next then answers the
// next hour's. UTC because in zones with a half-hour offset "minute past the
// hour" would name a different instant.
//
// It panics unless 0 <= minute <= 59.
func HourlyAt(minute int) Schedule {
	if minute < 0 || minute > 59 {
		panic(fmt.Sprintf("schedule.HourlyAt: minute %d outside 0..59", minute))
	}
	return aligned{period: time.Hour, offset: time.Duration(minute) * time.Minute}
}

// aligned runs at offset past every multiple of period since the zero time
// (midnight UTC for any period that divides a day). 0 <= offset < period.
type aligned struct {
	period, offset time.Duration
}

// Next shifts now back by the offset, rounds down to the period (Truncate
// works on absolute time, whatever now's location) and steps one period on:
// strictly after now even when now is exactly on a run time.
func (a aligned) Next(now time.Time) time.Time {
	return now.Add(-a.offset).Truncate(a.period).Add(a.period + a.offset).UTC()
}

// Wait blocks until clock reaches s.Next(clock.Now()) and returns that run
// time, or returns ctx.Err() when ctx ends first. When it returns nil,
// clock.Now() is not before the returned time, so the caller's next Wait
// answers a strictly later run: a timer that fires while the wall clock reads
// earlier than the target (the clock stepped back) is waited out again, never
// run twice.
func Wait(ctx context.Context, clock clockwork.Clock, s Schedule) (time.Time, error) {
	at := s.Next(clock.Now())
	for {
		d := clock.Until(at)
		if d <= 0 {
			return at, nil
		}
		t := clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, ctx.Err()
		case <-t.Chan():
		}
	}
}
