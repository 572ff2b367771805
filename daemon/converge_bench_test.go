//go:build linux

package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// BenchmarkHeartbeatWhileUp measures what a converge costs ingest on the
// same machine: signed heartbeats at a steady rate (an open loop: latency
// from each request's scheduled send time) through the real handler of an
// in-process daemon with the converge executor (the real pulumi CLI under
// nice, the test provider, the DigitalOcean API test server), first for
// a quiet window, then for as long as one box's `up` runs through the job
// queue. Run it the way the control plane's droplet runs, everything on
// one core (the pulumi CLI inherits the affinity):
//
//	taskset -c 0 go test -run '^$' -bench HeartbeatWhileUp -benchtime 1x -cpu 1 ./daemon/
//
// It reports p50/p99 (ms) without and with the up, the up's wall time (s)
// the heartbeats sent in each window and those shed with 503 (the
// in-flight bound of docs/operations.md, "Signed ingest"). b.N is ignored: one pair of
// windows per run.
func BenchmarkHeartbeatWhileUp(b *testing.B) {
	const rate = 1000.0 // heartbeats per second
	const quiet = 20 * time.Second
	api, droplet := newConvergeAPI(b), newFakeDroplet(b)
	env := convergeEnv(b, api, droplet)
	for k, v := range daemontest.UnlimitedQuotas() {
		env[k] = v
	}
	p := daemontest.NewInProcess(b, daemontest.AppOptions{Env: env, StartLoops: true})
	cl, ctx := p.Admin, context.Background()
	authorize(b, cl, droplet)
	newEnv(b, cl, "bench")
	if _, err := cl.CreateBox(ctx, validBox("bench-1", "bench")); err != nil {
		b.Fatal(err)
	}
	key, err := cl.IssueIngestKey(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := protocol.DecodeKeyMaterial(key.KeyMaterial)
	if err != nil {
		b.Fatal(err)
	}
	handler := p.App.Server.Handler()
	var refusedMu sync.Mutex
	refused := map[int]int{} // status -> count of answers other than 202
	// window sends at rate until done reports true and returns the
	// latencies, each from its scheduled send time.
	window := func(done func() bool) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; !done(); i++ {
			at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			time.Sleep(time.Until(at))
			wg.Add(1)
			go func() {
				defer wg.Done()
				dep := i % 500
				now := time.Now().UTC()
				body, _ := json.Marshal(protocol.HeartbeatV1{EnvironmentSlug: "bench",
					Deployment:   protocol.HeartbeatDeploy{ID: "dep-" + strconv.Itoa(dep), DropletID: 500000000 + int64(dep)},
					AgentVersion: "bench/1", SentAt: now,
					Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now.Add(-time.Minute)}})
				req, _ := http.NewRequest(http.MethodPost, "/api/ingest/heartbeat", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				protocol.Attach(req.Header, key.KeyID, raw, strconv.FormatInt(now.Unix(), 10), protocol.NewNonce(), http.MethodPost, "/api/ingest/heartbeat", body)
				var rw daemontest.DiscardWriter
				handler.ServeHTTP(&rw, req)
				d := time.Since(at)
				if rw.Code != http.StatusAccepted {
					refusedMu.Lock()
					refused[rw.Code]++
					refusedMu.Unlock()
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
		slices.Sort(lat)
		return lat
	}
	q := func(lat []time.Duration, f float64) float64 {
		return float64(lat[int(float64(len(lat)-1)*f)].Microseconds()) / 1000
	}

	b.ResetTimer()
	t0 := time.Now()
	without := window(func() bool { return time.Since(t0) >= quiet })

	job, err := cl.RunPulumiConverge(ctx, adminapi.ConvergeRequest{Scope: adminapi.Scope{Kind: "box", ID: "bench-1"}, Action: "up"})
	if err != nil {
		b.Fatal(err)
	}
	// Polled beside the sender (not by waitJob: b.Fatal must not be
	// called off the benchmark's goroutine); the result is read once the
	// poller has stopped.
	var final adminapi.Job
	var pollErr error
	var finished atomic.Bool
	go func() {
		defer finished.Store(true)
		testwait.Until(testwait.Converge, func() (bool, string) {
			final, pollErr = cl.GetJob(ctx, job.ID)
			return pollErr != nil || (final.Status != storage.JobQueued && final.Status != storage.JobRunning), ""
		})
	}()
	t1 := time.Now()
	with := window(finished.Load)
	upWall := time.Since(t1)
	b.StopTimer()
	if pollErr != nil {
		b.Fatal(pollErr)
	}
	if final.Status != storage.JobSucceeded {
		b.Fatalf("up job %s: %s: %s", final.ID, final.Status, final.Error)
	}
	// Load shedding (503 with Retry-After) is an answer, not a failure:
	// say how many, by status; anything else is a defect.
	shed := 0
	for code, n := range refused {
		if code != http.StatusServiceUnavailable {
			b.Fatalf("%d heartbeats answered %d", n, code)
		}
		shed += n
	}
	b.ReportMetric(float64(shed), "shed-503")
	b.ReportMetric(q(without, 0.5), "p50-ms-quiet")
	b.ReportMetric(q(without, 0.99), "p99-ms-quiet")
	b.ReportMetric(q(with, 0.5), "p50-ms-up")
	b.ReportMetric(q(with, 0.99), "p99-ms-up")
	b.ReportMetric(upWall.Seconds(), "up-s")
	b.ReportMetric(float64(len(without)), "sent-quiet")
	b.ReportMetric(float64(len(with)), "sent-up")
}
