package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// DiskFloor is what the disk under a data directory charges for one
// durable commit, measured without SQLite: a write of FloorWriteBytes at
// a WAL-like offset followed by fsync, Samples times in a row. A
// heartbeat is acknowledged only after the COMMIT that holds it is
// fsynced (synchronous=FULL, docs/operations.md "Storage and the writer"), so no
// heartbeat latency can beat FsyncP50, a p99 below FsyncP99 is out of
// reach at any rate, and CPUPerSync (user + system time of the thread
// that did it) is spent once per writer COMMIT whatever the batch holds.
type DiskFloor struct {
	Dir        string        `json:"dir"`
	Samples    int           `json:"samples"`
	WriteBytes int           `json:"writeBytes"`
	FsyncP50   time.Duration `json:"fsyncP50"`
	FsyncP90   time.Duration `json:"fsyncP90"`
	FsyncP99   time.Duration `json:"fsyncP99"`
	FsyncMax   time.Duration `json:"fsyncMax"`
	// CPUPerSync is the calling thread's CPU time per write + fsync.
	CPUPerSync time.Duration `json:"cpuPerSync"`
}

// FloorWriteBytes is the size written before each fsync: three 4 KiB
// pages with their 24-byte WAL frame headers, about what one small writer
// COMMIT appends to the WAL (contrib/load's batches of a few heartbeats).
const FloorWriteBytes = 3 * (4096 + 24)

// MeasureDiskFloor writes and fsyncs a scratch file in dir samples times
// and returns the latency quantiles and CPU per sync. The file is removed
// afterwards. It fails when dir is not writable or an fsync fails.
func MeasureDiskFloor(dir string, samples int) (DiskFloor, error) {
	if samples < 1 {
		return DiskFloor{}, fmt.Errorf("disk floor: samples must be ≥ 1, got %d", samples)
	}
	f, err := os.CreateTemp(dir, "disk-floor-*")
	if err != nil {
		return DiskFloor{}, fmt.Errorf("disk floor: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// Thread CPU time is only this loop's if the goroutine stays on one
	// thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, FloorWriteBytes)
	h := NewHistogram()
	c0, err := threadCPU()
	if err != nil {
		return DiskFloor{}, err
	}
	for i := range samples {
		// Cycle over 1 MiB like a WAL between checkpoints.
		off := int64(i%85) * FloorWriteBytes
		if _, err := f.WriteAt(buf, off); err != nil {
			return DiskFloor{}, fmt.Errorf("disk floor: write: %w", err)
		}
		t := time.Now()
		if err := f.Sync(); err != nil {
			return DiskFloor{}, fmt.Errorf("disk floor: fsync: %w", err)
		}
		h.Record(time.Since(t))
	}
	c1, err := threadCPU()
	if err != nil {
		return DiskFloor{}, err
	}
	abs, _ := filepath.Abs(dir)
	return DiskFloor{
		Dir: abs, Samples: samples, WriteBytes: FloorWriteBytes,
		FsyncP50: h.Quantile(0.5), FsyncP90: h.Quantile(0.9), FsyncP99: h.Quantile(0.99), FsyncMax: h.Max(),
		CPUPerSync: (c1 - c0) / time.Duration(samples),
	}, nil
}

// threadCPU is the calling thread's user + system time.
func threadCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, fmt.Errorf("disk floor: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// String is the floor as one report line.
func (d DiskFloor) String() string {
	return fmt.Sprintf("disk floor in %s (%d × write %d B + fsync, no SQLite): fsync p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms; CPU %d µs per write + fsync",
		d.Dir, d.Samples, d.WriteBytes, msOf(d.FsyncP50), msOf(d.FsyncP90), msOf(d.FsyncP99), msOf(d.FsyncMax), d.CPUPerSync.Microseconds())
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
