// Command diskfill measures what one leaked environment key can make a
// chalupa daemon store: against the real binary with the documented default
// quotas, it drives each signed write route at full speed for a fixed time
// and reports how much the database, its WAL and the file replica grew, and
// every answer it got. The target (docs/operations.md, "Quotas"): at most
// 50 MB of growth in all, and every refusal a 429 (or a 503 disk_low,
// overloaded or storage_unavailable) with Retry-After. See README.md beside
// this file.
//
//	go run ./contrib/diskfill [-duration 60s] [-workers 4] [-limit-mb 50]
//
// It exits 1 when the growth passes the limit or a refusal lacks
// Retry-After, so the figure can be re-run after a change.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
	"github.com/chalupa-run/chalupa/protocol"
)

// Defaults of the figure (docs/operations.md, "Quotas").
const (
	// defaultDuration is how long each route is driven.
	defaultDuration = 60 * time.Second
	// defaultWorkers is the concurrent senders per route: the issue's
	// reproduction used four threads.
	defaultWorkers = 4
	// defaultLimitMB is the target: database + WAL + replica growth over
	// every route, in MB (10^6 bytes).
	defaultLimitMB = 50
	// deployments is how many deployment ids the key uses: the default
	// active-deployment quota, so the routes that need a deployment find
	// one and none is refused for being new.
	deployments = 100
	// artifacts and urlLen shape the largest run a report may carry: 64
	// artifacts (MaxArtifactsPerRun) of 2,000-character URLs.
	artifacts, urlLen = 64, 2000
	// slug is the environment the key belongs to.
	slug = "diskfill"
)

func progress(format string, a ...any) { fmt.Fprintf(os.Stderr, "diskfill: "+format+"\n", a...) }

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "diskfill: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("diskfill", flag.ContinueOnError)
	bin := fs.String("chalupa-bin", "", "use this chalupa binary instead of building tmp/chalupa")
	keep := fs.Bool("keep", false, "keep the temporary directory (database, WAL, replica, log)")
	dur := fs.Duration("duration", defaultDuration, "how long each route is driven")
	workers := fs.Int("workers", defaultWorkers, "concurrent senders per route")
	limitMB := fs.Float64("limit-mb", defaultLimitMB, "the target: growth of database + WAL + replica over all routes, MB")
	var env []string
	fs.Func("env", "add KEY=VALUE to chalupa's environment (repeatable), e.g. a quota to compare", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return errors.New("want KEY=VALUE")
		}
		env = append(env, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dur <= 0 || *workers < 1 || *workers > 64 {
		return errors.New("-duration must be positive and -workers 1-64")
	}
	// Every route, setup and the final stop, bounded.
	ctx, cancel := context.WithTimeout(context.Background(), 6*(*dur)+10*time.Minute)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *bin == "" {
		root, err := harness.FindRepoRoot()
		if err != nil {
			return err
		}
		progress("building %s", filepath.Join(root, "tmp", "chalupa"))
		if *bin, err = harness.BuildChalupa(ctx, root); err != nil {
			return err
		}
	} else if abs, err := filepath.Abs(*bin); err == nil {
		*bin = abs
	}
	dir, err := os.MkdirTemp("", "chalupa-diskfill-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	progress("starting %s serve in %s with the default quotas%s", *bin, dir, strings.Join(append([]string{""}, env...), " "))
	ch, err := harness.StartChalupa(ctx, *bin, dir, harness.StartOptions{Env: env, DefaultQuotas: true})
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = ch.Stop(harness.ChalupaStopGrace)
		}
	}()
	keyID, key, err := ch.IssueKey(ctx, slug)
	if err != nil {
		return err
	}
	d := &driver{url: ch.URL, keyID: keyID, key: key, client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	sz := sizer{db: ch.DBPath(), replica: filepath.Join(ch.DataDir, "replica")}

	start := sz.read()
	// The deployments the other routes write for, one heartbeat each,
	// paced under the environment's heartbeat quota (1,200 a minute).
	setup := newTally()
	for i := range deployments {
		status, code, ra := d.post(ctx, "/api/ingest/heartbeat", d.heartbeat(i))
		setup.add(status, code, ra)
	}
	progress("setup: %d deployments: %s", deployments, setup.summary())

	var phases []phase
	for _, r := range d.routes() {
		before := sz.read()
		progress("%s: %d workers for %s", r.name, *workers, *dur)
		t := d.drive(ctx, r, *workers, *dur)
		after := sz.read()
		phases = append(phases, phase{name: r.name, tally: t, grew: after.minus(before), size: after})
		progress("%s: %s; grew %s", r.name, t.summary(), after.minus(before))
	}
	// A clean stop: the final sync brings the replica up to date, so the
	// total counts every acknowledged write in it.
	if err := ch.Stop(harness.ChalupaStopGrace); err != nil {
		progress("stop: %v", err)
	}
	stopped = true
	end := sz.read()
	return report(os.Stdout, start, end, setup, phases, *dur, *workers, *limitMB)
}

// driver sends signed requests with one key.
type driver struct {
	url, keyID string
	key        []byte
	client     *http.Client
	seq        atomic.Uint64
}

// route is one signed write route and how to make its n-th body.
type route struct {
	name, path string
	body       func(n uint64) []byte
}

func (d *driver) routes() []route {
	return []route{
		{"heartbeat", "/api/ingest/heartbeat", func(n uint64) []byte { return d.heartbeat(int(n % deployments)) }},
		{"telemetry (final:true, a session each)", "/api/ingest/telemetry", d.window},
		{"runs (64 artifacts of 2,000-char URLs)", "/api/ingest/runs", d.run},
		{"lifecycle", "/api/ingest/lifecycle", d.event},
	}
}

func dep(i int) string { return fmt.Sprintf("dep-%03d", i) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (d *driver) heartbeat(i int) []byte {
	now := time.Now().UTC()
	return mustJSON(map[string]any{"environmentSlug": slug, "deployment": map[string]any{"id": dep(i)}, "agentVersion": "diskfill/1",
		"sentAt": now, "reaper": map[string]any{"idleChecks": 0, "limitMinutes": 30, "lastActivityAt": now, "ciActive": false}})
}

// window is a final window of a new session: each request opens and
// closes its own session.
func (d *driver) window(n uint64) []byte {
	agg := map[string]any{"n": 12, "sum": 120.5, "min": 5.25, "max": 15.75, "last": 9.5}
	metrics := map[string]any{}
	for _, m := range []string{"cpuPct", "memUsedBytes", "memTotalBytes", "diskUsedBytes", "diskTotalBytes", "load1", "netRxBytes", "netTxBytes",
		"gpuUtilPct", "gpuMemUsedBytes", "gpuMemTotalBytes", "gpuTempC", "gpuPowerW"} {
		metrics[m] = agg
	}
	return mustJSON(map[string]any{"environmentSlug": slug, "deploymentId": dep(int(n % deployments)), "sessionId": fmt.Sprintf("s-%012d", n),
		"windowStart": time.Now().UTC().Truncate(time.Minute).Add(-time.Minute), "windowSeconds": 60, "final": true, "metrics": metrics})
}

func (d *driver) run(n uint64) []byte {
	now := time.Now().UTC()
	arts := make([]map[string]any, artifacts)
	for i := range arts {
		u := fmt.Sprintf("https://ci.example.com/%d/%d/", n, i)
		u += strings.Repeat("a", urlLen-len(u))
		arts[i] = map[string]any{"v": 1, "name": fmt.Sprintf("artifact-%02d.xml", i), "mediaType": "application/xml", "sizeBytes": 1,
			"sha256": strings.Repeat("0f", 32), "locator": map[string]any{"kind": "https", "url": u}}
	}
	return mustJSON(map[string]any{"environmentSlug": slug, "deploymentId": dep(int(n % deployments)), "runId": fmt.Sprintf("run-%012d", n),
		"suite": "unit/go", "status": "passed", "startedAt": now.Add(-time.Minute), "finishedAt": now, "artifacts": arts})
}

func (d *driver) event(n uint64) []byte {
	return mustJSON(map[string]any{"environmentSlug": slug, "id": fmt.Sprintf("ci-%012d", n), "kind": "ci-started",
		"occurredAt": time.Now().UTC(), "deployment": map[string]any{"id": dep(int(n % deployments))}})
}

// post signs and sends body to path and returns the status, the error
// code (empty on success) and the Retry-After header.
func (d *driver) post(ctx context.Context, path string, body []byte) (int, string, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, "request", ""
	}
	req.Header.Set("Content-Type", "application/json")
	protocol.Attach(req.Header, d.keyID, d.key, strconv.FormatInt(time.Now().Unix(), 10), protocol.NewNonce(), http.MethodPost, path, body)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, "transport", ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if resp.StatusCode/100 != 2 {
		_ = json.Unmarshal(b, &e)
		if e.Error.Code == "" {
			e.Error.Code = "-"
		}
	}
	return resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After")
}

// drive sends r's bodies from workers goroutines, back to back, for dur.
func (d *driver) drive(ctx context.Context, r route, workers int, dur time.Duration) *tally {
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	t := newTally()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				status, code, ra := d.post(ctx, r.path, r.body(d.seq.Add(1)))
				if ctx.Err() != nil && status == 0 {
					return // cut off by the end of the phase
				}
				t.add(status, code, ra)
			}
		}()
	}
	wg.Wait()
	return t
}

// tally counts answers by "status code" and the refusals without a
// Retry-After that the target allows.
type tally struct {
	mu       sync.Mutex
	answers  map[string]int64
	badRetry map[string]int64
}

func newTally() *tally { return &tally{answers: map[string]int64{}, badRetry: map[string]int64{}} }

// add counts one answer. A refusal meets the target when it is 429 or 503
// with a Retry-After (docs/operations.md, "Quotas").
func (t *tally) add(status int, code, retryAfter string) {
	k := strconv.Itoa(status)
	if code != "" {
		k += " " + code
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.answers[k]++
	if status/100 != 2 && ((status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable) || retryAfter == "") {
		t.badRetry[k]++
	}
}

func summary(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return summary(t.answers)
}

// sizes are the bytes of the database file, its WAL and the replica
// directory.
type sizes struct{ db, wal, replica int64 }

func (s sizes) total() int64 { return s.db + s.wal + s.replica }

func (s sizes) minus(o sizes) sizes {
	return sizes{db: s.db - o.db, wal: s.wal - o.wal, replica: s.replica - o.replica}
}

func (s sizes) String() string {
	return fmt.Sprintf("%s (database %s, WAL %s, replica %s)", mb(s.total()), mb(s.db), mb(s.wal), mb(s.replica))
}

func mb(n int64) string { return fmt.Sprintf("%+.1f MB", float64(n)/1e6) }

type sizer struct{ db, replica string }

func fileSize(p string) int64 {
	if fi, err := os.Stat(p); err == nil {
		return fi.Size()
	}
	return 0
}

func (z sizer) read() sizes {
	s := sizes{db: fileSize(z.db), wal: fileSize(z.db + "-wal")}
	_ = filepath.WalkDir(z.replica, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				s.replica += fi.Size()
			}
		}
		return nil
	})
	return s
}

// phase is one route's figures.
type phase struct {
	name       string
	tally      *tally
	grew, size sizes
}

// report prints the figures and returns an error when the target is missed.
func report(w io.Writer, start, end sizes, setup *tally, phases []phase, dur time.Duration, workers int, limitMB float64) error {
	fmt.Fprintf(w, "diskfill: one key, default quotas, %d workers, %s per route, %d deployments\n\n", workers, dur, deployments)
	fmt.Fprintf(w, "setup (a heartbeat per deployment): %s\n", setup.summary())
	var bad []string
	for _, p := range phases {
		fmt.Fprintf(w, "\n%s\n  answers: %s\n  grew:    %s\n", p.name, p.tally.summary(), p.grew)
		p.tally.mu.Lock()
		if len(p.tally.badRetry) > 0 {
			fmt.Fprintf(w, "  refusals without a 429/503 and Retry-After: %s\n", summary(p.tally.badRetry))
			bad = append(bad, p.name)
		}
		p.tally.mu.Unlock()
	}
	grew := end.minus(start)
	fmt.Fprintf(w, "\nin all, after a clean stop (final replica sync): grew %s; now %s\n", grew, end)
	var fails []string
	if float64(grew.total())/1e6 > limitMB {
		fails = append(fails, fmt.Sprintf("growth %s is over the %.0f MB target", mb(grew.total()), limitMB))
	}
	if len(bad) > 0 {
		fails = append(fails, "refusals without Retry-After on "+strings.Join(bad, "; "))
	}
	if len(fails) > 0 {
		fmt.Fprintf(w, "MISSED: %s\n", strings.Join(fails, "; "))
		return errors.New("target missed")
	}
	fmt.Fprintf(w, "MET: at most %.0f MB, every refusal with Retry-After\n", limitMB)
	return nil
}
