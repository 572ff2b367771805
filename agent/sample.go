package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Metric indexes one of the fixed telemetry metrics, in the order of
// protocol.MetricsV1 (docs/operations.md, "Telemetry").
type Metric int

// The metrics a sample can hold, each in the unit of its protocol.MetricsV1
// namesake (docs/operations.md, "Telemetry"): percent, bytes, load, °C, W.
const (
	CPUPct Metric = iota
	MemUsedBytes
	MemTotalBytes
	DiskUsedBytes
	DiskTotalBytes
	Load1
	NetRxBytes
	NetTxBytes
	GPUUtilPct
	GPUMemUsedBytes
	GPUMemTotalBytes
	GPUTempC
	GPUPowerW
	numMetrics
)

// Sample is one reading of the machine: Has[m] says whether Value[m] was
// measured.
type Sample struct {
	// At is when the sample was taken.
	At time.Time
	// Value holds each measured metric in its unit.
	Value [numMetrics]float64
	// Has marks the measured metrics.
	Has [numMetrics]bool
}

func (s *Sample) set(m Metric, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	s.Value[m], s.Has[m] = v, true
}

// Sampler reads the machine from ProcRoot (stat, meminfo, loadavg, net/dev),
// statfs of DiskPath and, when NvidiaSMI is set, nvidia-smi. CPU and network
// are deltas against the previous sample, so the first sample has neither.
type Sampler struct {
	// ProcRoot is /proc.
	ProcRoot string
	// DiskPath is the filesystem measured (/ by default).
	DiskPath string
	// NvidiaSMI is the nvidia-smi executable; empty means no GPU.
	NvidiaSMI string
	// Warn receives a failing reading (once per kind until it recovers).
	Warn func(what string, err error)

	prevCPU *cpuTimes
	prevNet *[2]uint64
	failing map[string]bool
}

// Take reads one sample at now.
func (s *Sampler) Take(ctx context.Context, now time.Time) Sample {
	out := Sample{At: now}
	s.check("cpu", s.cpu(&out))
	s.check("memory", s.mem(&out))
	s.check("load", s.load(&out))
	s.check("disk", s.disk(&out))
	s.check("network", s.net(&out))
	if s.NvidiaSMI != "" {
		s.check("gpu", s.gpu(ctx, &out))
	}
	return out
}

func (s *Sampler) check(what string, err error) {
	if s.failing == nil {
		s.failing = map[string]bool{}
	}
	if err != nil && !s.failing[what] && s.Warn != nil {
		s.Warn(what, err)
	}
	s.failing[what] = err != nil
}

type cpuTimes struct{ total, idle uint64 }

func (s *Sampler) cpu(out *Sample) error {
	b, err := os.ReadFile(filepath.Join(s.ProcRoot, "stat"))
	if err != nil {
		return err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return fmt.Errorf("stat: no cpu line")
	}
	var t cpuTimes
	// user nice system idle iowait irq softirq steal (guest and guest_nice
	// are already inside user and nice).
	for i := 1; i < len(f) && i <= 8; i++ {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return fmt.Errorf("stat: %w", err)
		}
		t.total += v
		if i == 4 || i == 5 { // idle, iowait
			t.idle += v
		}
	}
	prev := s.prevCPU
	s.prevCPU = &t
	if prev == nil || t.total <= prev.total || t.idle < prev.idle {
		return nil
	}
	dt, di := float64(t.total-prev.total), float64(t.idle-prev.idle)
	out.set(CPUPct, math.Max(0, math.Min(100, 100*(dt-di)/dt)))
	return nil
}

func (s *Sampler) mem(out *Sample) error {
	f, err := os.Open(filepath.Join(s.ProcRoot, "meminfo"))
	if err != nil {
		return err
	}
	defer f.Close()
	var total, avail float64
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fs[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "MemTotal":
			total, haveTotal = v*1024, true
		case "MemAvailable":
			avail, haveAvail = v*1024, true
		}
	}
	if !haveTotal || !haveAvail {
		return fmt.Errorf("meminfo: MemTotal or MemAvailable missing")
	}
	out.set(MemTotalBytes, total)
	out.set(MemUsedBytes, math.Max(0, total-avail))
	return nil
}

func (s *Sampler) load(out *Sample) error {
	b, err := os.ReadFile(filepath.Join(s.ProcRoot, "loadavg"))
	if err != nil {
		return err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fmt.Errorf("loadavg: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return fmt.Errorf("loadavg: not a load")
	}
	out.set(Load1, v)
	return nil
}

func (s *Sampler) disk(out *Sample) error {
	if s.DiskPath == "" {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.DiskPath, &st); err != nil {
		return err
	}
	bs := float64(st.Bsize)
	out.set(DiskTotalBytes, float64(st.Blocks)*bs)
	out.set(DiskUsedBytes, float64(st.Blocks-st.Bfree)*bs)
	return nil
}

func (s *Sampler) net(out *Sample) error {
	f, err := os.Open(filepath.Join(s.ProcRoot, "net", "dev"))
	if err != nil {
		return err
	}
	defer f.Close()
	var cur [2]uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue // the two header lines have no colon
		}
		fs := strings.Fields(rest)
		if len(fs) < 9 {
			continue
		}
		rx, err1 := strconv.ParseUint(fs[0], 10, 64)
		tx, err2 := strconv.ParseUint(fs[8], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		cur[0] += rx
		cur[1] += tx
	}
	if err := sc.Err(); err != nil {
		return err
	}
	prev := s.prevNet
	s.prevNet = &cur
	// A counter that went backwards (an interface removed, a wrap) gives
	// no delta for this sample rather than a nonsense one.
	if prev != nil && cur[0] >= prev[0] && cur[1] >= prev[1] {
		out.set(NetRxBytes, float64(cur[0]-prev[0]))
		out.set(NetTxBytes, float64(cur[1]-prev[1]))
	}
	return nil
}

// NvidiaSMIArgs is the query the agent runs: one CSV row per GPU.
var NvidiaSMIArgs = []string{"--query-gpu=utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw", "--format=csv,noheader,nounits"}

func (s *Sampler) gpu(ctx context.Context, out *Sample) error {
	ctx, cancel := context.WithTimeout(ctx, NvidiaSMITimeout)
	defer cancel()
	b, err := exec.CommandContext(ctx, s.NvidiaSMI, NvidiaSMIArgs...).Output()
	if err != nil {
		return fmt.Errorf("nvidia-smi: %w", err)
	}
	return ParseNvidiaSMI(b, out)
}

// ParseNvidiaSMI folds nvidia-smi's CSV (NvidiaSMIArgs: utilization %,
// memory used and total in MiB, temperature °C, power W; one row per GPU)
// into out: the busiest GPU's utilization, memory and power summed over
// GPUs, the hottest temperature. A field that reads "[N/A]" (or anything
// not a number) is skipped for that GPU; a metric no GPU reports is left
// out. Errors: output with no GPU row.
func ParseNvidiaSMI(b []byte, out *Sample) error {
	var util, memUsed, memTotal, temp, power float64
	var has [5]bool
	rows := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 5 {
			continue
		}
		rows++
		for i := range f {
			v, err := strconv.ParseFloat(strings.TrimSpace(f[i]), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			switch i {
			case 0:
				if !has[0] || v > util {
					util = v
				}
			case 1:
				memUsed += v
			case 2:
				memTotal += v
			case 3:
				if !has[3] || v > temp {
					temp = v
				}
			case 4:
				power += v
			}
			has[i] = true
		}
	}
	if rows == 0 {
		return fmt.Errorf("nvidia-smi: no GPU rows")
	}
	const mib = 1 << 20
	if has[0] && util >= 0 && util <= 100 {
		out.set(GPUUtilPct, util)
	}
	if has[1] && memUsed >= 0 {
		out.set(GPUMemUsedBytes, memUsed*mib)
	}
	if has[2] && memTotal >= 0 {
		out.set(GPUMemTotalBytes, memTotal*mib)
	}
	if has[3] && temp >= -50 && temp <= 200 {
		out.set(GPUTempC, temp)
	}
	if has[4] && power >= 0 {
		out.set(GPUPowerW, power)
	}
	return nil
}
