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

// cpuWindow records a server's CPU seconds at the edges of a measurement
// window (harness.Window).
type cpuWindow struct {
	srv        *harness.Server
	t0, t1     time.Time
	cpu0, cpu1 float64
}

// Start samples at the beginning of the window.
func (c *cpuWindow) Start() { c.t0, c.cpu0 = time.Now(), c.srv.CPUSeconds() }

// End samples at the end of the window.
func (c *cpuWindow) End() { c.t1, c.cpu1 = time.Now(), c.srv.CPUSeconds() }

// cores is the server's CPU per wall second over the window; -1 unknown.
func (c *cpuWindow) cores() float64 {
	if c.cpu0 < 0 || c.cpu1 < 0 || !c.t1.After(c.t0) {
		return -1
	}
	return (c.cpu1 - c.cpu0) / c.t1.Sub(c.t0).Seconds()
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
	fmt.Fprintf(out, "heartbeats: %d answered 2xx in %.1fs (%.0f/s), %d non-2xx, %d transport errors; p50 %.2f ms, p99 %.2f ms; chalupa CPU %s cores\n",
		t.OK, measured.Seconds(), float64(t.OK)/measured.Seconds(), t.Non2xx, t.Transport,
		ms(t.Lat.Quantile(0.5)), ms(t.Lat.Quantile(0.99)), coresText(win.cores()))
	line(out, "WAL before the storm", mib(before.last))
	line(out, "WAL largest during the storm", fmt.Sprintf("%s (at %.1fs)", mib(during.max), during.maxAt.Sub(stormStart).Seconds()))
	line(out, "WAL at the end of the storm", mib(during.last))
	line(out, "WAL largest while quiet", mib(after.max))
	line(out, fmt.Sprintf("WAL after %s quiet", *quiet), mib(after.last))
	largest := max(during.max, after.max)
	switch {
	case after.last == 0 && largest > 0:
		fmt.Fprintln(out, "truncated back: yes, to 0 bytes")
	case after.last < largest:
		fmt.Fprintf(out, "truncated back: partly, to %s of %s\n", mib(after.last), mib(largest))
	default:
		fmt.Fprintf(out, "truncated back: no, the file keeps its %s (SQLite rewrites a checkpointed WAL from its start without shrinking it; only a TRUNCATE checkpoint or journal_size_limit does)\n", mib(after.last))
	}
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
