package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMeasureDiskFloor(t *testing.T) {
	dir := t.TempDir()
	d, err := MeasureDiskFloor(dir, 20)
	if err != nil {
		t.Fatal(err)
	}
	if d.Samples != 20 || d.WriteBytes != FloorWriteBytes {
		t.Fatalf("samples %d bytes %d", d.Samples, d.WriteBytes)
	}
	if d.FsyncP50 <= 0 || d.FsyncP50 > d.FsyncP99 || d.FsyncP99 > d.FsyncMax+d.FsyncMax/8 {
		t.Fatalf("quantiles out of order: %+v", d)
	}
	if d.CPUPerSync <= 0 {
		t.Fatalf("no CPU charged for 20 writes and fsyncs: %+v", d)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("scratch file left behind: %v", left)
	}
	if s := d.String(); !strings.Contains(s, "fsync p50") || !strings.Contains(s, dir) {
		t.Fatalf("report line: %s", s)
	}
}

func TestMeasureDiskFloorRefuses(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		if _, err := MeasureDiskFloor(filepath.Join(t.TempDir(), "nope"), 5); err == nil {
			t.Fatal("measured a directory that does not exist")
		}
	})
	t.Run("no samples", func(t *testing.T) {
		if _, err := MeasureDiskFloor(t.TempDir(), 0); err == nil {
			t.Fatal("accepted zero samples")
		}
	})
}

func TestMeasureMachineFloor(t *testing.T) {
	m, err := MeasureMachineFloor(1000, 100)
	if err != nil {
		t.Fatal(err)
	}
	if m.Syscall <= 0 || m.WakeRoundTrip <= 0 || m.SyscallSamples != 1000 || m.WakeSamples != 100 {
		t.Fatalf("floor %+v", m)
	}
	if !strings.Contains(m.String(), "machine floor") {
		t.Errorf("report line %q", m.String())
	}
	if _, err := MeasureMachineFloor(0, 1); err == nil {
		t.Error("accepted zero syscall samples")
	}
}
