package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// perfEvents are the tracepoints the idle tool counts with `perf stat -p`,
// which counts an event when it happens in the context of one of the
// process's threads:
//
//   - sched:sched_switch: a thread left the CPU (cross-checks the context
//     switches from /proc);
//   - timer:hrtimer_start: a thread armed a high-resolution timer — every
//     nanosleep, and every futex or epoll wait with a timeout, arms one;
//   - timer:hrtimer_cancel: a thread cancelled one, which is what a thread
//     does when it is woken before its timeout (futex wake, I/O);
//   - the nanosleep, epoll_pwait and futex system calls: the Go runtime's
//     sysmon sleeps with nanosleep, idle Ps wait in epoll_pwait (the
//     netpoller, with the next timer as its timeout) or on a futex.
//
// A timer that is started and not cancelled expired: its thread was woken
// by the timer. hrtimer_start − hrtimer_cancel therefore estimates the
// wake-ups that timers caused.
var perfEvents = []string{
	"sched:sched_switch",
	"timer:hrtimer_start",
	"timer:hrtimer_cancel",
	"syscalls:sys_enter_nanosleep",
	"syscalls:sys_enter_epoll_pwait",
	"syscalls:sys_enter_futex",
}

// perfProbe returns the events of perfEvents that `perf stat` can count
// here, or why none can (perf missing, no permission: perf_event_paranoid,
// no tracefs).
func perfProbe(ctx context.Context) ([]string, string) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return nil, "perf is not installed (Debian: apt-get install linux-perf)"
	}
	var ok []string
	var why string
	for _, ev := range perfEvents {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(pctx, perf, "stat", "-x,", "-e", ev, "--", "true").CombinedOutput()
		cancel()
		if err == nil {
			if _, err := parsePerfCSV(string(out)); err == nil {
				ok = append(ok, ev)
				continue
			}
		}
		if why == "" {
			why = fmt.Sprintf("perf stat -e %s: %v: %s", ev, err, firstLine(string(out)))
		}
	}
	if len(ok) == 0 {
		return nil, why
	}
	return ok, ""
}

// perfStat counts events on every thread of pid for d (perf stat -p PID
// -- sleep D) and returns the counts by event name.
func perfStat(ctx context.Context, pid int, events []string, d time.Duration) (map[string]int64, error) {
	args := []string{"stat", "-x,", "-p", strconv.Itoa(pid)}
	for _, ev := range events {
		args = append(args, "-e", ev)
	}
	args = append(args, "--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
	pctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(pctx, "perf", args...)
	cmd.Stdout, cmd.Stderr = &out, &out // perf stat writes its counts to stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("perf stat: %v: %s", err, firstLine(out.String()))
	}
	return parsePerfCSV(out.String())
}

// parsePerfCSV reads `perf stat -x,` output: one line per event, the count
// first and the event name third ("<not counted>" or "<not supported>"
// instead of a count is an error).
func parsePerfCSV(text string) (map[string]int64, error) {
	out := map[string]int64{}
	for line := range strings.Lines(text) {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 3 || f[2] == "" {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("perf: %s: %q", f[2], f[0])
		}
		out[f[2]] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("perf printed no counts: %s", firstLine(text))
	}
	return out, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
