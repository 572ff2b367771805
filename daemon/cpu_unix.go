//go:build unix

package daemon

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user plus system) this process has used
// since it started; 0 if the kernel does not answer.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
