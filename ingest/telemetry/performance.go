package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
		if a == nil || a.N == 0 {
			continue
		}
		at := lastAt(i)
		cur := &b.agg[i]
		if cur.N == 0 {
			*cur, b.lastAt[i] = *a, at
			continue
		}
		last := cur.Last
		if at >= b.lastAt[i] {
			last, b.lastAt[i] = a.Last, at
		}
		*cur = cur.Merge(*a)
		cur.Last = last
	}
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

	fine := step < time.Hour
	buckets := map[int64]*bucket{}
	at := func(key int64) *bucket {
		b := buckets[key]
		if b == nil {
			b = &bucket{}
			buckets[key] = b
		}
		return b
	}
	// Rollups first: below an hour they decide which hours are served
	// whole. Every point lies inside one hour then (validStep), so an
	// hour's points start at or after the hour and need its rollup.
	hourlyFrom := from
	if fine {
		hourlyFrom = from.Truncate(time.Hour)
	}
	err = storage.EachTelemetryHourly(ctx, tx, env.ID, req.DeploymentID, hourlyFrom, to,
		func(hour time.Time, m *storage.TelemetryMetricSet, lastAt *[storage.NumTelemetryMetrics]time.Time) error {
			key := alignDown(hour, step).UnixMilli()
			if fine {
				key = hour.UnixMilli()
			}
			b := at(key)
			b.hourly = fine
			b.add(m, func(i int) int64 { return lastAt[i].UnixMilli() })
			return nil
		})
	if err != nil {
		return out, err
	}
	// From the same hour as the rollups: a window before from belongs
	// only in an hour served whole (it shares the hour's point).
	err = storage.EachTelemetryWindow(ctx, tx, env.ID, req.DeploymentID, hourlyFrom, to,
		func(_ string, start time.Time, m *storage.TelemetryMetricSet) error {
			key := alignDown(start, step).UnixMilli()
			if fine {
				if h := start.Truncate(time.Hour).UnixMilli(); buckets[h] != nil && buckets[h].hourly {
					key = h
				} else if start.Before(from) {
					return nil
				}
			}
			ms := start.UnixMilli()
			at(key).add(m, func(int) int64 { return ms })
			return nil
		})
	if err != nil {
		return out, err
	}
	sessions, truncated, err := sessionsIn(ctx, tx, env.ID, req.DeploymentID, from, to)
	if err != nil {
		return out, err
	}
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
	keys := make([]int64, 0, len(buckets))
	for k, b := range buckets {
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
			b := buckets[k]
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

// sessionsIn returns the deployment's sessions with a window in [from,
// to), oldest first, at most adminapi.MaxPerformanceSessions (the newest);
// truncated says some were left out.
func sessionsIn(ctx context.Context, q storage.Querier, environmentID int64, deploymentID string, from, to time.Time) (out []adminapi.PerformanceSession, truncated bool, err error) {
	all, err := storage.TelemetrySessionsOf(ctx, q, environmentID, deploymentID)
	if err != nil {
		return nil, false, err
	}
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
	return out, truncated, nil
}
