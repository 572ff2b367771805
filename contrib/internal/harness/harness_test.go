package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/protocol"
)

func TestHistogramQuantilesWithinOnePercent(t *testing.T) {
	h := NewHistogram()
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for range 100_000 {
		// Log-uniform from 1 µs to about 10 s, like a latency tail.
		d := time.Duration(float64(time.Microsecond) * math.Pow(10, r.Float64()*7))
		d = d.Truncate(time.Microsecond)
		all = append(all, d)
		h.Record(d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := all[int(q*float64(len(all)))-1]
		got := h.Quantile(q)
		if diff := abs(float64(got-want)) / float64(want); diff > 0.01 && abs(float64(got-want)) > float64(2*time.Microsecond) {
			t.Errorf("q%.3f = %v, want %v (±1%%)", q, got, want)
		}
	}
	if h.Max() != all[len(all)-1] {
		t.Errorf("max = %v, want %v", h.Max(), all[len(all)-1])
	}
	if h.Count() != uint64(len(all)) {
		t.Errorf("count = %d", h.Count())
	}
}

func TestHistogramBucketsRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 255, 256, 257, 1000, 1 << 20, 123456789} {
		i := bucketOf(v)
		low, width := bucketLow(i)
		if v < low || v >= low+width {
			t.Errorf("value %d in bucket %d = [%d, %d)", v, i, low, low+width)
		}
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func TestBodyIsAStrictHeartbeatV1(t *testing.T) {
	w := &Workload{env: "load-test", deployments: 500}
	for _, n := range []uint64{0, 1, 499, 500, 123457} {
		b := w.Body(nil, n, time.Now())
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var hb protocol.HeartbeatV1
		if err := dec.Decode(&hb); err != nil {
			t.Fatalf("body %d: %v\n%s", n, err, b)
		}
		if want := "load-dep-" + strconv.FormatUint(n%500, 10); hb.Deployment.ID != want || hb.EnvironmentSlug != "load-test" {
			t.Errorf("body %d: deployment %q env %q", n, hb.Deployment.ID, hb.EnvironmentSlug)
		}
		if hb.SentAt.IsZero() || hb.Reaper.LastActivityAt.IsZero() || hb.Reaper.LimitMinutes != 30 {
			t.Errorf("body %d: %+v", n, hb)
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "http://[::1]:80", "http://localhost:80"} {
		if CheckLoopback(u) == nil {
			t.Errorf("%s accepted", u)
		}
	}
	if err := CheckLoopback("http://127.0.0.1:8080"); err != nil {
		t.Error(err)
	}
}

func TestProcCPU(t *testing.T) {
	if ProcCPUSeconds("self") < 0 {
		t.Skip("no /proc on this system")
	}
	if MachineCPUSeconds() <= 0 {
		t.Error("machine CPU not read")
	}
}

func TestDatabaseFileNameIsTheDaemons(t *testing.T) {
	if DatabaseFileName != daemon.DatabaseFileName {
		t.Errorf("DatabaseFileName %q, daemon.DatabaseFileName %q", DatabaseFileName, daemon.DatabaseFileName)
	}
}

// TestProcCPUCoversEveryThread burns CPU on four threads other than the one
// reading, and checks /proc/self/stat counted all of it: the per-phase
// server CPU (and µs per request) relies on that.
func TestProcCPUCoversEveryThread(t *testing.T) {
	if ProcCPUSeconds("self") < 0 {
		t.Skip("no /proc on this system")
	}
	const threads, each = 4, 100 * time.Millisecond
	before := ProcCPUSeconds("self")
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread() // keep the thread: an exited one leaves the task list
			used := func() time.Duration {
				var ru syscall.Rusage
				if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
					t.Error(err)
					return time.Hour
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			start := used()
			for {
				if used()-start >= each {
					return
				}
				for range 100_000 {
				}
			}
		}()
	}
	wg.Wait()
	proc, tasks := ProcCPUSeconds("self"), TasksCPUSeconds("self")
	// Ticks are 10 ms and each thread's count is rounded.
	if burned := proc - before; burned < threads*each.Seconds()-0.05 {
		t.Errorf("the process's CPU grew by %.2f s while %d threads burned %v each", burned, threads, each)
	}
	// Each thread's ticks are rounded on their own; allow one per thread.
	tids, _ := os.ReadDir("/proc/self/task")
	if diff := proc - tasks; math.Abs(diff) > 0.02+0.01*float64(len(tids)) {
		t.Errorf("/proc/self/stat %.2f s, sum over tasks %.2f s", proc, tasks)
	}
}

// TestTelemetryBodyIsAValidWindow: the windows MixTelemetry sends pass the
// server's own decoding and value rules (protocol.WindowV1.Validate), are
// minute-aligned, spread round-robin over the deployments with one
// session each, and advance one minute per round.
func TestTelemetryBodyIsAValidWindow(t *testing.T) {
	w, err := NewWorkload("http://127.0.0.1:1", "env_x_0123456789abcdef", make([]byte, 32), "load-env", 3, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for k := range uint64(7) {
		var win protocol.WindowV1
		dec := json.NewDecoder(bytes.NewReader(w.TelemetryBody(nil, k)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&win); err != nil {
			t.Fatalf("window %d: %v", k, err)
		}
		if err := telemetry.ValidateWindow(&win); err != nil {
			t.Fatalf("window %d: %v", k, err)
		}
		if want := fmt.Sprintf("load-dep-%d", k%3); win.DeploymentID != want || win.SessionID != fmt.Sprintf("load-sess-%d", k%3) {
			t.Errorf("window %d: deployment %q session %q, want %s", k, win.DeploymentID, win.SessionID, want)
		}
		starts = append(starts, win.WindowStart)
	}
	if !starts[0].Equal(starts[0].Truncate(time.Minute)) || starts[3].Sub(starts[0]) != time.Minute || !starts[1].Equal(starts[0]) {
		t.Errorf("window starts %v: want minute-aligned, one minute apart per round", starts)
	}
	if age := time.Since(starts[0]); age > 2*time.Hour-10*time.Minute || age < 0 {
		t.Errorf("first window is %v old: outside the 2-hour admission limit's margin", age)
	}
}
