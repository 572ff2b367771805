package harness

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clkTck is USER_HZ, the unit of the CPU times in /proc on Linux.
const clkTck = 100

// ProcCPUSeconds reads utime+stime of /proc/<pid>/stat ("self" for this
// process), in seconds; -1 when it cannot. For a process (a thread-group
// leader's pid) the kernel reports the whole thread group there: every
// thread, including threads that have exited (proc(5)), but not children.
func ProcCPUSeconds(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return -1
	}
	ticks, ok := parseStatCPU(string(b))
	if !ok {
		return -1
	}
	return ticks / clkTck
}

// TasksCPUSeconds sums utime+stime over /proc/<pid>/task/*/stat, the live
// threads one by one, in seconds; -1 when it cannot. It exists to check that
// ProcCPUSeconds covers every thread: the two agree while no thread exits.
func TasksCPUSeconds(pid string) float64 {
	tids, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return -1
	}
	var sum float64
	for _, t := range tids {
		b, err := os.ReadFile("/proc/" + pid + "/task/" + t.Name() + "/stat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		if ticks, ok := parseStatCPU(string(b)); ok {
			sum += ticks
		}
	}
	return sum / clkTck
}

// parseStatCPU returns utime+stime, in clock ticks, from the text of a
// /proc/<pid>/stat file.
func parseStatCPU(stat string) (float64, bool) {
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:])
	// After ')': state is field 3, so utime (14) and stime (15) are at 11, 12.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return ut + st, true
}

// MachineCPUSeconds returns the busy CPU time of the whole machine (every
// field of /proc/stat's "cpu" line but idle and iowait), in seconds; -1 when
// it cannot. Compared with the server's and the client's own CPU it shows how
// much other processes took during a phase: on a shared machine a run is only
// meaningful when that is near zero.
func MachineCPUSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var busy float64
	// user nice system idle iowait irq softirq [steal guest guest_nice]:
	// idle and iowait are not busy; steal is the hypervisor's, not a
	// process's; guest time is already counted in user.
	for i, v := range f[1:8] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return -1
		}
		busy += n
	}
	return busy / clkTck
}

// StatusField returns the value of field name ("VmRSS", "Threads",
// "voluntary_ctxt_switches") in the text of a /proc/<pid>/status file, as an
// integer: the first word after the colon (VmRSS and the other Vm fields are
// in KiB). ok is false when the field is missing or not a number.
func StatusField(status, name string) (v int64, ok bool) {
	for line := range strings.Lines(status) {
		k, rest, found := strings.Cut(line, ":")
		if !found || k != name {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// ReadStatusField reads /proc/<pid>/status and returns StatusField of it.
func ReadStatusField(pid int, name string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	v, ok := StatusField(string(b), name)
	if !ok {
		return 0, fmt.Errorf("/proc/%d/status has no numeric %s", pid, name)
	}
	return v, nil
}

// Switches are context switches of one thread, or summed over threads.
type Switches struct {
	// Voluntary: the thread blocked (sleep, I/O, futex, epoll) and was
	// later woken; each is one wake-up.
	Voluntary int64
	// Nonvoluntary: the scheduler took the CPU away (time slice, a
	// higher-priority task).
	Nonvoluntary int64
}

// Total is voluntary plus nonvoluntary.
func (s Switches) Total() int64 { return s.Voluntary + s.Nonvoluntary }

// ParseSwitches reads voluntary_ctxt_switches and nonvoluntary_ctxt_switches
// from the text of one /proc/<pid>/task/<tid>/status file. The counts of a
// /proc/<pid>/status file are the leader thread's only, which is why a
// process's switches are summed over its tasks.
func ParseSwitches(status string) (Switches, error) {
	v, ok1 := StatusField(status, "voluntary_ctxt_switches")
	n, ok2 := StatusField(status, "nonvoluntary_ctxt_switches")
	if !ok1 || !ok2 {
		return Switches{}, errors.New("status has no voluntary_ctxt_switches / nonvoluntary_ctxt_switches")
	}
	return Switches{Voluntary: v, Nonvoluntary: n}, nil
}

// ReadTaskSwitches returns the context switches of every live thread of pid,
// by thread id, from /proc/<pid>/task/*/status.
func ReadTaskSwitches(pid int) (map[int]Switches, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]Switches, len(tids))
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited meanwhile
		}
		s, err := ParseSwitches(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s/%d/status: %w", dir, tid, err)
		}
		out[tid] = s
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no threads", dir)
	}
	return out, nil
}

// SwitchesDelta is what the threads did between two ReadTaskSwitches
// samples: a thread in both counts end minus start, a thread that appeared
// counts from zero. Threads that exited in between are counted in vanished;
// their switches since the first sample are lost (Go seldom ends a thread).
func SwitchesDelta(start, end map[int]Switches) (d Switches, vanished int) {
	for tid, e := range end {
		s := start[tid] // zero for a new thread
		d.Voluntary += e.Voluntary - s.Voluntary
		d.Nonvoluntary += e.Nonvoluntary - s.Nonvoluntary
	}
	for tid := range start {
		if _, ok := end[tid]; !ok {
			vanished++
		}
	}
	return d, vanished
}
