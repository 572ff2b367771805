// Command footprint measures what every command and every droplet pays for
// chalupa, against the targets of docs/operations.md, "Footprint", and
// prints each figure beside its target:
//
//	go run ./contrib/footprint [-agent-run 10m] [-runs 5] [-keep]
//
// It builds the release archives for linux/amd64 with contrib/release.sh
// (CHALUPA_RELEASE_ARCHES=amd64, CHALUPA_RELEASE_ALLOW_DIRTY=1, version
// v0.0.0-footprint) and measures the binaries inside them:
//
//   - package initialisation before main (GODEBUG=inittrace=1): chalupa's own
//     packages in chalupad (the full binary, which links them all), and
//     everything in chalupa-agent;
//   - peak RSS (getrusage's ru_maxrss, what /usr/bin/time -v reports) of
//     `chalupa version` (the light binary every operator command runs),
//     `chalupad version` (for reference) and `chalupa-agent version`, the
//     highest of -runs;
//   - the gzipped size of the chalupa-agent archive;
//   - `chalupa-agent run` against a `chalupad serve` on loopback (generated
//     secrets, a temporary data dir) for -agent-run: RSS every 30 s, and
//     the RSS after an hour extrapolated from the growth over the second
//     half of the run by least squares (the first half holds the start-up).
//
// Speed and memory goals live here, never in timed tests. Every loop is
// bounded; nothing is left running.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// The targets (docs/operations.md, "Footprint").
const (
	ownInitMaxMS      = 1.0
	ownInitMaxBytes   = 512 << 10
	versionMaxRSSKiB  = 30 << 10
	agentInitMaxMS    = 5.0
	agentInitMaxBytes = 2 << 20
	agentRunMaxRSSKiB = 20 << 10
	agentMaxGzipBytes = 15 << 20
)

// module is the chalupa module's import path prefix.
const module = "github.com/chalupa-run/chalupa/"

// version is the release version the archives are built as.
const version = "v0.0.0-footprint"

// sampleEvery is the agent run's RSS sampling cadence.
const sampleEvery = 30 * time.Second

func main() {
	agentRun := flag.Duration("agent-run", 10*time.Minute, "how long to run chalupa-agent against chalupa serve (0: skip)")
	runs := flag.Int("runs", 5, "how many times to run each `version` for its peak RSS")
	keep := flag.Bool("keep", false, "keep the working directory (archives, logs)")
	flag.Parse()
	if *agentRun < 0 || *agentRun > 2*time.Hour || *runs < 1 || *runs > 100 {
		fmt.Fprintln(os.Stderr, "footprint: -agent-run must be in [0, 2h], -runs in [1, 100]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, *agentRun, *runs, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "footprint:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(3)
	}
}

// report prints one figure against its target and returns whether it is
// met.
func report(name, value, target string, met bool, how string) bool {
	mark := "ok"
	if !met {
		mark = "OVER"
	}
	fmt.Printf("%-44s %14s  target %-10s %-4s  (%s)\n", name, value, target, mark, how)
	return met
}

func run(ctx context.Context, agentRun time.Duration, runs int, keep bool) (bool, error) {
	root, err := harness.FindRepoRoot()
	if err != nil {
		return false, err
	}
	dir, err := os.MkdirTemp("", "chalupa-footprint-")
	if err != nil {
		return false, err
	}
	if keep {
		fmt.Println("working directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	dist := filepath.Join(dir, "dist")
	fmt.Println("building the linux/amd64 release archives with contrib/release.sh …")
	rel := exec.CommandContext(ctx, "sh", filepath.Join(root, "contrib", "release.sh"), version, dist)
	rel.Dir = root
	rel.Env = append(os.Environ(), "CHALUPA_RELEASE_ARCHES=amd64", "CHALUPA_RELEASE_ALLOW_DIRTY=1")
	if b, err := rel.CombinedOutput(); err != nil {
		return false, fmt.Errorf("release.sh: %v\n%s", err, b)
	}
	// The chalupa archive holds chalupa (light) and chalupad (full).
	bins := map[string]string{}
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return false, err
	}
	for _, name := range []string{"chalupa", "chalupa-agent"} {
		archive := filepath.Join(dist, fmt.Sprintf("%s_%s_linux_amd64.tar.gz", name, version))
		if b, err := exec.CommandContext(ctx, "tar", "-xzf", archive, "-C", binDir).CombinedOutput(); err != nil {
			return false, fmt.Errorf("unpack %s: %v\n%s", archive, err, b)
		}
	}
	for _, name := range []string{"chalupa", "chalupa-cli"} {
		fi, err := os.Stat(filepath.Join(dist, fmt.Sprintf("%s_%s_linux_amd64.tar.gz", name, version)))
		if err != nil {
			return false, err
		}
		fmt.Printf("%-44s %14s\n", name+" archive, gzipped", fmt.Sprintf("%.1f MiB", float64(fi.Size())/(1<<20)))
	}
	for _, name := range []string{"chalupa", "chalupad", "chalupa-agent"} {
		bins[name] = filepath.Join(binDir, name)
		fi, err := os.Stat(bins[name])
		if err != nil {
			return false, err
		}
		fmt.Printf("%-44s %14s\n", name+" binary", fmt.Sprintf("%.1f MiB", float64(fi.Size())/(1<<20)))
	}
	all := true

	ms, bytes, err := initCost(ctx, bins["chalupad"], module)
	if err != nil {
		return false, err
	}
	all = report("chalupad: own packages' init", fmt.Sprintf("%.3f ms", ms), fmt.Sprintf("≤ %.0f ms", ownInitMaxMS), ms <= ownInitMaxMS, "GODEBUG=inittrace=1 chalupad version, summed over "+module+"…") && all
	all = report("chalupad: own packages' init allocations", fmt.Sprintf("%.0f KiB", float64(bytes)/1024), fmt.Sprintf("≤ %d KiB", ownInitMaxBytes>>10), bytes <= ownInitMaxBytes, "same run") && all
	for _, name := range []string{"chalupad", "chalupa"} {
		allMS, allBytes, err := initCost(ctx, bins[name], "")
		if err != nil {
			return false, err
		}
		fmt.Printf("%-44s %14s  (every package, for reference: %.0f KiB)\n", name+": all packages' init", fmt.Sprintf("%.1f ms", allMS), float64(allBytes)/1024)
	}
	rss, wall, err := peakRSS(ctx, bins["chalupad"], runs, "version")
	if err != nil {
		return false, err
	}
	fmt.Printf("%-44s %14s  (highest ru_maxrss of %d runs, mean wall time %s; for reference)\n", "chalupad version: peak RSS", fmt.Sprintf("%.1f MiB", float64(rss)/1024), runs, wall.Round(time.Millisecond))
	rss, wall, err = peakRSS(ctx, bins["chalupa"], runs, "version")
	if err != nil {
		return false, err
	}
	fmt.Printf("%-44s %14s  (mean wall time of %d runs, for reference)\n", "chalupa version: wall time", wall.Round(time.Millisecond), runs)
	all = report("chalupa version: peak RSS", fmt.Sprintf("%.1f MiB", float64(rss)/1024), fmt.Sprintf("≤ %d MiB", versionMaxRSSKiB>>10), rss <= versionMaxRSSKiB, fmt.Sprintf("highest ru_maxrss of %d runs", runs)) && all

	ms, bytes, err = initCost(ctx, bins["chalupa-agent"], "")
	if err != nil {
		return false, err
	}
	all = report("chalupa-agent: init, every package", fmt.Sprintf("%.3f ms", ms), fmt.Sprintf("≤ %.0f ms", agentInitMaxMS), ms <= agentInitMaxMS, "GODEBUG=inittrace=1 chalupa-agent version") && all
	all = report("chalupa-agent: init allocations", fmt.Sprintf("%.0f KiB", float64(bytes)/1024), fmt.Sprintf("≤ %d MiB", agentInitMaxBytes>>20), bytes <= agentInitMaxBytes, "same run") && all
	rss, _, err = peakRSS(ctx, bins["chalupa-agent"], runs, "version")
	if err != nil {
		return false, err
	}
	fmt.Printf("%-44s %14s  (highest ru_maxrss of %d runs)\n", "chalupa-agent version: peak RSS", fmt.Sprintf("%.1f MiB", float64(rss)/1024), runs)
	fi, err := os.Stat(filepath.Join(dist, fmt.Sprintf("chalupa-agent_%s_linux_amd64.tar.gz", version)))
	if err != nil {
		return false, err
	}
	all = report("chalupa-agent archive, gzipped", fmt.Sprintf("%.1f MiB", float64(fi.Size())/(1<<20)), fmt.Sprintf("≤ %d MiB", agentMaxGzipBytes>>20), fi.Size() <= agentMaxGzipBytes, "contrib/release.sh's chalupa-agent_VERSION_linux_amd64.tar.gz") && all

	if agentRun > 0 {
		last, hour, err := agentRunRSS(ctx, bins, dir, agentRun)
		if err != nil {
			return false, err
		}
		fmt.Printf("%-44s %14s\n", fmt.Sprintf("chalupa-agent run: RSS after %s", agentRun), fmt.Sprintf("%.1f MiB", float64(last)/1024))
		all = report("chalupa-agent run: RSS after an hour", fmt.Sprintf("%.1f MiB", float64(hour)/1024), fmt.Sprintf("≤ %d MiB", agentRunMaxRSSKiB>>10), hour <= agentRunMaxRSSKiB, "the second half's least-squares growth carried on to 1 h, never below the highest sample") && all
	}
	return all, nil
}

// initCost runs bin version with GODEBUG=inittrace=1 and sums the clock
// milliseconds and bytes of the packages whose import path starts with
// prefix ("" for every package).
func initCost(ctx context.Context, bin, prefix string) (ms float64, bytes int64, err error) {
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = append(harness.BaseEnv(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("%s version: %v\n%s", bin, err, out)
	}
	ms, bytes, n, err := parseInitTrace(string(out), prefix)
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("%s: no inittrace lines for %q", bin, prefix)
	}
	return ms, bytes, nil
}

// parseInitTrace sums the clock milliseconds and allocated bytes of the
// GODEBUG=inittrace=1 lines ("init PKG @T ms, C ms clock, B bytes, A
// allocs") of packages whose path starts with prefix, and counts them.
func parseInitTrace(text, prefix string) (ms float64, bytes int64, n int, err error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != "init" || !strings.HasPrefix(f[1], prefix) {
			continue
		}
		c, err1 := strconv.ParseFloat(f[4], 64)
		b, err2 := strconv.ParseInt(f[7], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, 0, fmt.Errorf("unexpected inittrace line %q", sc.Text())
		}
		ms += c
		bytes += b
		n++
	}
	return ms, bytes, n, sc.Err()
}

// peakRSS runs bin args runs times and returns the highest ru_maxrss, in
// KiB, and the mean wall time.
func peakRSS(ctx context.Context, bin string, runs int, args ...string) (int64, time.Duration, error) {
	var peak int64
	start := time.Now()
	for range runs {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = harness.BaseEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("%s %v: %v\n%s", bin, args, err, out)
		}
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			return 0, 0, errors.New("no rusage on this platform")
		}
		peak = max(peak, ru.Maxrss)
	}
	return peak, time.Since(start) / time.Duration(runs), nil
}

// agentRunRSS runs chalupa-agent run against a chalupad serve for d,
// sampling its VmRSS every sampleEvery, and returns the last sample and
// the extrapolated RSS after an hour (KiB).
func agentRunRSS(ctx context.Context, bins map[string]string, dir string, d time.Duration) (last, hour int64, err error) {
	srv, err := harness.StartChalupa(ctx, bins["chalupad"], dir, harness.StartOptions{DefaultQuotas: true})
	if err != nil {
		return 0, 0, err
	}
	defer srv.Stop(harness.ChalupaStopGrace)
	if _, _, err := srv.IssueKey(ctx, "footprint"); err != nil { // creates the environment
		return 0, 0, err
	}
	k, err := srv.Admin.IssueIngestKey(ctx, "footprint")
	if err != nil {
		return 0, 0, err
	}
	keyDir := filepath.Join(dir, "agent-keys")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return 0, 0, err
	}
	if err := os.WriteFile(filepath.Join(keyDir, "ingest.key"), []byte(k.KeyMaterial+"\n"), 0o600); err != nil {
		return 0, 0, err
	}
	if err := os.WriteFile(filepath.Join(keyDir, "key-id"), []byte(k.KeyID+"\n"), 0o600); err != nil {
		return 0, 0, err
	}
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return 0, 0, err
	}
	defer logf.Close()
	cmd := exec.Command(bins["chalupa-agent"], "run", "--nvidia-smi", "none")
	cmd.Env = append(harness.BaseEnv(),
		"CHALUPA_AGENT_URL="+srv.URL, "CHALUPA_AGENT_ENV=footprint",
		"CHALUPA_AGENT_KEY_FILE="+filepath.Join(keyDir, "ingest.key"),
		"CHALUPA_AGENT_DEPLOYMENT=footprint-1", "CHALUPA_AGENT_DROPLET_ID=1", "CHALUPA_AGENT_REGION=nyc3",
		"CHALUPA_AGENT_STATE_DIR="+filepath.Join(dir, "agent-state"), "CHALUPA_AGENT_DISK_PATH="+dir,
		"CHALUPA_AGENT_RUN_ROOT="+filepath.Join(dir, "run"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	type sample struct {
		at  time.Duration
		kib int64
	}
	var samples []sample
	start := time.Now()
	fmt.Printf("chalupa-agent run for %s against %s (RSS every %s):\n", d, srv.URL, sampleEvery)
	for {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case err := <-exited:
			return 0, 0, fmt.Errorf("chalupa-agent run exited: %v (log: %s)", err, logf.Name())
		case <-time.After(time.Until(start.Add(time.Duration(len(samples)+1) * sampleEvery))):
		}
		kib, err := harness.ReadStatusField(cmd.Process.Pid, "VmRSS")
		if err != nil {
			return 0, 0, err
		}
		s := sample{time.Since(start).Round(time.Second), kib}
		samples = append(samples, s)
		fmt.Printf("  %8s  RSS %6.1f MiB\n", s.at, float64(kib)/1024)
		if s.at >= d {
			break
		}
	}
	if text, err := srv.MetricsText(ctx); err == nil {
		var accepted []string
		for line := range strings.Lines(text) {
			if strings.HasPrefix(line, "chalupa_ingest_results_total{") && strings.Contains(line, `result="accepted"`) {
				accepted = append(accepted, strings.TrimSpace(strings.TrimPrefix(line, "chalupa_ingest_results_total")))
			}
		}
		sort.Strings(accepted)
		fmt.Printf("  the daemon accepted (chalupa_ingest_results_total): %s\n", strings.Join(accepted, "; "))
	}
	last = samples[len(samples)-1].kib
	peak := int64(0)
	for _, s := range samples {
		peak = max(peak, s.kib)
	}
	// The least-squares slope over the second half (the first holds the
	// start-up), carried on from the last sample to the hour: a sawtooth
	// of collections and scavenging averages out, a leak does not.
	half := samples[len(samples)/2:]
	var sx, sy, sxx, sxy float64
	for _, s := range half {
		x, y := s.at.Minutes(), float64(s.kib)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	hour = last
	if n := float64(len(half)); n >= 2 && n*sxx-sx*sx > 0 {
		slope := (n*sxy - sx*sy) / (n*sxx - sx*sx) // KiB a minute
		fmt.Printf("  growth over the second half: %.1f KiB a minute\n", slope)
		if slope > 0 {
			hour = last + int64(slope*(time.Hour-samples[len(samples)-1].at).Minutes())
		}
	}
	return last, max(hour, peak), nil
}
