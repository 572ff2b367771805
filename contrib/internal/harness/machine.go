package harness

import (
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// MachineFloor is what this machine charges for the two things every
// request costs a server many times over, whatever the server is: entering
// the kernel, and waking another thread. On a paravirtualized guest both
// can cost tens of times what they cost on hardware virtualization or bare
// metal, and a CPU-per-request figure taken there is mostly this tax: read
// server µs/req against this line (contrib/load/README.md, "The disk's and the
// machine's floor").
type MachineFloor struct {
	// Syscall is the mean wall time of one getppid(2), the cheapest
	// system call, over SyscallSamples calls on one thread.
	Syscall        time.Duration `json:"syscall"`
	SyscallSamples int           `json:"syscallSamples"`
	// WakeRoundTrip is the mean time for one thread to wake another and be
	// woken back (two goroutines locked to their own threads passing a
	// value over unbuffered channels), over WakeSamples round trips.
	WakeRoundTrip time.Duration `json:"wakeRoundTrip"`
	WakeSamples   int           `json:"wakeSamples"`
}

// MeasureMachineFloor times syscalls and thread wake-ups (see
// MachineFloor). It takes well under a second on any machine chalupa
// targets. It fails when a sample count is below 1.
func MeasureMachineFloor(syscalls, wakes int) (MachineFloor, error) {
	if syscalls < 1 || wakes < 1 {
		return MachineFloor{}, fmt.Errorf("machine floor: sample counts must be ≥ 1, got %d and %d", syscalls, wakes)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t := time.Now()
	for range syscalls {
		syscall.Getppid()
	}
	sc := time.Since(t) / time.Duration(syscalls)

	ping, pong := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range ping {
			pong <- struct{}{}
		}
	}()
	t = time.Now()
	for range wakes {
		ping <- struct{}{}
		<-pong
	}
	rt := time.Since(t) / time.Duration(wakes)
	close(ping)
	return MachineFloor{Syscall: sc, SyscallSamples: syscalls, WakeRoundTrip: rt, WakeSamples: wakes}, nil
}

// String is the floor as one report line.
func (m MachineFloor) String() string {
	return fmt.Sprintf("machine floor: a system call (getppid) %.2f µs; a thread wake-up round trip %.1f µs (%d and %d samples)",
		float64(m.Syscall.Nanoseconds())/1000, float64(m.WakeRoundTrip.Nanoseconds())/1000, m.SyscallSamples, m.WakeSamples)
}
