package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// maxCPUs bounds the CPU numbers this package handles (the affinity masks
// it passes to the kernel are this many bits).
const maxCPUs = 1024

// ParseCPUList parses a CPU list in taskset's and cpuset's syntax ("0",
// "0,1", "0-3,6") into sorted, distinct CPU numbers. An empty string is no
// CPUs.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU number or range", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: %q is not a CPU number or range", s, part)
			}
		}
		if b >= maxCPUs {
			return nil, fmt.Errorf("CPU list %q: CPU %d is beyond %d", s, b, maxCPUs-1)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// FormatCPUList writes sorted CPU numbers in the syntax ParseCPUList reads,
// with runs as ranges ("0-2,5").
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Without returns the CPUs of all that are not in drop.
func Without(all, drop []int) []int {
	var out []int
	for _, c := range all {
		if !slices.Contains(drop, c) {
			out = append(out, c)
		}
	}
	return out
}

type cpuMask [maxCPUs / 64]uint64

func maskOf(cpus []int) cpuMask {
	var m cpuMask
	for _, c := range cpus {
		m[c/64] |= 1 << (c % 64)
	}
	return m
}

func (m *cpuMask) cpus() []int {
	var out []int
	for c := range maxCPUs {
		if m[c/64]&(1<<(c%64)) != 0 {
			out = append(out, c)
		}
	}
	return out
}

// getAffinity is sched_getaffinity(2) of thread tid (0: the calling thread).
// The standard library's syscall package has the call number, so nothing
// outside the module's direct dependencies is needed.
func getAffinity(tid int) (cpuMask, error) {
	var m cpuMask
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, uintptr(tid), unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	if e != 0 {
		return m, e
	}
	return m, nil
}

// setAffinity is sched_setaffinity(2) of thread tid.
func setAffinity(tid int, m cpuMask) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	if e != 0 {
		return e
	}
	return nil
}

// AllowedCPUs returns the CPUs the calling thread may run on.
func AllowedCPUs() ([]int, error) {
	m, err := getAffinity(0)
	if err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return m.cpus(), nil
}

// PinProcess restricts every thread of this process to cpus. Affinity is a
// per-thread setting, so it walks /proc/self/task and sets each thread,
// then walks again until a pass finds every thread already placed: a thread
// started meanwhile by an unplaced thread is caught by the next pass, and
// threads started later inherit the mask from their (placed) creator.
func PinProcess(cpus []int) error {
	if len(cpus) == 0 {
		return errors.New("pin: no CPUs")
	}
	want := maskOf(cpus)
	for range 100 {
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("pin: %w", err)
		}
		changed := false
		for _, t := range tids {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			have, err := getAffinity(tid)
			if errors.Is(err, syscall.ESRCH) {
				continue // exited meanwhile
			}
			if err != nil {
				return fmt.Errorf("pin: sched_getaffinity(%d): %w", tid, err)
			}
			if have == want {
				continue
			}
			if err := setAffinity(tid, want); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("pin thread %d to CPUs %s: %w", tid, FormatCPUList(cpus), err)
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return errors.New("pin: threads kept appearing unplaced after 100 passes")
}

// ThreadCPUs returns the union of Cpus_allowed_list over every thread of
// pid (from /proc/<pid>/task/*/status): where its threads may actually run,
// which is how a placement is checked rather than assumed.
func ThreadCPUs(pid int) ([]int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var all []int
	for _, t := range tids {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // exited meanwhile
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				cpus, err := ParseCPUList(v)
				if err != nil {
					return nil, fmt.Errorf("%s/%s/status: %w", dir, t.Name(), err)
				}
				all = append(all, cpus...)
			}
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%s: no Cpus_allowed_list", dir)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// Command is exec.Command(name, args...), run under `taskset -c CPUS` when
// cpus is not empty. taskset (util-linux) sets the affinity and then execs
// the program, so the child's pid is the program's and every thread it
// starts inherits the placement.
func Command(cpus []int, name string, args ...string) (*exec.Cmd, error) {
	if len(cpus) == 0 {
		return exec.Command(name, args...), nil
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return nil, errors.New("taskset (util-linux) is needed to place the server on CPUs: " + err.Error())
	}
	return exec.Command(ts, append([]string{"-c", FormatCPUList(cpus), name}, args...)...), nil
}
