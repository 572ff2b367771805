// Command load measures chalupa's signed-heartbeat ingest against a minimal
// reference server in one run, on loopback only (docs/architecture.md,
// "Performance measurements"). See README.md beside this file.
//
//	go run ./contrib/load [-duration 15s] [-workers 64] [-rate 1000] [-json]
//	go run ./contrib/load -server-cpus 0 -open-loop [-sweep 100,250,…] [-p99-bound 10ms]
//
// It builds and starts `chalupa serve` with a fresh data dir, creates an
// environment and issues a key through the admin API, then starts the
// reference (this executable re-run with -serve-reference: net/http +
// protocol.Verify + one SQLite transaction per request on chalupa's driver and
// pragmas). Against each it runs a closed-loop maximum-throughput phase and an
// open-loop constant-rate phase, and with -open-loop an open-loop rate sweep,
// then prints them, the throughput ratio, the highest rate served within the
// p99 bound and chalupa's mean writer batch. -server-cpus places the servers
// on CPUs of their own (taskset) and this client on the others.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
	"github.com/chalupa-run/chalupa/protocol"
)

// Targets (docs/architecture.md, "Performance measurements").
const (
	targetRatio = 2.0
	targetP99   = 20 * time.Millisecond
)

// maxFoldRows bounds -fold-rows: 50 M windows are ~25 GB of database.
const maxFoldRows = 50_000_000

// otherCPUWarn is how much CPU (in cores) other processes may use during a
// phase before the report warns that the machine was not quiet.
const otherCPUWarn = 0.10

type config struct {
	Duration    time.Duration `json:"duration"`
	Warmup      time.Duration `json:"warmup"`
	Settle      time.Duration `json:"settle"`
	Timeout     time.Duration `json:"requestTimeout"`
	Workers     int           `json:"workers"`
	Rate        float64       `json:"rate"`
	Deployments int           `json:"deployments"`
	MaxInflight int           `json:"maxInflight"`
	MaxRequests int64         `json:"maxRequests"`
	RefConns    int           `json:"referenceConns"`
	Only        string        `json:"only"`
	ChalupaBin  string        `json:"chalupaBin,omitempty"`
	EnvSlug     string        `json:"environmentSlug"`
	JSON        bool          `json:"-"`
	Keep        bool          `json:"-"`
	WaitQuiet   time.Duration `json:"waitQuiet"`
	NumCPU      int           `json:"numCPU"`
	GOMAXPROCS  int           `json:"gomaxprocs"`
	// ServerCPUs is -server-cpus: the servers run under `taskset -c` on
	// these CPUs and this client on the others (ClientCPUs). Both empty:
	// not pinned, client and server share every CPU.
	ServerCPUs string `json:"serverCpus,omitempty"`
	ClientCPUs string `json:"clientCpus,omitempty"`
	// Phases are the phases run against each target, in order.
	Phases []string `json:"phases"`
	// SweepRates, Step, StepWarmup and P99Bound drive the open-loop sweep
	// (-open-loop, -sweep, -step, -step-warmup, -p99-bound).
	SweepRates []float64     `json:"sweepRates,omitempty"`
	Step       time.Duration `json:"step"`
	StepWarmup time.Duration `json:"stepWarmup"`
	P99Bound   time.Duration `json:"p99Bound"`
	// TelemetryRatio is -telemetry-ratio: the share (0–1) of the steady
	// and fold phases' requests that are signed telemetry windows.
	TelemetryRatio float64 `json:"telemetryRatio,omitempty"`
	// FoldRows is -fold-rows: source windows older than 7 days seeded into
	// chalupa's database before it starts, folded during the fold phase.
	FoldRows int `json:"foldRows,omitempty"`
	// DiskFloor is -disk-floor: write + fsync samples taken in the run's
	// directory before the first target starts (0: not measured).
	DiskFloor  int `json:"diskFloorSamples"`
	serverCPUs []int
	phases     string
	sweep      string
	openLoop   bool
}

// MarshalJSON writes the durations as Go duration strings ("15s"), which a
// reader can compare with the flags, instead of nanoseconds.
func (c config) MarshalJSON() ([]byte, error) {
	type plain config
	return json.Marshal(struct {
		plain
		Duration   string `json:"duration"`
		Warmup     string `json:"warmup"`
		Settle     string `json:"settle"`
		Timeout    string `json:"requestTimeout"`
		WaitQuiet  string `json:"waitQuiet"`
		Step       string `json:"step"`
		StepWarmup string `json:"stepWarmup"`
		P99Bound   string `json:"p99Bound"`
	}{plain(c), c.Duration.String(), c.Warmup.String(), c.Settle.String(), c.Timeout.String(), c.WaitQuiet.String(),
		c.Step.String(), c.StepWarmup.String(), c.P99Bound.String()})
}

// phaseResult is one phase against one target.
type phaseResult struct {
	Target          string           `json:"target"`
	Phase           string           `json:"phase"` // "max" or "steady"
	Workers         int              `json:"workers,omitempty"`
	TargetRate      float64          `json:"targetRate,omitempty"`
	DurationSeconds float64          `json:"durationSeconds"`
	Scheduled       int64            `json:"scheduled,omitempty"`
	OK              int64            `json:"ok"`
	Non2xx          int64            `json:"non2xx"`
	TransportErrors int64            `json:"transportErrors"`
	Statuses        map[string]int64 `json:"statuses"`
	ReqPerSec       float64          `json:"reqPerSec"` // 2xx answers per second
	P50Ms           float64          `json:"p50Ms"`
	P90Ms           float64          `json:"p90Ms"`
	P99Ms           float64          `json:"p99Ms"`
	P999Ms          float64          `json:"p999Ms"`
	MaxMs           float64          `json:"maxMs"`
	MeanMs          float64          `json:"meanMs"`
	SendLagP99Ms    float64          `json:"sendLagP99Ms,omitempty"`
	SendLagMaxMs    float64          `json:"sendLagMaxMs,omitempty"`
	ServerCPUCores  float64          `json:"serverCpuCores"` // CPU seconds per wall second; -1 unknown
	ServerCPUPerReq float64          `json:"serverCpuUsPerRequest"`
	ClientCPUCores  float64          `json:"clientCpuCores"`
	// OtherCPUCores is what every other process on the machine used during
	// the window (machine busy time less server and client); a run with
	// more than a few hundredths here shared the CPU with something else.
	OtherCPUCores float64 `json:"otherCpuCores"`
	// ServerCPUsSeen and ClientCPUsSeen are where the threads of the
	// server and of this client were allowed to run at the end of the
	// phase (Cpus_allowed_list of every thread): the placement as
	// observed, not as asked for.
	ServerCPUsSeen string  `json:"serverCpusSeen,omitempty"`
	ClientCPUsSeen string  `json:"clientCpusSeen,omitempty"`
	WriterCommits  float64 `json:"writerCommits,omitempty"`
	WriterUnits    float64 `json:"writerUnits,omitempty"`
	MeanBatch      float64 `json:"meanBatch,omitempty"`
	// ReplGroups is how many observations (writer COMMITs, each holding
	// one or more heartbeats) the replica confirmed during the window, from the delta of
	// chalupa_replication_commit_delay_seconds; ReplP50Ms and ReplP99Ms
	// are the commit → in-replica median and p99 in milliseconds as
	// Prometheus' histogram_quantile estimates them, and ReplP50LeMs and
	// ReplP99LeMs the upper bounds of the buckets holding them (the true
	// value is at most that; -1 for +Inf, beyond the last bucket, which
	// JSON cannot carry).
	ReplGroups  float64 `json:"replGroups,omitempty"`
	ReplP50Ms   float64 `json:"replP50Ms,omitempty"`
	ReplP50LeMs float64 `json:"replP50LeMs,omitempty"`
	ReplP99Ms   float64 `json:"replP99Ms,omitempty"`
	ReplP99LeMs float64 `json:"replP99LeMs,omitempty"`
	// CommitP99LeMs bounds the p99 of chalupa_writer_commit_seconds in
	// the window (the bucket holding it); LockWaits counts the batches
	// whose BEGIN waited for the write lock (chalupa_writer_lock_wait_seconds)
	// and LockWaitMaxLeMs bounds the longest such wait. They tell whether a
	// latency tail is the fsync or Litestream's checkpoint lock.
	CommitP99LeMs   float64 `json:"commitP99LeMs,omitempty"`
	LockWaits       float64 `json:"lockWaits,omitempty"`
	LockWaitMaxLeMs float64 `json:"lockWaitMaxLeMs,omitempty"`
	// TelemetryWindows is how many of the phase's requests (warm-up
	// included) were telemetry windows.
	TelemetryWindows int64 `json:"telemetryWindows,omitempty"`
	// Fold (fold phase only) is what the retention passes did.
	Fold *foldRun `json:"fold,omitempty"`
}

type report struct {
	Config  config        `json:"config"`
	Results []phaseResult `json:"results"`
	// Ratio is chalupa's max throughput over the reference's (0 when
	// either was not run).
	Ratio float64 `json:"ratio,omitempty"`
	// ChalupaMeanBatch is units/commits over chalupa's whole run.
	ChalupaMeanBatch float64 `json:"chalupaMeanBatch,omitempty"`
	RatioPass        *bool   `json:"ratioPass,omitempty"`
	P99Pass          *bool   `json:"p99Pass,omitempty"`
	// Sweeps is each target's open-loop sweep outcome (-open-loop).
	Sweeps []sweepSummary `json:"sweeps,omitempty"`
	// DiskFloor is the disk's own latency and CPU for a write + fsync in
	// the run's directory (-disk-floor; nil when skipped): no durable
	// heartbeat is faster, whatever chalupa does.
	DiskFloor *harness.DiskFloor `json:"diskFloor,omitempty"`
	// MachineFloor is this machine's cost of a system call and of a
	// thread wake-up, measured with the disk floor.
	MachineFloor *harness.MachineFloor `json:"machineFloor,omitempty"`
}

func main() {
	var cfg config
	var serveRef, serveFloor bool
	var refDB string
	flag.DurationVar(&cfg.Duration, "duration", 15*time.Second, "measured duration of each phase")
	flag.DurationVar(&cfg.Warmup, "warmup", 3*time.Second, "unmeasured warm-up before each phase")
	flag.DurationVar(&cfg.Settle, "settle", 2*time.Second, "pause between the phases of a target, and between sweep steps")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "per-request timeout")
	flag.IntVar(&cfg.Workers, "workers", 64, "concurrent workers in the max-throughput phase")
	flag.Float64Var(&cfg.Rate, "rate", 1000, "arrival rate of the steady phase, requests/s")
	flag.IntVar(&cfg.Deployments, "deployments", 500, "deployment ids the heartbeats are spread over")
	flag.IntVar(&cfg.MaxInflight, "max-inflight", 2048, "steady phase: most requests outstanding at once")
	flag.Int64Var(&cfg.MaxRequests, "max-requests", 20_000_000, "max phase: most requests sent (a safety bound)")
	flag.IntVar(&cfg.RefConns, "ref-conns", 64, "reference: SQLite pool size (concurrent transactions)")
	flag.StringVar(&cfg.Only, "only", "both", "targets, comma-separated: chalupa, reference, floor (net/http alone, README \"The net/http floor\"); both means chalupa,reference")
	flag.StringVar(&cfg.ChalupaBin, "chalupa-bin", "", "use this chalupa binary instead of building tmp/chalupa")
	flag.StringVar(&cfg.EnvSlug, "env", "load-test", "environment slug the key is bound to")
	flag.BoolVar(&cfg.JSON, "json", false, "print the report as JSON (progress still goes to stderr)")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the temporary directory (databases, logs)")
	flag.IntVar(&cfg.DiskFloor, "disk-floor", 1000, "before the first target, time this many write + fsync pairs in the run's directory and report the disk's floor for a durable commit, and the machine's cost of a system call and a thread wake-up (0: skip both)")
	flag.DurationVar(&cfg.WaitQuiet, "wait-quiet", 60*time.Second, "before each phase, wait up to this long for other processes to leave the CPU idle (0: don't)")
	flag.StringVar(&cfg.phases, "phases", "max,steady", "phases to run against each target: max, steady, sweep (comma-separated)")
	flag.BoolVar(&cfg.openLoop, "open-loop", false, "also run the open-loop rate sweep (adds sweep to -phases)")
	flag.StringVar(&cfg.sweep, "sweep", defaultSweep, "sweep: rates in requests/s, increasing")
	flag.DurationVar(&cfg.Step, "step", 10*time.Second, "sweep: measured duration of each rate")
	flag.DurationVar(&cfg.StepWarmup, "step-warmup", 2*time.Second, "sweep: unmeasured warm-up before each rate")
	flag.DurationVar(&cfg.P99Bound, "p99-bound", 10*time.Millisecond, "sweep: a rate is served when its p99 is at most this, with no errors")
	flag.Float64Var(&cfg.TelemetryRatio, "telemetry-ratio", 0, "share (0–1) of the steady and fold phases' requests that are signed telemetry windows (an agent's 1 window a minute beside 2 heartbeats: 0.33)")
	flag.IntVar(&cfg.FoldRows, "fold-rows", 0, "seed chalupa's database with this many telemetry windows older than 7 days and add the fold phase: steady load while retention folds them (needs -only chalupa)")
	flag.StringVar(&cfg.ServerCPUs, "server-cpus", "", "run the servers under `taskset -c LIST` (e.g. 0 or 0,1) and keep this client on the other CPUs")
	flag.BoolVar(&serveRef, "serve-reference", false, "internal: run as the reference server")
	flag.BoolVar(&serveFloor, "serve-floor", false, "internal: run as the floor server")
	flag.StringVar(&refDB, "ref-db", "", "internal: reference database path")
	flag.Parse()

	if serveFloor {
		if err := runFloorServer(); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		return
	}
	if serveRef {
		if err := runReferenceServer(refDB, cfg.RefConns); err != nil {
			fmt.Fprintln(os.Stderr, "reference:", err)
			os.Exit(1)
		}
		return
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	if cfg.ChalupaBin != "" {
		// The server runs in its own directory: a relative path would not
		// resolve there.
		abs, err := filepath.Abs(cfg.ChalupaBin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(2)
		}
		cfg.ChalupaBin = abs
	}
	cfg.NumCPU = runtime.NumCPU()
	if err := cfg.place(); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	cfg.GOMAXPROCS = runtime.GOMAXPROCS(0)
	rep, err := run(cfg)
	if rep != nil && len(rep.Results) > 0 {
		if cfg.JSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			printReport(os.Stdout, rep)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// targets returns -only as a list of target names, nil when it names an
// unknown target or one twice.
func (c *config) targets() []string {
	if c.Only == "both" {
		return []string{"chalupa", "reference"}
	}
	var ts []string
	for _, t := range strings.Split(c.Only, ",") {
		if !slices.Contains([]string{"chalupa", "reference", "floor"}, t) || slices.Contains(ts, t) {
			return nil
		}
		ts = append(ts, t)
	}
	return ts
}

func (c *config) validate() error {
	switch {
	case c.Duration <= 0 || c.Duration > time.Hour:
		return errors.New("-duration must be in (0, 1h]")
	case c.Warmup < 0 || c.Warmup > 10*time.Minute:
		return errors.New("-warmup must be in [0, 10m]")
	case c.WaitQuiet < 0 || c.WaitQuiet > 30*time.Minute:
		return errors.New("-wait-quiet must be in [0, 30m]")
	case c.Settle < 0 || c.Settle > time.Minute:
		return errors.New("-settle must be in [0, 1m]")
	case c.Timeout <= 0 || c.Timeout > time.Minute:
		return errors.New("-timeout must be in (0, 1m]")
	case c.Workers < 1 || c.Workers > 4096:
		return errors.New("-workers must be in [1, 4096]")
	case !(c.Rate > 0 && c.Rate <= 100_000):
		return errors.New("-rate must be in (0, 100000]")
	case c.Deployments < 1 || c.Deployments > 1_000_000:
		return errors.New("-deployments must be in [1, 1000000]")
	case c.MaxInflight < 1 || c.MaxInflight > 16384:
		return errors.New("-max-inflight must be in [1, 16384]")
	case c.MaxRequests < 1:
		return errors.New("-max-requests must be positive")
	case c.DiskFloor < 0 || c.DiskFloor > 100_000:
		return errors.New("-disk-floor must be in [0, 100000]")
	case c.RefConns < 1 || c.RefConns > 1024:
		return errors.New("-ref-conns must be in [1, 1024]")
	case c.targets() == nil:
		return errors.New("-only must be both or a comma-separated list of chalupa, reference, floor")
	case !signerSlugOK(c.EnvSlug):
		return errors.New("-env must be a slug (^[a-z0-9][a-z0-9-]{1,62}$)")
	}
	switch {
	case c.Step <= 0 || c.Step > time.Hour:
		return errors.New("-step must be in (0, 1h]")
	case c.StepWarmup < 0 || c.StepWarmup > 10*time.Minute:
		return errors.New("-step-warmup must be in [0, 10m]")
	case c.P99Bound <= 0 || c.P99Bound > time.Minute:
		return errors.New("-p99-bound must be in (0, 1m]")
	}
	switch {
	case !(c.TelemetryRatio >= 0 && c.TelemetryRatio <= 1):
		return errors.New("-telemetry-ratio must be in [0, 1]")
	case c.FoldRows < 0 || c.FoldRows > maxFoldRows:
		return fmt.Errorf("-fold-rows must be in [0, %d]", maxFoldRows)
	case c.FoldRows > 0 && c.Only != "chalupa":
		return errors.New("-fold-rows needs -only chalupa (the reference has no retention)")
	}
	phases := c.phases
	if c.openLoop {
		phases += ",sweep"
	}
	if c.FoldRows > 0 {
		phases += ",fold"
	}
	var err error
	if c.Phases, err = parsePhases(phases); err != nil {
		return fmt.Errorf("-phases: %w", err)
	}
	if slices.Contains(c.Phases, "sweep") {
		if c.SweepRates, err = parseRates(c.sweep); err != nil {
			return fmt.Errorf("-sweep: %w", err)
		}
	}
	// Each deployment's session holds at most
	// harness.TelemetryWindowsPerDeployment windows in a run.
	var open time.Duration
	for _, p := range c.Phases {
		if p == "steady" || p == "fold" {
			open += c.Warmup + c.Duration
		}
	}
	if windows := c.Rate * c.TelemetryRatio * open.Seconds(); windows > float64(c.Deployments*harness.TelemetryWindowsPerDeployment) {
		return fmt.Errorf("-telemetry-ratio: %.0f windows would exceed %d per deployment; raise -deployments", windows, harness.TelemetryWindowsPerDeployment)
	}
	cpus, err := harness.ParseCPUList(c.ServerCPUs)
	if err != nil {
		return fmt.Errorf("-server-cpus: %w", err)
	}
	c.serverCPUs = cpus
	return nil
}

// place carries out -server-cpus for this process: it keeps the client
// (every thread of it, with GOMAXPROCS to match) off the server's CPUs, so
// that the server has its CPUs to itself as on a droplet of that size. The
// servers themselves are placed when started (harness.Command).
func (c *config) place() error {
	if len(c.serverCPUs) == 0 {
		return nil
	}
	allowed, err := harness.AllowedCPUs()
	if err != nil {
		return err
	}
	for _, cpu := range c.serverCPUs {
		if !slices.Contains(allowed, cpu) {
			return fmt.Errorf("-server-cpus: CPU %d is not one this process may use (%s)", cpu, harness.FormatCPUList(allowed))
		}
	}
	client := harness.Without(allowed, c.serverCPUs)
	if len(client) == 0 {
		return fmt.Errorf("-server-cpus %s leaves no CPU for the client (this process may use %s)", c.ServerCPUs, harness.FormatCPUList(allowed))
	}
	if err := harness.PinProcess(client); err != nil {
		return err
	}
	runtime.GOMAXPROCS(len(client))
	c.ServerCPUs, c.ClientCPUs = harness.FormatCPUList(c.serverCPUs), harness.FormatCPUList(client)
	return nil
}

func signerSlugOK(s string) bool {
	if len(s) < 2 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return false
		}
	}
	return true
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "load: "+format+"\n", a...)
}

// run performs the whole measurement. It is bounded in time: every phase by
// its own clock, and the whole by a deadline derived from the flags.
func run(cfg config) (*report, error) {
	targets := cfg.targets()
	perTarget := 2*(cfg.Warmup+cfg.Duration+cfg.WaitQuiet) + cfg.Settle + 2*cfg.Timeout + 3*time.Minute
	if n := time.Duration(len(cfg.SweepRates)); slices.Contains(cfg.Phases, "sweep") {
		perTarget += n * (cfg.StepWarmup + cfg.Step + cfg.WaitQuiet + cfg.Settle + cfg.Timeout)
	}
	if cfg.FoldRows > 0 {
		// Seeding (~15 s per million rows) and the last pass's answer.
		perTarget += time.Duration(cfg.FoldRows/1_000_000+1)*time.Minute + replicatedWait + serverIdleWait + foldPassMargin
	}
	budget := time.Duration(len(targets))*perTarget + 6*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "chalupa-load-")
	if err != nil {
		return nil, err
	}
	if cfg.Keep {
		progress("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	rep := &report{Config: cfg}
	if cfg.DiskFloor > 0 {
		progress("measuring the disk floor: %d × write + fsync in %s", cfg.DiskFloor, dir)
		floor, err := harness.MeasureDiskFloor(dir, cfg.DiskFloor)
		if err != nil {
			return rep, err
		}
		rep.DiskFloor = &floor
		mf, err := harness.MeasureMachineFloor(200_000, 20_000)
		if err != nil {
			return rep, err
		}
		rep.MachineFloor = &mf
	}
	for _, name := range targets {
		res, batch, err := runTarget(ctx, cfg, name, filepath.Join(dir, name))
		rep.Results = append(rep.Results, res...)
		if name == "chalupa" {
			rep.ChalupaMeanBatch = batch
		}
		if slices.Contains(cfg.Phases, "sweep") {
			var steps []phaseResult
			for _, r := range res {
				if r.Phase == "sweep" {
					steps = append(steps, r)
				}
			}
			rep.Sweeps = append(rep.Sweeps, summarizeSweep(name, steps, cfg.P99Bound, err == nil))
		}
		if err != nil {
			return rep, fmt.Errorf("%s: %w", name, err)
		}
	}
	var cMax, rMax, cSteady *phaseResult
	for i := range rep.Results {
		r := &rep.Results[i]
		switch {
		case r.Target == "chalupa" && r.Phase == "max":
			cMax = r
		case r.Target == "reference" && r.Phase == "max":
			rMax = r
		case r.Target == "chalupa" && r.Phase == "steady":
			cSteady = r
		}
	}
	if cMax != nil && rMax != nil && rMax.ReqPerSec > 0 {
		rep.Ratio = cMax.ReqPerSec / rMax.ReqPerSec
		pass := rep.Ratio >= targetRatio
		rep.RatioPass = &pass
	}
	if cSteady != nil {
		pass := cSteady.P99Ms <= float64(targetP99)/float64(time.Millisecond) &&
			cSteady.Non2xx+cSteady.TransportErrors == 0
		rep.P99Pass = &pass
	}
	return rep, nil
}

// sampler records CPU (server and this client) and, for chalupa, writer
// statistics at the edges of a phase's measurement window.
type sampler struct {
	ctx                  context.Context
	srv                  *harness.Server
	chal                 *harness.Chalupa
	t0, t1               time.Time
	srv0, srv1           float64
	self0, self1         float64
	mach0, mach1         float64
	commits0, units0     float64
	commits1, units1     float64
	statsErr0, statsErr1 error
	// repl0 and repl1 are chalupa_replication_commit_delay_seconds at
	// the window's edges (nil when it could not be read); commit* and
	// wait* the writer's commit and lock-wait histograms.
	repl0, repl1     harness.PromHistogram
	commit0, commit1 harness.PromHistogram
	wait0, wait1     harness.PromHistogram
}

// Writer histograms (docs/operations.md, "Storage and the writer").
const (
	commitMetric   = "chalupa_writer_commit_seconds"
	lockWaitMetric = "chalupa_writer_lock_wait_seconds"
)

// replDelayMetric is chalupa's commit → in-replica histogram: one
// observation per writer COMMIT, from the commit to the end of the sync
// that confirmed it (docs/operations.md, "Replication").
const replDelayMetric = "chalupa_replication_commit_delay_seconds"

// Targets for commit → in replica at the steady rate (docs/operations.md,
// "Replication").
const (
	targetReplP50 = 100 * time.Millisecond
	targetReplP99 = time.Second
)

// scraped is one /metrics sample of chalupa's writer and replication.
type scraped struct {
	commits, units          float64
	repl, commitT, lockWait harness.PromHistogram
}

// scrape reads chalupa's writer counters and the replication and writer
// histograms with one /metrics request.
func (s *sampler) scrape() (scraped, error) {
	var sc scraped
	text, err := s.chal.MetricsText(s.ctx)
	if err != nil {
		return sc, err
	}
	m, err := harness.ParseMetrics(text)
	if err != nil {
		return sc, err
	}
	if sc.commits, sc.units, err = harness.WriterStatsOf(m); err != nil {
		return sc, err
	}
	sc.repl, _ = harness.ParsePromHistogram(strings.NewReader(text), replDelayMetric)
	sc.commitT, _ = harness.ParsePromHistogram(strings.NewReader(text), commitMetric)
	sc.lockWait, _ = harness.ParsePromHistogram(strings.NewReader(text), lockWaitMetric)
	return sc, nil
}

// Start samples at the beginning of the window.
func (s *sampler) Start() {
	if s.chal != nil {
		var sc scraped
		sc, s.statsErr0 = s.scrape()
		s.commits0, s.units0, s.repl0, s.commit0, s.wait0 = sc.commits, sc.units, sc.repl, sc.commitT, sc.lockWait
	}
	s.t0, s.srv0, s.self0, s.mach0 = time.Now(), s.srv.CPUSeconds(), harness.ProcCPUSeconds("self"), harness.MachineCPUSeconds()
}

// End samples at the end of the window.
func (s *sampler) End() {
	s.t1, s.srv1, s.self1, s.mach1 = time.Now(), s.srv.CPUSeconds(), harness.ProcCPUSeconds("self"), harness.MachineCPUSeconds()
	if s.chal != nil {
		var sc scraped
		sc, s.statsErr1 = s.scrape()
		s.commits1, s.units1, s.repl1, s.commit1, s.wait1 = sc.commits, sc.units, sc.repl, sc.commitT, sc.lockWait
	}
}

func (s *sampler) fill(r *phaseResult) {
	wall := s.t1.Sub(s.t0).Seconds()
	r.ServerCPUCores, r.ClientCPUCores, r.OtherCPUCores = -1, -1, -1
	if wall > 0 && s.srv0 >= 0 && s.srv1 >= 0 {
		r.ServerCPUCores = (s.srv1 - s.srv0) / wall
		if n := r.OK + r.Non2xx; n > 0 {
			r.ServerCPUPerReq = (s.srv1 - s.srv0) / float64(n) * 1e6
		}
	}
	if wall > 0 && s.self0 >= 0 && s.self1 >= 0 {
		r.ClientCPUCores = (s.self1 - s.self0) / wall
	}
	if wall > 0 && r.ServerCPUCores >= 0 && r.ClientCPUCores >= 0 && s.mach0 >= 0 && s.mach1 >= 0 {
		r.OtherCPUCores = max(0, (s.mach1-s.mach0)/wall-r.ServerCPUCores-r.ClientCPUCores)
	}
	if cpus, err := harness.ThreadCPUs(s.srv.PID()); err == nil {
		r.ServerCPUsSeen = harness.FormatCPUList(cpus)
	}
	if cpus, err := harness.ThreadCPUs(os.Getpid()); err == nil {
		r.ClientCPUsSeen = harness.FormatCPUList(cpus)
	}
	if s.chal != nil && s.statsErr0 == nil && s.statsErr1 == nil {
		r.WriterCommits = s.commits1 - s.commits0
		r.WriterUnits = s.units1 - s.units0
		if r.WriterCommits > 0 {
			r.MeanBatch = r.WriterUnits / r.WriterCommits
		}
	}
	if s.repl0 != nil && s.repl1 != nil {
		if d, err := s.repl1.Sub(s.repl0); err == nil && d.Count() > 0 {
			r.ReplGroups = d.Count()
			est, le := d.Quantile(0.5)
			r.ReplP50Ms, r.ReplP50LeMs = est*1000, boundMs(le)
			est, le = d.Quantile(0.99)
			r.ReplP99Ms, r.ReplP99LeMs = est*1000, boundMs(le)
		}
	}
	if s.commit0 != nil && s.commit1 != nil {
		if d, err := s.commit1.Sub(s.commit0); err == nil && d.Count() > 0 {
			_, le := d.Quantile(0.99)
			r.CommitP99LeMs = boundMs(le)
		}
	}
	if s.wait0 != nil && s.wait1 != nil {
		if d, err := s.wait1.Sub(s.wait0); err == nil && d.Count() > 0 {
			r.LockWaits = d.Count()
			_, le := d.Quantile(1)
			r.LockWaitMaxLeMs = boundMs(le)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func summarize(r *phaseResult, t *harness.Tally) {
	r.OK, r.Non2xx, r.TransportErrors = t.OK, t.Non2xx, t.Transport
	r.Statuses = map[string]int64{}
	for k, v := range t.Statuses {
		r.Statuses[strconv.Itoa(k)] = v
	}
	if r.TransportErrors > 0 {
		r.Statuses["transport"] = r.TransportErrors
	}
	r.P50Ms, r.P90Ms = ms(t.Lat.Quantile(0.50)), ms(t.Lat.Quantile(0.90))
	r.P99Ms, r.P999Ms = ms(t.Lat.Quantile(0.99)), ms(t.Lat.Quantile(0.999))
	r.MaxMs, r.MeanMs = ms(t.Lat.Max()), ms(t.Lat.Mean())
}

// runTarget starts one server, runs the phases of -phases against it and
// stops it.
// It returns the phase results and, for chalupa, the mean writer batch over
// the whole run.
func runTarget(ctx context.Context, cfg config, name, dir string) ([]phaseResult, float64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, err
	}
	var (
		srv   *harness.Server
		chal  *harness.Chalupa
		keyID string
		key   []byte
	)
	switch name {
	case "chalupa":
		bin := cfg.ChalupaBin
		if bin == "" {
			root, err := harness.FindRepoRoot()
			if err != nil {
				return nil, 0, err
			}
			progress("building %s", filepath.Join(root, "tmp", "chalupa"))
			if bin, err = harness.BuildChalupa(ctx, root); err != nil {
				return nil, 0, err
			}
		}
		if cfg.FoldRows > 0 {
			progress("chalupa: seeding %d telemetry windows older than 7 days", cfg.FoldRows)
			t0 := time.Now()
			if err := seedFoldDB(ctx, filepath.Join(dir, harness.ChalupaDataDirName), cfg.EnvSlug, cfg.FoldRows); err != nil {
				return nil, 0, fmt.Errorf("seed fold backlog: %w", err)
			}
			progress("chalupa: seeded in %s", time.Since(t0).Round(time.Second))
		}
		progress("chalupa: starting %s serve with %s", bin, strings.Join(harness.BenchmarkQuotaEnv, " "))
		var err error
		started := time.Now()
		if chal, err = harness.StartChalupa(ctx, bin, dir, harness.StartOptions{CPUs: cfg.serverCPUs}); err != nil {
			return nil, 0, err
		}
		srv = chal.Server
		issue := chal.IssueKey
		if cfg.FoldRows > 0 {
			issue = chal.IssueKeyExisting // seeded with the database
		}
		if keyID, key, err = issue(ctx, cfg.EnvSlug); err != nil {
			srv.Stop(harness.ChalupaStopGrace)
			return nil, 0, err
		}
		if cfg.FoldRows > 0 {
			// The seeded database is replicated whole at start; measuring
			// before that ends would measure the initial copy.
			t0 := time.Now()
			if err := waitReplicated(ctx, chal, replicatedWait); err != nil {
				srv.Stop(harness.ChalupaStopGrace)
				return nil, 0, err
			}
			progress("chalupa: replica caught up with the seeded database in %s", time.Since(t0).Round(time.Second))
			if d, idle := waitServerIdle(ctx, srv, started, serverIdleWait); idle {
				progress("chalupa: server idle (< %.2f cores) %s after its start", serverIdleCPU, time.Since(started).Round(time.Second))
			} else {
				progress("chalupa: server still busy after another %s (replica compaction?); measuring anyway", d.Round(time.Second))
			}
		}
	case "reference":
		material := protocol.NewKeyMaterial()
		key, _ = protocol.DecodeKeyMaterial(material)
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		keyID = "env_" + cfg.EnvSlug + "_" + hex.EncodeToString(b)
		progress("reference: starting (pool of %d SQLite connections)", cfg.RefConns)
		var err error
		if srv, err = startReference(ctx, dir, cfg.serverCPUs, cfg.RefConns, keyID, material, cfg.EnvSlug); err != nil {
			return nil, 0, err
		}
	case "floor":
		// The floor checks no signature; the requests are signed all
		// the same, so the client does the same work for every target.
		key, _ = protocol.DecodeKeyMaterial(protocol.NewKeyMaterial())
		keyID = "env_" + cfg.EnvSlug + "_floor"
		progress("floor: starting (net/http alone)")
		var err error
		if srv, err = startFloor(ctx, dir, cfg.serverCPUs); err != nil {
			return nil, 0, err
		}
	}
	grace := 15 * time.Second
	if chal != nil {
		grace = harness.ChalupaStopGrace
	}
	stopped := false
	stopSrv := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return srv.Stop(grace)
	}
	defer stopSrv()

	conns := max(cfg.Workers, 256)
	w, err := harness.NewWorkload(srv.URL, keyID, key, cfg.EnvSlug, cfg.Deployments, conns, cfg.Timeout)
	if err != nil {
		return nil, 0, err
	}
	defer w.Close()
	if cfg.TelemetryRatio > 0 {
		progress("%s: one heartbeat to each of %d deployments before telemetry", name, cfg.Deployments)
		if err := w.Prime(ctx); err != nil {
			return nil, 0, err
		}
	}

	var out []phaseResult
	env := phaseEnv{cfg: cfg, name: name, srv: srv, chal: chal, w: w}
	for i, phase := range cfg.Phases {
		if i > 0 {
			harness.SleepUntil(ctx, time.Now().Add(cfg.Settle))
		}
		switch phase {
		case "max":
			out = append(out, env.max(ctx))
		case "steady":
			out = append(out, env.steady(ctx, "steady", cfg.Rate, cfg.Warmup, cfg.Duration))
		case "fold":
			out = append(out, env.steady(ctx, "fold", cfg.Rate, cfg.Warmup, cfg.Duration))
		case "sweep":
			out = append(out, env.sweep(ctx)...)
		}
		if err := ctx.Err(); err != nil {
			return out, 0, err
		}
	}

	var batch float64
	if chal != nil {
		c, u, err := chal.WriterStats(ctx)
		if err != nil {
			progress("chalupa: %v", err)
		} else if c > 0 {
			batch = u / c
		}
	}
	progress("%s: stopping", name)
	if err := stopSrv(); err != nil {
		progress("%s: %v", name, err)
	}
	return out, batch, nil
}

// phaseEnv is what every phase against one target uses.
type phaseEnv struct {
	cfg  config
	name string
	srv  *harness.Server
	chal *harness.Chalupa
	w    *harness.Workload
}

// max runs the closed-loop phase.
func (e *phaseEnv) max(ctx context.Context) phaseResult {
	cfg := e.cfg
	waitQuiet(ctx, cfg.WaitQuiet, e.srv)
	progress("%s: max throughput, %d workers, %s warm-up + %s", e.name, cfg.Workers, cfg.Warmup, cfg.Duration)
	s := &sampler{ctx: ctx, srv: e.srv, chal: e.chal}
	t, measured := harness.RunMax(ctx, e.w, s, cfg.Workers, cfg.Warmup, cfg.Duration, cfg.MaxRequests)
	r := phaseResult{Target: e.name, Phase: "max", Workers: cfg.Workers, DurationSeconds: measured.Seconds()}
	summarize(&r, t)
	r.ReqPerSec = float64(r.OK) / measured.Seconds()
	s.fill(&r)
	return r
}

// steady runs one open-loop phase at rate: the steady phase, or one step
// of the sweep (phase "sweep").
func (e *phaseEnv) steady(ctx context.Context, phase string, rate float64, warmup, dur time.Duration) phaseResult {
	cfg := e.cfg
	waitQuiet(ctx, cfg.WaitQuiet, e.srv)
	progress("%s: %s %.0f req/s, %s warm-up + %s", e.name, phase, rate, warmup, dur)
	s := &sampler{ctx: ctx, srv: e.srv, chal: e.chal}
	mixed := phase != "sweep" && cfg.TelemetryRatio > 0
	if mixed {
		e.w.MixTelemetry(cfg.TelemetryRatio)
	}
	windows0 := e.w.TelemetrySent()
	var driver *retentionDriver
	if phase == "fold" {
		// From the start of the warm-up, so the fold is under way when the
		// window opens.
		driver = startRetention(ctx, e.chal.Admin)
	}
	t, scheduled := harness.RunSteady(ctx, e.w, s, rate, warmup, dur, cfg.MaxInflight)
	e.w.MixTelemetry(0)
	r := phaseResult{Target: e.name, Phase: phase, TargetRate: rate, DurationSeconds: dur.Seconds(), Scheduled: scheduled}
	r.TelemetryWindows = int64(e.w.TelemetrySent() - windows0)
	if driver != nil {
		progress("%s: waiting for the retention pass in progress", e.name)
		r.Fold = driver.Stop(s.t0, s.t1)
	}
	summarize(&r, t)
	// Achieved rate: answers over the window, stretched to the last answer
	// when the server fell behind the schedule.
	span := dur
	if !t.LastDone.IsZero() && s.t0.Before(t.LastDone) && t.LastDone.Sub(s.t0) > span {
		span = t.LastDone.Sub(s.t0)
	}
	r.ReqPerSec = float64(r.OK) / span.Seconds()
	r.SendLagP99Ms, r.SendLagMaxMs = ms(t.Lag.Quantile(0.99)), ms(t.Lag.Max())
	s.fill(&r)
	return r
}

// waitQuiet waits, at most limit, until other processes (everything but this
// client and srv) use less than otherCPUWarn cores over a one-second sample.
// On a machine shared with other work (test suites, builds) a measurement
// taken while they run says little about the server.
func waitQuiet(ctx context.Context, limit time.Duration, srv *harness.Server) {
	if limit <= 0 {
		return
	}
	deadline := time.Now().Add(limit)
	warned := false
	for {
		m0, s0, c0, t0 := harness.MachineCPUSeconds(), srv.CPUSeconds(), harness.ProcCPUSeconds("self"), time.Now()
		harness.SleepUntil(ctx, t0.Add(time.Second))
		m1, s1, c1 := harness.MachineCPUSeconds(), srv.CPUSeconds(), harness.ProcCPUSeconds("self")
		if m0 < 0 || m1 < 0 || s0 < 0 || c0 < 0 || ctx.Err() != nil {
			return
		}
		other := ((m1 - m0) - (s1 - s0) - (c1 - c0)) / time.Since(t0).Seconds()
		if other < otherCPUWarn {
			return
		}
		if time.Now().After(deadline) {
			progress("other processes still use %.2f cores after %s; measuring anyway", other, limit)
			return
		}
		if !warned {
			progress("other processes use %.2f cores; waiting up to %s for the machine to be quiet", other, limit)
			warned = true
		}
	}
}

func printReport(out io.Writer, rep *report) {
	c := rep.Config
	placement := "client and server share them"
	if c.ServerCPUs != "" {
		placement = fmt.Sprintf("server on CPU %s, client on CPU %s", c.ServerCPUs, c.ClientCPUs)
	}
	fmt.Fprintf(out, "signed heartbeats on loopback: %d CPUs (%s), %d deployments, %s warm-up + %s per phase",
		c.NumCPU, placement, c.Deployments, c.Warmup, c.Duration)
	if c.TelemetryRatio > 0 {
		fmt.Fprintf(out, ", %.0f%% of steady requests telemetry windows", c.TelemetryRatio*100)
	}
	if c.FoldRows > 0 {
		fmt.Fprintf(out, ", %d foldable windows seeded", c.FoldRows)
	}
	if slices.Contains(c.Phases, "sweep") {
		fmt.Fprintf(out, ", %s + %s per sweep step", c.StepWarmup, c.Step)
	}
	fmt.Fprintln(out)
	printPlacement(out, rep)
	if rep.DiskFloor != nil {
		fmt.Fprintln(out, rep.DiskFloor.String())
	}
	if rep.MachineFloor != nil {
		fmt.Fprintln(out, rep.MachineFloor.String())
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tphase\treq/s\t2xx\tnon-2xx\terrors\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\tsend lag p99 ms\tserver CPU\tserver µs/req\tclient CPU\tother CPU\tbatch\t")
	for _, r := range rep.Results {
		phase := fmt.Sprintf("max (%d workers)", r.Workers)
		lag := "-"
		if r.Phase == "steady" || r.Phase == "sweep" || r.Phase == "fold" {
			phase = fmt.Sprintf("%s %.0f/s", r.Phase, r.TargetRate)
			lag = fmt.Sprintf("%.2f", r.SendLagP99Ms)
		}
		batch := "-"
		if r.MeanBatch > 0 {
			batch = fmt.Sprintf("%.1f", r.MeanBatch)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Target, phase, r.ReqPerSec, r.OK, r.Non2xx, r.TransportErrors,
			r.P50Ms, r.P99Ms, r.P999Ms, r.MaxMs, lag,
			cores(r.ServerCPUCores), usPerReq(r.ServerCPUCores, r.ServerCPUPerReq), cores(r.ClientCPUCores), cores(r.OtherCPUCores), batch)
	}
	tw.Flush()
	fmt.Fprintln(out)
	for _, r := range rep.Results {
		if r.Non2xx+r.TransportErrors > 0 {
			keys := make([]string, 0, len(r.Statuses))
			for k := range r.Statuses {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(out, "%s %s answers:", r.Target, r.Phase)
			for _, k := range keys {
				fmt.Fprintf(out, " %s×%d", k, r.Statuses[k])
			}
			fmt.Fprintln(out)
		}
	}
	for _, r := range rep.Results {
		if r.OtherCPUCores > otherCPUWarn {
			fmt.Fprintf(out, "WARNING: other processes used %.2f cores during %s %s; its figures are not a clean measurement\n", r.OtherCPUCores, r.Target, r.Phase)
		}
	}
	if rep.Ratio > 0 {
		fmt.Fprintf(out, "throughput ratio chalupa/reference: %.2f (target ≥ %.1f: %s)\n", rep.Ratio, targetRatio, passFail(rep.RatioPass))
	}
	for _, r := range rep.Results {
		if r.Target == "chalupa" && r.Phase == "steady" {
			fmt.Fprintf(out, "chalupa p99 at %.0f req/s: %.2f ms (target ≤ %d ms with no errors: %s)\n",
				r.TargetRate, r.P99Ms, targetP99.Milliseconds(), passFail(rep.P99Pass))
		}
	}
	for _, r := range rep.Results {
		if r.Target != "chalupa" || r.ReplGroups == 0 {
			continue
		}
		phase := r.Phase
		if r.Phase != "max" {
			phase = fmt.Sprintf("%s %.0f/s", r.Phase, r.TargetRate)
		}
		fmt.Fprintf(out, "chalupa commit → in replica in %s (%s, %.0f commits): median %.0f ms (bucket ≤ %s), p99 %.0f ms (bucket ≤ %s)",
			phase, replDelayMetric, r.ReplGroups, r.ReplP50Ms, leMs(r.ReplP50LeMs), r.ReplP99Ms, leMs(r.ReplP99LeMs))
		if r.Phase == "steady" {
			pass := r.ReplP50LeMs >= 0 && r.ReplP50LeMs <= ms(targetReplP50) &&
				r.ReplP99LeMs >= 0 && r.ReplP99LeMs <= ms(targetReplP99)
			fmt.Fprintf(out, " (target median ≤ %d ms, p99 ≤ %d ms, by bucket bound: %s)", targetReplP50.Milliseconds(), targetReplP99.Milliseconds(), passFail(&pass))
		}
		fmt.Fprintln(out)
		if r.CommitP99LeMs != 0 {
			fmt.Fprintf(out, "chalupa writer in %s: COMMIT p99 ≤ %s (%s); %.0f batches waited for the write lock (%s), longest ≤ %s\n",
				phase, leMs(r.CommitP99LeMs), commitMetric, r.LockWaits, lockWaitMetric, leMs(r.LockWaitMaxLeMs))
		}
	}
	for _, sw := range rep.Sweeps {
		fmt.Fprintf(out, "%s open-loop sweep (p99 ≤ %.0f ms from the scheduled send, no errors, ≥ %.0f%% of the rate answered): ",
			sw.Target, sw.P99BoundMs, minAchieved*100)
		switch {
		case sw.MaxRate > 0:
			fmt.Fprintf(out, "highest rate served %.0f req/s", sw.MaxRate)
		default:
			fmt.Fprint(out, "no rate served")
		}
		switch {
		case sw.StoppedAt > 0:
			fmt.Fprintf(out, "; stopped at %.0f req/s: %s\n", sw.StoppedAt, sw.StopReason)
		case !sw.Complete:
			fmt.Fprint(out, " (interrupted)\n")
		default:
			fmt.Fprint(out, "; every rate served: the limit is above the last rate of -sweep\n")
		}
	}
	printFold(out, rep)
	if rep.ChalupaMeanBatch > 0 {
		fmt.Fprintf(out, "chalupa writer mean batch (chalupa_writer_units_total / chalupa_writer_commits_total): %.1f over the run", rep.ChalupaMeanBatch)
		for _, r := range rep.Results {
			if r.Target == "chalupa" && r.MeanBatch > 0 {
				if r.Phase == "sweep" {
					fmt.Fprintf(out, "; %.1f in sweep %.0f/s", r.MeanBatch, r.TargetRate)
				} else {
					fmt.Fprintf(out, "; %.1f in %s", r.MeanBatch, r.Phase)
				}
			}
		}
		fmt.Fprintln(out)
	}
}

// printPlacement says how the processes were placed on CPUs: asked for
// (-server-cpus) and seen (every thread's Cpus_allowed_list, per phase).
func printPlacement(out io.Writer, rep *report) {
	c := rep.Config
	if c.ServerCPUs == "" {
		fmt.Fprintf(out, "placement: not pinned (-server-cpus not set); client GOMAXPROCS %d\n", c.GOMAXPROCS)
		return
	}
	fmt.Fprintf(out, "placement: servers under `taskset -c %s`; client threads pinned to %s (sched_setaffinity), GOMAXPROCS %d\n",
		c.ServerCPUs, c.ClientCPUs, c.GOMAXPROCS)
	seen := map[string]bool{}
	var parts []string
	for _, r := range rep.Results {
		for _, p := range []string{r.Target + " " + r.ServerCPUsSeen, "client " + r.ClientCPUsSeen} {
			if !seen[p] {
				seen[p] = true
				parts = append(parts, p)
			}
		}
	}
	fmt.Fprintf(out, "placement seen (threads' Cpus_allowed_list after each phase): %s\n", strings.Join(parts, ", "))
	for _, r := range rep.Results {
		if r.ServerCPUsSeen != c.ServerCPUs || r.ClientCPUsSeen != c.ClientCPUs {
			fmt.Fprintf(out, "WARNING: %s %s ran with the server on %q and the client on %q, not as asked\n",
				r.Target, r.Phase, r.ServerCPUsSeen, r.ClientCPUsSeen)
		}
	}
}

// boundMs is a bucket bound (seconds) in milliseconds, -1 for +Inf.
func boundMs(le float64) float64 {
	if math.IsInf(le, 1) {
		return -1
	}
	return le * 1000
}

// leMs formats a bucket bound from boundMs.
func leMs(v float64) string {
	if v < 0 {
		return "+Inf"
	}
	return fmt.Sprintf("%g ms", v)
}

func cores(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func usPerReq(c, v float64) string {
	if c < 0 || v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

func passFail(p *bool) string {
	if p == nil {
		return "n/a"
	}
	if *p {
		return "PASS"
	}
	return "FAIL"
}
