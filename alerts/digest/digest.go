// Package digest is the daily alert digest (docs/operations.md, "Alerts",
// under Digest): off by default; with CHALUPA_ALERT_DIGEST=HH:MM it wakes
// once a day at that wall-clock time in CHALUPA_ALERT_TZ and, when there is
// something to say, queues one message of event alerts.Digest to each sink:
// the fleet, what the reaper destroyed since the last digest, the month's
// cost to date and the open alerts. Nothing runs, and no timer is set,
// while it is off.
package digest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// Schedule is a wall-clock time of day in a zone.
type Schedule struct {
	// Hour (0–23) and Minute (0–59) of the local day.
	Hour, Minute int
	// Loc is the zone (UTC when nil).
	Loc *time.Location
}

// ParseSchedule reads CHALUPA_ALERT_DIGEST's HH:MM (00:00–23:59, two
// digits each) and CHALUPA_ALERT_TZ's IANA zone name ("" is UTC). Errors
// name the variable, never the value: a malformed time, a zone the
// system's time zone database does not hold.
func ParseSchedule(hhmm, tz string) (Schedule, error) {
	var s Schedule
	h, m, ok := strings.Cut(hhmm, ":")
	hour, herr := strconv.Atoi(h)
	minute, merr := strconv.Atoi(m)
	if !ok || len(h) != 2 || len(m) != 2 || herr != nil || merr != nil || hour < 0 || hour > 23 || minute < 0 || minute > 59 {
		return s, errors.New("CHALUPA_ALERT_DIGEST must be HH:MM, from 00:00 to 23:59")
	}
	s.Hour, s.Minute, s.Loc = hour, minute, time.UTC
	if tz != "" {
		loc, err := time.LoadLocation(tz)
		if err != nil || strings.EqualFold(tz, "local") {
			return s, errors.New("CHALUPA_ALERT_TZ must be an IANA time zone name the system's time zone database holds (e.g. Europe/Paris)")
		}
		s.Loc = loc
	}
	return s, nil
}

// String is "HH:MM ZONE".
func (s Schedule) String() string {
	return fmt.Sprintf("%02d:%02d %s", s.Hour, s.Minute, s.loc())
}

func (s Schedule) loc() *time.Location {
	if s.Loc == nil {
		return time.UTC
	}
	return s.Loc
}

// at is the digest's instant on the local day y-m-d: HH:MM on that day's
// wall clock. On the day clocks spring forward past HH:MM (a time that
// does not exist) it is as many minutes after the gap's start as HH:MM is
// (02:30 in a gap from 02:00 to 03:00 is 03:30 after the change); on the
// day the clocks fall back through HH:MM (a time that happens twice) it is
// the first. It does not lean on time.Date's choice, which Go leaves
// unspecified for both.
func (s Schedule) at(y int, m time.Month, d int) time.Time {
	loc := s.loc()
	naive := time.Date(y, m, d, s.Hour, s.Minute, 0, 0, time.UTC) // the wall clock read as UTC
	y, m, d = naive.Date()                                        // d may run past the month's end
	offset := func(t time.Time) time.Duration {
		_, off := t.In(loc).Zone()
		return time.Duration(off) * time.Second
	}
	// The offsets in force a day before and a day after: a zone changes
	// its offset at most once in two days.
	before := naive.Add(-offset(naive.Add(-24 * time.Hour)))
	after := naive.Add(-offset(naive.Add(24 * time.Hour)))
	shows := func(t time.Time) bool {
		l := t.In(loc)
		ly, lm, ld := l.Date()
		return ly == y && lm == m && ld == d && l.Hour() == s.Hour && l.Minute() == s.Minute
	}
	switch {
	case shows(before) && shows(after):
		return minTime(before, after)
	case shows(after):
		return after
	}
	// Valid under the earlier offset, or in the gap, where the earlier
	// offset counts the minutes from the gap's start.
	return before
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Next is the first digest instant after now: once each local day, at
// HH:MM wall-clock time in the zone.
func (s Schedule) Next(now time.Time) time.Time {
	local := now.In(s.loc())
	y, m, d := local.Date()
	for i := 0; i < 3; i++ {
		if t := s.at(y, m, d+i); t.After(now) {
			return t
		}
	}
	return s.at(y, m, d+3) // unreachable: a local day is at most 25 hours
}

// Prev is the last digest instant at or before now.
func (s Schedule) Prev(now time.Time) time.Time {
	local := now.In(s.loc())
	y, m, d := local.Date()
	for i := 0; i < 3; i++ {
		if t := s.at(y, m, d-i); !t.After(now) {
			return t
		}
	}
	return s.at(y, m, d-3)
}

// Queuer is what the digest is handed to: alerts/alerter's Alerter.
type Queuer interface {
	// QueueDigest queues one digest message per sink.
	QueueDigest(ctx context.Context, title, text string) error
}

// Config is what a Digest needs.
type Config struct {
	// DB is the database; required.
	DB *storage.DB
	// Alerts receives the digest; required.
	Alerts Queuer
	// Schedule is when it is sent.
	Schedule Schedule
	// Clock is the daemon's clock; nil is the real clock.
	Clock clockwork.Clock
	// Log receives a failed digest.
	Log zerolog.Logger
}

// Digest sends the daily digest.
type Digest struct{ cfg Config }

// New returns the digest over cfg. Errors: no database or no Queuer.
func New(cfg Config) (*Digest, error) {
	if cfg.DB == nil || cfg.Alerts == nil {
		return nil, errors.New("digest: a database and an alerter are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Digest{cfg: cfg}, nil
}

// Name is the digest loop's name in logs.
func (*Digest) Name() string { return "alert-digest" }

// Run waits for each digest instant on the clock (one timer, to the next
// instant) and sends the digest then, until ctx ends; it returns nil when
// ctx ends. A failed digest is logged; the next day's is tried.
func (d *Digest) Run(ctx context.Context) error {
	for {
		next := d.cfg.Schedule.Next(d.cfg.Clock.Now())
		timer := d.cfg.Clock.NewTimer(next.Sub(d.cfg.Clock.Now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.Chan():
		}
		if _, err := d.Send(ctx, next); err != nil && ctx.Err() == nil {
			d.cfg.Log.Warn().Err(err).Msg("the daily alert digest failed; tomorrow's is tried")
		}
	}
}

// Send composes the digest due at at, covering the day since the digest
// before it, and queues it when there is something to say. It reports
// whether it queued one.
func (d *Digest) Send(ctx context.Context, at time.Time) (bool, error) {
	since := d.cfg.Schedule.Prev(at.Add(-time.Second))
	title, text, ok, err := d.Compose(ctx, since, at)
	if err != nil || !ok {
		return false, err
	}
	if err := d.cfg.Alerts.QueueDigest(ctx, title, text); err != nil {
		return false, err
	}
	return true, nil
}

// MaxAlerts is how many open alerts the digest lists; the rest are
// counted.
const MaxAlerts = 20

// Compose is the digest for the day [since, at): its title and text, and
// whether there is something to say — an active deployment, a reaper
// destroy in the day, or an open alert. The month's cost to date is the
// cost reconciler's latest snapshot of at's month (said to be missing
// without one).
func (d *Digest) Compose(ctx context.Context, since, at time.Time) (string, string, bool, error) {
	q := d.cfg.DB.Read
	fleet, err := storage.DigestFleetSince(ctx, q, since)
	if err != nil {
		return "", "", false, err
	}
	open, err := storage.OpenAlerts(ctx, q)
	if err != nil {
		return "", "", false, err
	}
	if fleet.Active == 0 && fleet.Reaped == 0 && len(open) == 0 {
		return "", "", false, nil
	}
	costLine := "Cost to date: no estimate for this month (cost reconciliation has not run, or is off)."
	snap, err := storage.LatestCostSnapshot(ctx, q)
	switch {
	case err == nil && snap.Month == cost.MonthName(at):
		costLine = fmt.Sprintf("Cost to date (%s, UTC month, estimate): $%.2f, as of %s.", snap.Month, cost.RoundCents(snap.TotalUSD),
			snap.StartedAt.UTC().Format(time.RFC3339))
	case err != nil && !errors.Is(err, storage.ErrNotFound):
		return "", "", false, err
	}
	local := at.In(d.cfg.Schedule.loc())
	title := fmt.Sprintf("[digest] chalupa on %s: %d active, %d reaped, %d open alerts", local.Format("2006-01-02"), fleet.Active, fleet.Reaped, len(open))
	var b strings.Builder
	fmt.Fprintf(&b, "Daily digest for the day to %s.\n\n", local.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Fleet: %d active deployments in %d environments.\n", fleet.Active, fleet.Environments)
	fmt.Fprintf(&b, "Reaped: %d deployments destroyed by the reaper since %s.\n", fleet.Reaped, since.In(d.cfg.Schedule.loc()).Format("2006-01-02 15:04 MST"))
	b.WriteString(costLine + "\n")
	fmt.Fprintf(&b, "Open alerts: %d.\n", len(open))
	for i, a := range open {
		if i == MaxAlerts {
			fmt.Fprintf(&b, "- … and %d more\n", len(open)-MaxAlerts)
			break
		}
		subject := a.SubjectKind
		if a.SubjectID != "" {
			subject += " " + a.SubjectID
		}
		fmt.Fprintf(&b, "- [%s] %s on %s since %s\n", a.Severity, a.Kind, subject, a.OpenedAt.UTC().Format(time.RFC3339))
	}
	return title, b.String(), true, nil
}
