package harness

import (
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
