package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// idleRow is one interval of the idle measurement.
type idleRow struct {
	wall     time.Duration
	cpu      float64 // seconds
	sw       harness.Switches
	vanished int
	threads  int64
	rssKiB   int64
	perf     map[string]int64 // nil without perf
}

func runIdle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	var c common
	c.register(fs)
	minutes := fs.Int("minutes", 10, "how many intervals to measure")
	interval := fs.Duration("interval", time.Minute, "length of one interval (one row of the report)")
	settle := fs.Duration("settle", 30*time.Second, "wait this long after start-up before measuring")
	usePerf := fs.Bool("perf", true, "count timer and scheduler events with perf stat, if it works here")
	godebug := fs.String("godebug", "", "GODEBUG for chalupa (e.g. gctrace=1: one line per GC in chalupa.log; use with -keep)")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	switch {
	case *minutes < 1 || *minutes > 24*60:
		return errors.New("-minutes must be in [1, 1440]")
	case *interval < time.Second || *interval > time.Hour:
		return errors.New("-interval must be in [1s, 1h]")
	case *settle < 0 || *settle > time.Hour:
		return errors.New("-settle must be in [0, 1h]")
	}
	if *godebug != "" {
		c.env = append(c.env, "GODEBUG="+*godebug)
	}
	total := time.Duration(*minutes) * *interval
	ctx, cancel := runContext(*settle + total + time.Duration(*minutes)*30*time.Second + 2*harness.ChalupaStopGrace + 10*time.Minute)
	defer cancel()

	var events []string
	perfNote := "perf: not used (-perf=false)"
	if *usePerf {
		var why string
		if events, why = perfProbe(ctx); len(events) == 0 {
			perfNote = "perf: skipped, timer wake-ups not counted: " + why
		} else {
			perfNote = fmt.Sprintf("perf: counting %v on every thread (perf stat -p)", events)
			if len(events) < len(perfEvents) {
				perfNote += fmt.Sprintf("; unavailable here: %v", missing(perfEvents, events))
			}
		}
	}
	progress("%s", perfNote)

	s, err := c.start(ctx, "idle")
	if err != nil {
		return err
	}
	defer s.close()
	pid := s.PID()
	// /metrics is read once before and once after the window, never
	// inside it: a scrape is a request that wakes the daemon.
	m0, mErr0 := s.Metrics(ctx)
	progress("idle: settling for %s, then %d × %s", *settle, *minutes, *interval)
	harness.SleepUntil(ctx, time.Now().Add(*settle))

	var rows []idleRow
	for i := 0; i < *minutes && ctx.Err() == nil; i++ {
		sw0, err := harness.ReadTaskSwitches(pid)
		if err != nil {
			return fmt.Errorf("chalupa (pid %d): %w", pid, err)
		}
		cpu0, t0 := harness.ProcCPUSeconds(strconv.Itoa(pid)), time.Now()
		var counts map[string]int64
		if len(events) > 0 {
			if counts, err = perfStat(ctx, pid, events, *interval); err != nil {
				progress("%v; continuing without perf", err)
				events, perfNote = nil, "perf: stopped after an error: "+err.Error()
			}
		} else {
			harness.SleepUntil(ctx, t0.Add(*interval))
		}
		sw1, err := harness.ReadTaskSwitches(pid)
		if err != nil {
			return fmt.Errorf("chalupa (pid %d): %w", pid, err)
		}
		r := idleRow{wall: time.Since(t0), cpu: harness.ProcCPUSeconds(strconv.Itoa(pid)) - cpu0, perf: counts}
		r.sw, r.vanished = harness.SwitchesDelta(sw0, sw1)
		r.threads, _ = harness.ReadStatusField(pid, "Threads")
		r.rssKiB, _ = harness.ReadStatusField(pid, "VmRSS")
		rows = append(rows, r)
		progress("idle: %d/%d: %d context switches, %.0f ms CPU", i+1, *minutes, r.sw.Total(), r.cpu*1000)
	}
	if err := ctx.Err(); err != nil && len(rows) == 0 {
		return err
	}
	m1, mErr1 := s.Metrics(ctx)

	out := os.Stdout
	fmt.Fprintf(out, "idle: chalupa %s, pid %d%s, embedded default (file:// replica in the data dir), no clients; settled %s, then %d × %s\n",
		s.URL, pid, placement(c.cpus), *settle, len(rows), *interval)
	fmt.Fprintln(out, perfNote)
	fmt.Fprintln(out)
	printIdle(out, rows, events)
	fmt.Fprintln(out)
	if mErr0 == nil && mErr1 == nil {
		fmt.Fprintf(out, "between the /metrics reads before the settle and after the last interval: %.0f GC cycles (go_gc_duration_seconds_count), goroutines %.0f → %.0f, threads %.0f → %.0f\n",
			m1["go_gc_duration_seconds_count"]-m0["go_gc_duration_seconds_count"], m0["go_goroutines"], m1["go_goroutines"], m0["go_threads"], m1["go_threads"])
	}
	return nil
}

func missing(all, have []string) []string {
	var out []string
	for _, e := range all {
		found := false
		for _, h := range have {
			found = found || h == e
		}
		if !found {
			out = append(out, e)
		}
	}
	return out
}

// printIdle writes the per-interval table and the means.
func printIdle(out io.Writer, rows []idleRow, events []string) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	hdr := "interval\tCPU ms\tCPU %\tvoluntary\tinvoluntary\twake-ups/s\tthreads\tRSS MiB\t"
	if len(events) > 0 {
		hdr += "sched_switch\thrtimer_start\thrtimer_cancel\ttimer wake-ups/s\tnanosleep\tepoll_pwait\tfutex\t"
	}
	fmt.Fprintln(tw, hdr)
	var sum idleRow
	sum.perf = map[string]int64{}
	vanished := 0
	for i, r := range rows {
		sec := r.wall.Seconds()
		line := fmt.Sprintf("%d\t%.0f\t%.2f\t%d\t%d\t%.1f\t%d\t%.1f\t", i+1, r.cpu*1000, 100*r.cpu/sec,
			r.sw.Voluntary, r.sw.Nonvoluntary, float64(r.sw.Voluntary)/sec, r.threads, float64(r.rssKiB)/1024)
		if len(events) > 0 {
			line += perfCells(r.perf, sec)
		}
		fmt.Fprintln(tw, line)
		sum.wall += r.wall
		sum.cpu += r.cpu
		sum.sw.Voluntary += r.sw.Voluntary
		sum.sw.Nonvoluntary += r.sw.Nonvoluntary
		vanished += r.vanished
		for k, v := range r.perf {
			sum.perf[k] += v
		}
	}
	if len(rows) > 1 {
		sec := sum.wall.Seconds()
		line := fmt.Sprintf("all\t%.0f\t%.2f\t%d\t%d\t%.1f\t\t\t", sum.cpu*1000, 100*sum.cpu/sec, sum.sw.Voluntary, sum.sw.Nonvoluntary, float64(sum.sw.Voluntary)/sec)
		if len(events) > 0 {
			line += perfCells(sum.perf, sec)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if len(rows) == 0 {
		return
	}
	sec, perMin := sum.wall.Seconds(), sum.wall.Minutes()
	fmt.Fprintf(out, "\nmean: %.1f wake-ups/s (voluntary context switches, all threads), %.1f involuntary/s; CPU %.0f ms per minute (%.3f %% of one core)\n",
		float64(sum.sw.Voluntary)/sec, float64(sum.sw.Nonvoluntary)/sec, sum.cpu*1000/perMin, 100*sum.cpu/sec)
	if len(events) > 0 {
		fmt.Fprintf(out, "timer wake-ups ≈ %.1f/s (hrtimer_start − hrtimer_cancel), of which sysmon-style sleeps (nanosleep) %.1f/s\n",
			float64(sum.perf["timer:hrtimer_start"]-sum.perf["timer:hrtimer_cancel"])/sec, float64(sum.perf["syscalls:sys_enter_nanosleep"])/sec)
	}
	if vanished > 0 {
		fmt.Fprintf(out, "note: %d threads exited during the measurement; their switches after the interval's start are not counted\n", vanished)
	}
}

// perfCells formats one row's perf counts; "-" for an event not counted.
func perfCells(p map[string]int64, sec float64) string {
	cell := func(ev string) string {
		v, ok := p[ev]
		if !ok {
			return "-"
		}
		return strconv.FormatInt(v, 10)
	}
	wake := "-"
	st, ok1 := p["timer:hrtimer_start"]
	ca, ok2 := p["timer:hrtimer_cancel"]
	if ok1 && ok2 && sec > 0 {
		wake = fmt.Sprintf("%.1f", float64(st-ca)/sec)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t", cell("sched:sched_switch"), cell("timer:hrtimer_start"), cell("timer:hrtimer_cancel"),
		wake, cell("syscalls:sys_enter_nanosleep"), cell("syscalls:sys_enter_epoll_pwait"), cell("syscalls:sys_enter_futex"))
}
