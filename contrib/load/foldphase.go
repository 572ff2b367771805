package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// Targets of the fold phase (docs/operations.md, "Retention"): chalupa's p99 at the
// steady rate while a retention fold runs, absolute and against the same
// run's steady phase without one.
const (
	targetFoldP99   = 15 * time.Millisecond
	targetFoldRatio = 1.5
)

// maxFoldGap is the longest pause between one retention pass's answer and
// the next pass's request that still counts as the fold being in progress
// throughout: the gap is one admin round trip on loopback, a few
// milliseconds, in which the server has no fold running.
const maxFoldGap = 100 * time.Millisecond

// foldPassMargin bounds how long after the phase the tool waits for the
// pass in progress to answer: retention's drain deadline (20 s, a
// constant, telemetry.FoldDrainDeadline) plus its finalize and prune steps.
const foldPassMargin = 90 * time.Second

// replicatedWait bounds the wait for the replica to hold the seeded
// database (Litestream copies it whole at start: ~500 MB per million
// windows to the file replica).
const replicatedWait = 10 * time.Minute

// waitReplicated polls adminGetStatus once a second until the replica has
// every local transaction and no lag, or limit passes. Errors: the limit,
// ctx's end, or the status call's.
func waitReplicated(ctx context.Context, chal *harness.Chalupa, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := chal.Admin.GetStatus(cctx)
		cancel()
		if err != nil {
			return err
		}
		r := st.Replication
		if r.LocalTXID > 0 && r.RemoteTXID >= r.LocalTXID && r.LagSeconds == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica not caught up after %s (local txid %d, remote %d, lag %.1f s)", limit, r.LocalTXID, r.RemoteTXID, r.LagSeconds)
		}
		harness.SleepUntil(ctx, time.Now().Add(time.Second))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// serverIdleCPU is the CPU (cores, over one second) under which the server
// counts as idle before the phases of a seeded run: Litestream compacts
// the initial copy of the seeded database into L1 (every 30 s) after it
// reports being caught up, taking most of a core for seconds, which the
// first phase would otherwise measure.
const serverIdleCPU = 0.05

// serverIdleWait bounds the wait for the server to go idle.
const serverIdleWait = 3 * time.Minute

// firstCompaction is how long after start the replica's first L1
// compaction comes (Litestream's L1 interval, 30 s, plus margin): with a
// seeded database it rewrites the whole initial copy, so the phases start
// after it.
const firstCompaction = 40 * time.Second

// waitServerIdle waits, at most limit, until firstCompaction has passed
// since the server started and then srv used less than serverIdleCPU cores
// over one second, and returns how long it waited and
// whether it went idle.
func waitServerIdle(ctx context.Context, srv *harness.Server, started time.Time, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		if time.Since(started) < firstCompaction {
			harness.SleepUntil(ctx, started.Add(firstCompaction))
		}
		c0, t0 := srv.CPUSeconds(), time.Now()
		harness.SleepUntil(ctx, t0.Add(time.Second))
		c1 := srv.CPUSeconds()
		if c0 < 0 || c1 < 0 {
			return time.Since(start), false
		}
		if (c1-c0)/time.Since(t0).Seconds() < serverIdleCPU {
			return time.Since(start), true
		}
	}
	return time.Since(start), false
}

// foldPass is one adminRunRetention call of the fold phase, with the
// client's times around it.
type foldPass struct {
	// Sent and Answered are when the request left and its answer arrived.
	Sent     time.Time `json:"sent"`
	Answered time.Time `json:"answered"`
	// Report is the pass's report (zero when Err is set).
	Report adminapi.RetentionRun `json:"report"`
	Err    string                `json:"error,omitempty"`
}

// foldRun is what the fold phase's retention passes did and whether a fold
// was in progress for the whole measured window.
type foldRun struct {
	Passes []foldPass `json:"passes"`
	// RowsFolded sums the passes' telemetryMinuteRollups.
	RowsFolded int64 `json:"rowsFolded"`
	// Covered: the passes ran back to back (gaps ≤ maxFoldGap) from before
	// the window's start to after its end, and none before the end had
	// drained the backlog, so the fold was in progress throughout.
	Covered bool `json:"covered"`
	// MaxGapMs is the longest gap between passes inside the window.
	MaxGapMs float64 `json:"maxGapMs"`
	// Why says what broke coverage (empty when Covered).
	Why string `json:"why,omitempty"`
}

// retentionDriver triggers retention passes back to back through the admin
// API until stopped: one pass is bounded by the drain deadline (20 s), so
// a window longer than that needs several.
type retentionDriver struct {
	admin  *adminapi.Client
	mu     sync.Mutex
	passes []foldPass
	stop   chan struct{}
	done   chan struct{}
}

// startRetention starts passes at once and keeps them going until Stop.
func startRetention(ctx context.Context, admin *adminapi.Client) *retentionDriver {
	d := &retentionDriver{admin: admin, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			select {
			case <-d.stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			p := foldPass{Sent: time.Now()}
			cctx, cancel := context.WithTimeout(ctx, foldPassMargin)
			rep, err := d.admin.RunRetention(cctx)
			cancel()
			p.Answered = time.Now()
			if err != nil {
				p.Err = err.Error()
			} else {
				p.Report = rep
			}
			d.mu.Lock()
			d.passes = append(d.passes, p)
			d.mu.Unlock()
			if err != nil || !rep.TelemetryBacklogPending {
				return // nothing left to fold (or the server failed)
			}
		}
	}()
	return d
}

// Stop starts no further pass, waits for the one in progress and judges
// the passes against the measured window [from, to].
func (d *retentionDriver) Stop(from, to time.Time) *foldRun {
	close(d.stop)
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &foldRun{Passes: d.passes}
	for _, p := range d.passes {
		r.RowsFolded += p.Report.TelemetryMinuteRollups
	}
	r.Covered, r.MaxGapMs, r.Why = coverage(d.passes, from, to)
	return r
}

// coverage reports whether passes kept a fold running over [from, to]:
// the first started before from, each following one within maxFoldGap of
// the previous answer, every pass answered before to stopped with backlog
// left (not drained, not failed), and the last answered after to.
func coverage(passes []foldPass, from, to time.Time) (bool, float64, string) {
	if len(passes) == 0 {
		return false, 0, "no retention pass ran"
	}
	if passes[0].Sent.After(from) {
		return false, 0, "the first pass started after the window began"
	}
	var gap time.Duration
	for i, p := range passes {
		if i > 0 && p.Sent.Before(to) {
			gap = max(gap, p.Sent.Sub(passes[i-1].Answered))
		}
		if !p.Answered.Before(to) {
			if gap > maxFoldGap {
				return false, ms(gap), fmt.Sprintf("a gap of %.1f ms between passes (bound %s)", ms(gap), maxFoldGap)
			}
			return true, ms(gap), ""
		}
		switch {
		case p.Err != "":
			return false, ms(gap), "pass " + fmt.Sprint(i+1) + " failed: " + p.Err
		case !p.Report.TelemetryBacklogPending:
			return false, ms(gap), fmt.Sprintf("pass %d drained the backlog %.1f s before the window ended", i+1, to.Sub(p.Answered).Seconds())
		}
	}
	return false, ms(gap), "the last pass answered before the window ended"
}

// printFold prints the fold phase's passes and the comparison with the
// steady phase.
func printFold(out io.Writer, rep *report) {
	var steady, fold *phaseResult
	for i := range rep.Results {
		r := &rep.Results[i]
		switch {
		case r.Target == "chalupa" && r.Phase == "steady":
			steady = r
		case r.Target == "chalupa" && r.Phase == "fold":
			fold = r
		}
	}
	if fold == nil || fold.Fold == nil {
		return
	}
	f := fold.Fold
	fmt.Fprintf(out, "fold phase: %d retention passes, %d source rows folded:", len(f.Passes), f.RowsFolded)
	for _, p := range f.Passes {
		if p.Err != "" {
			fmt.Fprintf(out, " [error: %s]", p.Err)
			continue
		}
		fmt.Fprintf(out, " [%d ms, %d rows, %d batches, %s]", p.Report.DurationMs, p.Report.TelemetryMinuteRollups,
			p.Report.TelemetryBatches, p.Report.TelemetryDrainStopReason)
	}
	fmt.Fprintln(out)
	if f.Covered {
		fmt.Fprintf(out, "fold in progress for the whole measured window (%.0f s): yes (longest gap between passes %.1f ms)\n", fold.DurationSeconds, f.MaxGapMs)
	} else {
		fmt.Fprintf(out, "fold in progress for the whole measured window (%.0f s): NO, %s; the fold figures do not measure ingest during a fold\n", fold.DurationSeconds, f.Why)
	}
	pass := fold.P99Ms <= ms(targetFoldP99) && fold.Non2xx+fold.TransportErrors == 0 && f.Covered
	fmt.Fprintf(out, "chalupa p99 at %.0f req/s during the fold: %.2f ms (target ≤ %d ms with no errors, fold throughout: %s)\n",
		fold.TargetRate, fold.P99Ms, targetFoldP99.Milliseconds(), passFail(&pass))
	if steady != nil && steady.P99Ms > 0 {
		ratio := fold.P99Ms / steady.P99Ms
		pass := ratio <= targetFoldRatio && f.Covered && steady.Non2xx+steady.TransportErrors == 0 && fold.Non2xx+fold.TransportErrors == 0
		fmt.Fprintf(out, "chalupa p99 with / without the fold: %.2f / %.2f ms = %.2f× (target ≤ %.1f×, both with no errors: %s)\n",
			fold.P99Ms, steady.P99Ms, ratio, targetFoldRatio, passFail(&pass))
	}
}
