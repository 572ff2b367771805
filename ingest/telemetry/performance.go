package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// Performance API bounds (docs/operations.md, "Performance API").
const (
	// DefaultPerformanceRange is the range served when from is absent:
	// the day before to.
	DefaultPerformanceRange = 24 * time.Hour
	// MinPerformanceStep and MaxPerformanceStep bound the step: a source
	// window is one minute, and a day is the coarsest point a chart of a
	// short-lived deployment needs.
	MinPerformanceStep = time.Minute
	MaxPerformanceStep = 24 * time.Hour
	// PerformancePointsFrom is the smallest step whose points are summed
	// inside SQLite, one query per point and session, rather than read
	// window by window: from 10 minutes a point holds ten or more windows
	// per session, and carrying each window's 65 columns into Go costs
	// more than a point's two queries (contrib/console-pages.sh).
	PerformancePointsFrom = 10 * time.Minute
)

// ErrUnknownEnvironment is the refusal of Read and Erase for a slug no
// environment has (404 environment_not_found). An unknown deployment is
// ErrUnknownDeployment, as for Accept.
var ErrUnknownEnvironment = errors.New("telemetry: no environment with this slug")

// ParamRefusal is a performance request whose range or step the API does
// not serve; Message is safe to show (it never repeats a value sent).
type ParamRefusal struct{ Message string }

// Error is Message.
func (e *ParamRefusal) Error() string { return e.Message }

// PerformanceReader answers the performance read API: one deployment's
// telemetry as series per metric, with its sessions and anomalies.
type PerformanceReader struct {
	DB    *storage.DB
	Clock clockwork.Clock
	// pointsFrom overrides PerformancePointsFrom (tests compare both
	// paths over one fleet).
	pointsFrom time.Duration
}

// validStep reports whether step is one the API serves: whole minutes from
// MinPerformanceStep to MaxPerformanceStep, and below an hour a divisor of
// the hour, so that every point lies inside one hour and an hour served
// from its rollup replaces whole points.
func validStep(step time.Duration) bool {
	if step < MinPerformanceStep || step > MaxPerformanceStep || step%time.Minute != 0 {
		return false
	}
	return step >= time.Hour || time.Hour%step == 0
}

// alignDown is t rounded down to a multiple of step from the Unix epoch.
func alignDown(t time.Time, step time.Duration) time.Time {
	ms, s := t.UnixMilli(), step.Milliseconds()
	q := ms / s
	if ms%s != 0 && ms < 0 {
		q--
	}
	return time.UnixMilli(q * s).UTC()
}

// pointsIn is how many points of width step cover [alignDown(from), to).
func pointsIn(from, to time.Time, step time.Duration) int64 {
	span := to.Sub(alignDown(from, step))
	return int64((span + step - 1) / step)
}

// resolveRange applies the defaults and checks the bounds: it returns the
// first point's start, the end and the step. Errors: *ParamRefusal.
func resolveRange(req adminapi.DeploymentPerformanceRequest, now time.Time) (from, to time.Time, step time.Duration, err error) {
	to = req.To
	if to.IsZero() {
		to = now
	}
	from = req.From
	if from.IsZero() {
		from = to.Add(-DefaultPerformanceRange)
	}
	to, from = to.UTC(), from.UTC()
	if !from.Before(to) {
		return from, to, 0, &ParamRefusal{"from must be before to"}
	}
	// Compared in seconds: a time.Duration saturates at ~292 years, and a
	// saturated span would wrap the point count below the bound.
	if to.Unix()-from.Unix() > int64(adminapi.MaxPerformancePoints)*int64(MaxPerformanceStep/time.Second) {
		return from, to, 0, &ParamRefusal{fmt.Sprintf("the range is longer than %d days, which even a 1-day step cannot show in %d points", adminapi.MaxPerformancePoints, adminapi.MaxPerformancePoints)}
	}
	step = req.Step
	switch {
	case step != 0 && !validStep(step):
		return from, to, 0, &ParamRefusal{"step must be whole minutes from 1m to 24h, and below 1h divide the hour (1m, 2m, 3m, 4m, 5m, 6m, 10m, 12m, 15m, 20m, 30m)"}
	case step != 0:
		if n := pointsIn(from, to, step); n > adminapi.MaxPerformancePoints {
			return from, to, 0, &ParamRefusal{fmt.Sprintf("the range holds %d points at this step, more than %d; choose a larger step or a shorter range", n, adminapi.MaxPerformancePoints)}
		}
	default:
		// The smallest step the API serves that keeps the bound.
		step = (to.Sub(from)/adminapi.MaxPerformancePoints + time.Minute - 1).Truncate(time.Minute)
		step = max(step, MinPerformanceStep)
		for !validStep(step) || pointsIn(from, to, step) > adminapi.MaxPerformancePoints {
			if step += time.Minute; step > MaxPerformanceStep {
				return from, to, 0, &ParamRefusal{fmt.Sprintf("the range is longer than %d days, which even a 1-day step cannot show in %d points", adminapi.MaxPerformancePoints-1, adminapi.MaxPerformancePoints)}
			}
		}
	}
	return alignDown(from, step), to, step, nil
}

// bucket is one point of every series being built.
type bucket struct {
	agg [storage.NumTelemetryMetrics]storage.MetricAgg
	// lastAt is when each metric's Last was sampled (unix ms).
	lastAt [storage.NumTelemetryMetrics]int64
	hourly bool
}

// add merges one window's or rollup's aggregates into b; lastAt gives,
// per metric, when its Last was taken.
func (b *bucket) add(m *storage.TelemetryMetricSet, lastAt func(i int) int64) {
	for i, a := range m {
		if a != nil {
			b.merge(i, *a, lastAt(i))
		}
	}
}

// merge merges aggregate a of metric i, whose Last was taken at (unix ms),
// into b. On equal times the later merge's Last wins.
func (b *bucket) merge(i int, a storage.MetricAgg, at int64) {
	if a.N == 0 {
		return
	}
	cur := &b.agg[i]
	if cur.N == 0 {
		*cur, b.lastAt[i] = a, at
		return
	}
	last := cur.Last
	if at >= b.lastAt[i] {
		last, b.lastAt[i] = a.Last, at
	}
	*cur = cur.Merge(a)
	cur.Last = last
}

// Read answers adminGetDeploymentPerformance (docs/operations.md,
// "Performance API"). Detail windows and hourly rollups are read in one
// read transaction: retention moves an hour from detail to its rollup in
// one write transaction, so the snapshot holds each window on exactly one
// side, never both and never neither. Points are aligned to multiples of
// the step from the Unix epoch; each window counts in the point holding
// its start, each rollup in the point holding its hour. Below a one-hour
// step, an hour that has a rollup is served as one point of that hour
// (Seconds 3600, HourlyResolution), merged with any detail window of the
// same hour; the first such point may start before From (its hour does).
//
// Errors: *ParamRefusal for a range or step it does not serve;
// ErrUnknownEnvironment; ErrUnknownDeployment; storage errors.
func (r *PerformanceReader) Read(ctx context.Context, req adminapi.DeploymentPerformanceRequest) (adminapi.DeploymentPerformance, error) {
	var out adminapi.DeploymentPerformance
	from, to, step, err := resolveRange(req, r.Clock.Now())
	if err != nil {
		return out, err
	}
	tx, err := r.DB.Read.BeginTx(ctx, nil)
	if err != nil {
		return out, fmt.Errorf("performance: %w", err)
	}
	defer tx.Rollback() // read-only: nothing to undo
	env, err := storage.EnvironmentBySlug(ctx, tx, req.EnvironmentSlug)
	if errors.Is(err, storage.ErrNotFound) {
		return out, ErrUnknownEnvironment
	} else if err != nil {
		return out, err
	}
	if _, err := storage.DeploymentStatus(ctx, tx, env.ID, req.DeploymentID); errors.Is(err, storage.ErrNotFound) {
		return out, ErrUnknownDeployment
	} else if err != nil {
		return out, err
	}

	all, err := storage.TelemetrySessionsOf(ctx, tx, env.ID, req.DeploymentID)
	if err != nil {
		return out, err
	}
	bs := &buckets{step: step, from: from, fine: step < time.Hour, by: map[int64]*bucket{}}
	// Rollups first: below an hour they decide which hours are served
	// whole. Every point lies inside one hour then (validStep), so an
	// hour's points start at or after the hour and need its rollup.
	hourlyFrom := from
	if bs.fine {
		hourlyFrom = from.Truncate(time.Hour)
	}
	err = storage.EachTelemetryHourly(ctx, tx, env.ID, req.DeploymentID, hourlyFrom, to,
		func(hour time.Time, m *storage.TelemetryMetricSet, lastAt *[storage.NumTelemetryMetrics]time.Time) error {
			key := alignDown(hour, step).UnixMilli()
			if bs.fine {
				key = hour.UnixMilli()
			}
			b := bs.at(key)
			b.hourly = bs.fine
			b.add(m, func(i int) int64 { return lastAt[i].UnixMilli() })
			return nil
		})
	if err != nil {
		return out, err
	}
	// From the same hour as the rollups: a window before from belongs
	// only in an hour served whole (it shares the hour's point).
	pointsFrom := r.pointsFrom
	if pointsFrom == 0 {
		pointsFrom = PerformancePointsFrom
	}
	if step >= pointsFrom {
		err = bs.addPoints(ctx, tx, env.ID, req.DeploymentID, all, hourlyFrom, to)
	} else {
		err = bs.addWindows(ctx, tx, env.ID, req.DeploymentID, hourlyFrom, to)
	}
	if err != nil {
		return out, err
	}
	sessions, truncated := sessionsIn(all, from, to)
	anomalies, err := storage.TelemetryAnomaliesOf(ctx, tx, env.ID, req.DeploymentID)
	if err != nil {
		return out, err
	}

	out = adminapi.DeploymentPerformance{
		EnvironmentSlug: env.Slug, DeploymentID: req.DeploymentID,
		From: from, To: to, StepSeconds: int64(step / time.Second),
		Series:   make([]adminapi.MetricSeries, 0, storage.NumTelemetryMetrics),
		Sessions: sessions, SessionsTruncated: truncated,
		Anomalies: []adminapi.PerformanceAnomaly{},
	}
	keys := make([]int64, 0, len(bs.by))
	for k, b := range bs.by {
		keys = append(keys, k)
		out.HourlyResolution = out.HourlyResolution || b.hourly
	}
	slices.Sort(keys)
	if out.HourlyResolution {
		out.Note = "hours already folded into hourly rollups (detail is kept 7 days) are served as one point per hour (seconds 3600): the step is finer than their resolution"
	}
	for i, m := range storage.TelemetryMetrics {
		s := adminapi.MetricSeries{Metric: m.Name, Unit: m.Unit, Points: []adminapi.PerformancePoint{}}
		for _, k := range keys {
			b := bs.by[k]
			a := b.agg[i]
			if a.N == 0 {
				continue
			}
			p := adminapi.PerformancePoint{T: time.UnixMilli(k).UTC(), N: a.N, Sum: a.Sum, Mean: a.Sum / float64(a.N), Min: a.Min, Max: a.Max, Last: a.Last}
			if b.hourly {
				p.Seconds = int64(time.Hour / time.Second)
			}
			s.Points = append(s.Points, p)
		}
		out.Series = append(out.Series, s)
	}
	listed := map[string]bool{}
	for _, s := range sessions {
		listed[s.ID] = true
	}
	for _, a := range anomalies {
		if listed[a.SessionID] {
			out.Anomalies = append(out.Anomalies, adminapi.PerformanceAnomaly{
				SessionID: a.SessionID, Kind: a.Kind, FirstSeenAt: a.FirstSeenAt, LastSeenAt: a.LastSeenAt, Windows: a.Windows})
		}
	}
	return out, nil
}

// sessionsIn returns, of the deployment's sessions (all, oldest first),
// those with a window in [from, to), at most adminapi.MaxPerformanceSessions
// (the newest); truncated says some were left out.
func sessionsIn(all []storage.TelemetrySession, from, to time.Time) (out []adminapi.PerformanceSession, truncated bool) {
	out = []adminapi.PerformanceSession{}
	for _, s := range all {
		if !s.FirstWindowAt.Before(to) || s.LastWindowAt.Add(time.Minute).Compare(from) <= 0 {
			continue
		}
		ps := adminapi.PerformanceSession{ID: s.ID, FirstWindowAt: s.FirstWindowAt, LastWindowAt: s.LastWindowAt,
			Windows: s.Windows, EndedAt: s.EndedAt, EndReason: s.EndReason, SummarizedAt: s.SummarizedAt}
		if s.Summary != "" && json.Valid([]byte(s.Summary)) {
			ps.Summary = json.RawMessage(s.Summary)
		}
		out = append(out, ps)
	}
	if len(out) > adminapi.MaxPerformanceSessions {
		out, truncated = out[len(out)-adminapi.MaxPerformanceSessions:], true
	}
	return out, truncated
}

// buckets are the points being built, by start (unix ms).
type buckets struct {
	step time.Duration
	// from is the first point's start; fine is step < 1h, where an
	// hour with a rollup is served as one point.
	from time.Time
	fine bool
	by   map[int64]*bucket
}

func (bs *buckets) at(key int64) *bucket {
	b := bs.by[key]
	if b == nil {
		b = &bucket{}
		bs.by[key] = b
	}
	return b
}

// keyOf is the point that windows starting at start count in: below an
// hour, an hour with a rollup is one point; ok is false for a window
// before from outside such an hour.
func (bs *buckets) keyOf(start time.Time) (key int64, ok bool) {
	if bs.fine {
		if h := start.Truncate(time.Hour).UnixMilli(); bs.by[h] != nil && bs.by[h].hourly {
			return h, true
		}
		if start.Before(bs.from) {
			return 0, false
		}
	}
	return alignDown(start, bs.step).UnixMilli(), true
}

// addWindows adds the detail windows starting in [from, to) one by one:
// the path for fine steps, whose points hold a few windows each.
func (bs *buckets) addWindows(ctx context.Context, q storage.Querier, environmentID int64, deploymentID string, from, to time.Time) error {
	return storage.EachTelemetryWindow(ctx, q, environmentID, deploymentID, from, to,
		func(_ string, start time.Time, m *storage.TelemetryMetricSet) error {
			key, ok := bs.keyOf(start)
			if !ok {
				return nil
			}
			ms := start.UnixMilli()
			bs.at(key).add(m, func(int) int64 { return ms })
			return nil
		})
}

// addPoints adds the detail windows starting in [from, to) aggregated
// point by point in SQLite (storage.TelemetryPointReader), session by
// session in id order, as addWindows meets them: on equal times the later
// session's Last wins in both. Only the span between a session's oldest
// detail window (or first window) and its last window is read: accept and
// retention keep those bounds in the unit that stores or folds a window.
// A point lies inside one hour below an hour's step (validStep), so it is
// routed as its windows would be.
func (bs *buckets) addPoints(ctx context.Context, q storage.Preparer, environmentID int64, deploymentID string,
	sessions []storage.TelemetrySession, from, to time.Time) error {
	pr, err := storage.NewTelemetryPointReader(ctx, q, environmentID, deploymentID)
	if err != nil {
		return err
	}
	defer pr.Close() // read-only statements: nothing to report on close
	ordered := slices.Clone(sessions)
	slices.SortFunc(ordered, func(a, b storage.TelemetrySession) int { return strings.Compare(a.ID, b.ID) })
	var p storage.TelemetryPoint
	for _, s := range ordered {
		lo, hi := later(from, later(s.FirstWindowAt, s.DetailFrom)), earlier(to, s.LastWindowAt.Add(time.Millisecond))
		for k := alignDown(lo, bs.step); k.Before(hi); k = k.Add(bs.step) {
			key, ok := bs.keyOf(k)
			if !ok {
				continue
			}
			if err := pr.Point(ctx, s.ID, later(k, from), earlier(k.Add(bs.step), to), &p); err != nil {
				return err
			}
			if p.Windows == 0 {
				continue
			}
			b := bs.at(key)
			for i := range p.Metrics {
				b.merge(i, p.Metrics[i], p.LastAt[i].UnixMilli())
			}
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
