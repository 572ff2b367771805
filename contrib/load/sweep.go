package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// defaultSweep is -sweep's default: rates in requests/s, from a small fleet's
// (chalupa pinned to one core already missed a 10 ms p99 at 250/s on the
// 2-core test machine) to past its closed-loop maximum on 2 cores. The sweep
// stops at the first failing rate, so low first steps cost little.
const defaultSweep = "100,250,500,1000,2000,3000,4000,6000,8000,10000,12000"

// minAchieved is the fraction of a step's rate the server must answer (2xx
// per second over the window) for the step to count as served.
const minAchieved = 0.95

// parseRates reads -sweep: comma-separated positive rates in requests/s,
// strictly increasing, at most 100,000 each.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || !(v > 0 && v <= 100_000) {
			return nil, fmt.Errorf("%q is not a rate in (0, 100000]", part)
		}
		if len(out) > 0 && v <= out[len(out)-1] {
			return nil, fmt.Errorf("rates must increase (%g after %g)", v, out[len(out)-1])
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no rates")
	}
	return out, nil
}

// parsePhases reads -phases: a comma-separated subset of max, steady and
// sweep, run in that order whatever the order given.
func parsePhases(s string) ([]string, error) {
	var want []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !slices.Contains(allPhases, part) {
			return nil, fmt.Errorf("unknown phase %q (want max, steady, fold or sweep)", part)
		}
		want = append(want, part)
	}
	var out []string
	for _, p := range allPhases {
		if slices.Contains(want, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no phase to run")
	}
	return out, nil
}

// allPhases are the phases in the order they run.
var allPhases = []string{"max", "steady", "fold", "sweep"}

// stepVerdict says whether one sweep step served its rate: no non-2xx
// answer and no transport error, at least minAchieved of the rate answered,
// and p99 (from the scheduled send time) within bound. reason explains a
// failure.
func stepVerdict(r phaseResult, bound time.Duration) (ok bool, reason string) {
	boundMs := ms(bound)
	switch {
	case r.Non2xx+r.TransportErrors > 0:
		return false, fmt.Sprintf("%d non-2xx answers and %d transport errors", r.Non2xx, r.TransportErrors)
	case r.ReqPerSec < minAchieved*r.TargetRate:
		return false, fmt.Sprintf("answered %.0f/s of %.0f/s", r.ReqPerSec, r.TargetRate)
	case r.P99Ms > boundMs:
		why := fmt.Sprintf("p99 %.2f ms > %.2f ms", r.P99Ms, boundMs)
		if r.SendLagP99Ms > boundMs/2 {
			// The client itself sent late: part of the latency is its own.
			why += fmt.Sprintf(" (client send lag p99 %.2f ms: the client, not only the server, was late)", r.SendLagP99Ms)
		}
		return false, why
	}
	return true, ""
}

// sweepSummary is the outcome of one target's sweep.
type sweepSummary struct {
	Target     string  `json:"target"`
	P99BoundMs float64 `json:"p99BoundMs"`
	// MaxRate is the highest step rate served (stepVerdict); 0 when the
	// first step already failed.
	MaxRate float64 `json:"maxRate"`
	// StoppedAt is the rate of the first failing step and StopReason why
	// it failed; both empty when every step passed (the limit lies beyond
	// the last rate of -sweep).
	StoppedAt  float64 `json:"stoppedAt,omitempty"`
	StopReason string  `json:"stopReason,omitempty"`
	// Complete is false when the run was interrupted before a verdict.
	Complete bool `json:"complete"`
}

// summarizeSweep reads a target's sweep steps, in the order they ran: the
// sweep stops at the first failing step, so the highest rate served is the
// last step before it.
func summarizeSweep(target string, steps []phaseResult, bound time.Duration, complete bool) sweepSummary {
	s := sweepSummary{Target: target, P99BoundMs: ms(bound), Complete: complete}
	for _, r := range steps {
		ok, why := stepVerdict(r, bound)
		if !ok {
			s.StoppedAt, s.StopReason = r.TargetRate, why
			s.Complete = true
			break
		}
		s.MaxRate = max(s.MaxRate, r.TargetRate)
	}
	return s
}

// sweep runs the open-loop rate sweep: one steady phase per rate of -sweep,
// each -step-warmup + -step long, stopping after the first step that fails
// stepVerdict.
func (e *phaseEnv) sweep(ctx context.Context) []phaseResult {
	cfg := e.cfg
	var out []phaseResult
	for i, rate := range cfg.SweepRates {
		if i > 0 {
			harness.SleepUntil(ctx, time.Now().Add(cfg.Settle))
		}
		r := e.steady(ctx, "sweep", rate, cfg.StepWarmup, cfg.Step)
		if ctx.Err() != nil {
			break
		}
		out = append(out, r)
		ok, why := stepVerdict(r, cfg.P99Bound)
		if !ok {
			progress("%s: sweep stops at %.0f req/s: %s", e.name, rate, why)
			break
		}
		progress("%s: sweep %.0f req/s served: p99 %.2f ms", e.name, rate, r.P99Ms)
	}
	return out
}
