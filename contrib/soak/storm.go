package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// cpuWindow records the CPU seconds of a server, of this process and of
// the whole machine at the edges of a measurement window (harness.Window).
type cpuWindow struct {
	srv                        *harness.Server
	t0, t1                     time.Time
	cpu0, cpu1                 float64
	self0, self1, mach0, mach1 float64
}

// Start samples at the beginning of the window.
func (c *cpuWindow) Start() {
	c.t0, c.cpu0, c.self0, c.mach0 = time.Now(), c.srv.CPUSeconds(), harness.ProcCPUSeconds("self"), harness.MachineCPUSeconds()
}

// End samples at the end of the window.
func (c *cpuWindow) End() {
	c.t1, c.cpu1, c.self1, c.mach1 = time.Now(), c.srv.CPUSeconds(), harness.ProcCPUSeconds("self"), harness.MachineCPUSeconds()
}

// cores is the server's CPU per wall second over the window; -1 unknown.
func (c *cpuWindow) cores() float64 {
	if c.cpu0 < 0 || c.cpu1 < 0 || !c.t1.After(c.t0) {
		return -1
	}
	return (c.cpu1 - c.cpu0) / c.t1.Sub(c.t0).Seconds()
}

// otherCores is what every other process (not the server, not this tool)
// used per wall second over the window; -1 unknown. More than a tenth of a
// core means the machine was not quiet.
func (c *cpuWindow) otherCores() float64 {
	if c.cores() < 0 || c.self0 < 0 || c.self1 < 0 || c.mach0 < 0 || c.mach1 < 0 {
		return -1
	}
	wall := c.t1.Sub(c.t0).Seconds()
	return max(0, (c.mach1-c.mach0)/wall-c.cores()-(c.self1-c.self0)/wall)
}

func runStorm(args []string) error {
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	var c common
	c.register(fs)
	dur := fs.Duration("duration", 60*time.Second, "length of the write storm")
	quiet := fs.Duration("quiet", 2*time.Minute, "idle time watched after the storm")
	every := fs.Duration("sample", 100*time.Millisecond, "WAL size sampling interval")
	workers := fs.Int("workers", 64, "concurrent senders (closed loop, back to back)")
	deployments := fs.Int("deployments", 500, "deployment ids the heartbeats are spread over")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout")
	bucket := fs.Duration("timeline", 5*time.Second, "timeline resolution (largest WAL size per bucket)")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	switch {
	case *dur <= 0 || *dur > time.Hour:
		return errors.New("-duration must be in (0, 1h]")
	case *quiet < 0 || *quiet > time.Hour:
		return errors.New("-quiet must be in [0, 1h]")
	case *every < 10*time.Millisecond || *every > time.Minute:
		return errors.New("-sample must be in [10ms, 1m]")
	case *workers < 1 || *workers > 4096:
		return errors.New("-workers must be in [1, 4096]")
	case *deployments < 1 || *deployments > 1_000_000:
		return errors.New("-deployments must be in [1, 1000000]")
	case *timeout <= 0 || *timeout > time.Minute:
		return errors.New("-timeout must be in (0, 1m]")
	case *bucket <= 0:
		return errors.New("-timeline must be positive")
	}
	ctx, cancel := runContext(*dur + *quiet + 2*harness.ChalupaStopGrace + 10*time.Minute)
	defer cancel()

	s, err := c.start(ctx, "storm")
	if err != nil {
		return err
	}
	defer s.close()
	keyID, key, err := s.IssueKey(ctx, "soak-storm")
	if err != nil {
		return err
	}
	w, err := harness.NewWorkload(s.URL, keyID, key, "soak-storm", *deployments, max(*workers, 256), *timeout)
	if err != nil {
		return err
	}
	defer w.Close()

	wal := s.DBPath() + "-wal"
	watch := watchWAL(ctx, wal, *every)
	harness.SleepUntil(ctx, time.Now().Add(time.Second)) // a baseline
	stormStart := time.Now()
	progress("storm: %s of signed heartbeats, %d workers, WAL sampled every %s", *dur, *workers, *every)
	win := &cpuWindow{srv: s.Server}
	t, measured := harness.RunMax(ctx, w, win, *workers, 0, *dur, 20_000_000)
	stormEnd := time.Now()
	w.Close()
	progress("storm: quiet for %s", *quiet)
	harness.SleepUntil(ctx, stormEnd.Add(*quiet))
	quietEnd := time.Now()
	if err := ctx.Err(); err != nil {
		return err
	}
	samples := watch.samples()

	out := os.Stdout
	before := statsBetween(samples, time.Time{}, stormStart)
	during := statsBetween(samples, stormStart, stormEnd)
	after := statsBetween(samples, stormEnd, quietEnd.Add(time.Second))
	fmt.Fprintf(out, "storm: chalupa %s, pid %d%s; %s write storm, then %s quiet; %s sampled every %s\n\n",
		s.URL, s.PID(), placement(c.cpus), *dur, *quiet, wal, *every)
	fmt.Fprintf(out, "heartbeats: %d answered 2xx in %.1fs (%.0f/s), %d non-2xx, %d transport errors; p50 %.2f ms, p99 %.2f ms; chalupa CPU %s cores, other processes %s cores\n",
		t.OK, measured.Seconds(), float64(t.OK)/measured.Seconds(), t.Non2xx, t.Transport,
		ms(t.Lat.Quantile(0.5)), ms(t.Lat.Quantile(0.99)), coresText(win.cores()), coresText(win.otherCores()))
	line(out, "WAL before the storm", mib(before.last))
	line(out, "WAL largest during the storm", fmt.Sprintf("%s (at %.1fs)", mib(during.max), during.maxAt.Sub(stormStart).Seconds()))
	line(out, "WAL at the end of the storm", mib(during.last))
	line(out, "WAL largest while quiet", mib(after.max))
	line(out, fmt.Sprintf("WAL after %s quiet", *quiet), mib(after.last))
	fmt.Fprintln(out, truncatedVerdict(shrinks(statsSamples(samples, stormStart)), max(during.max, after.max), after.last, stormStart))
	if fi, err := os.Stat(s.DBPath()); err == nil {
		fmt.Fprintf(out, "database file after the run: %s\n", mib(fi.Size()))
	}
	printShrinks(out, samples, stormStart)
	fmt.Fprintln(out)
	printTimeline(out, samples, stormStart, *bucket, func(at time.Time) string {
		if at.Before(stormEnd) {
			return "storm"
		}
		return "quiet"
	})
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func coresText(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// line writes "label:  value" with the values aligned.
func line(out io.Writer, label, value string) {
	fmt.Fprintf(out, "%-34s %s\n", label+":", value)
}

// statsSamples returns the samples from start on.
func statsSamples(s []walSample, start time.Time) []walSample {
	for i, x := range s {
		if !x.at.Before(start) {
			return s[i:]
		}
	}
	return nil
}

// truncatedVerdict says whether the WAL was truncated back after reaching
// largest: it was if the file got smaller at any point, and the verdict
// gives the last such moment and the final size.
func truncatedVerdict(sh []shrink, largest, final int64, start time.Time) string {
	if len(sh) == 0 {
		return fmt.Sprintf("truncated back: no, the file keeps its %s (SQLite rewrites a checkpointed WAL from its start without shrinking it; only a TRUNCATE checkpoint or journal_size_limit does)", mib(final))
	}
	last := sh[len(sh)-1]
	return fmt.Sprintf("truncated back: yes, from %s to %s at %.1fs (largest %s; %s at the end)",
		mib(last.from), mib(last.to), last.at.Sub(start).Seconds(), mib(largest), mib(final))
}
