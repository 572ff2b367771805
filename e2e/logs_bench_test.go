package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// BenchmarkLogsPlanCommitOneCore: the figure "plan/commit p99 on one core"
// of docs/operations.md, "Logs". The built daemon, with its log broker on
// versitygw, runs pinned to CPU 0 (`taskset -a -p -c 0`, every thread, and
// GOMAXPROCS=1, as the Go runtime would size it under taskset); 8 workers,
// each an agent of its own deployments, ship 16 deployments' whole quota
// (256 chunks each, 4,096 chunks of 1 KiB) as the agent does: plan, PUT to
// the store with the grant, commit. Reported: the latency of the plan and
// of the commit requests (p50, p99, max; milliseconds, the signed request
// from send to answer) and chunks per second. Run the client off CPU 0:
//
//	taskset -c 1 go test -run '^$' -bench BenchmarkLogsPlanCommitOneCore -benchtime 1x .
//
// (versitygw shares CPU 1 with the client). Without taskset it is skipped.
func BenchmarkLogsPlanCommitOneCore(b *testing.B) {
	const deployments, workers, chunkBytes = 16, 8, 1024
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		b.Skip("taskset (util-linux) is not installed")
	}
	bin := proctest.BuildBinary(b)
	gw := proctest.StartVersityGW(b)
	env := e2eLogsEnv(gw, gw.Endpoint)
	maps.Copy(env, map[string]string{"GOMAXPROCS": "1",
		"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE": "0", "CHALUPA_QUOTA_HEARTBEAT_BURST": "0", "CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS": "0",
		"CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE": "0",
		"CHALUPA_QUOTA_LOG_BURST":                         "0", "CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE": "0",
	})
	d := proctest.Start(b, bin, proctest.Options{Env: env})
	if out, err := exec.Command(taskset, "-a", "-p", "-c", "0", strconv.Itoa(d.Pid)).CombinedOutput(); err != nil {
		b.Fatalf("taskset: %v\n%s", err, out)
	}
	ctx := context.Background()
	k := daemontest.EnvironmentKey(b, d.Admin(), "bench-plan")
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers * 2}, Timeout: 30 * time.Second}
	cl := &protocol.Client{BaseURL: d.URL, KeyID: k.KeyID, Key: raw, HTTP: hc}
	post := func(path string, v any) (int, []byte, time.Duration) {
		body, _ := json.Marshal(v)
		t0 := time.Now()
		resp, err := cl.Post(ctx, path, body)
		took := time.Since(t0)
		if err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		return resp.Status, resp.Body, took
	}
	now := time.Now().UTC()
	for i := range deployments {
		hb := protocol.HeartbeatV1{EnvironmentSlug: "bench-plan", Deployment: protocol.HeartbeatDeploy{ID: fmt.Sprintf("dep-%02d", i)},
			AgentVersion: "bench/1", SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 30, LastActivityAt: now}}
		if code, body, _ := post("/api/ingest/heartbeat", hb); code != http.StatusAccepted {
			b.Fatalf("heartbeat: %d %s", code, body)
		}
	}

	var (
		mu             sync.Mutex
		plans, commits []time.Duration
		wg             sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var myPlans, myCommits []time.Duration
			for dep := w; dep < deployments; dep += workers {
				depID, session := fmt.Sprintf("dep-%02d", dep), fmt.Sprintf("s-%02d", dep)
				if code, body, _ := post("/api/ingest/logs/sessions", protocol.OpenV1{EnvironmentSlug: "bench-plan", DeploymentID: depID,
					SessionID: session, Service: "cloud-init.service"}); code != http.StatusAccepted {
					b.Errorf("open: %d %s", code, body)
					return
				}
				for seq := range int64(logs.DefaultDeploymentChunks) {
					chunk := make([]byte, chunkBytes)
					rand.Read(chunk)
					sum := sha256.Sum256(chunk)
					c := protocol.ChunkV1{EnvironmentSlug: "bench-plan", DeploymentID: depID, SessionID: session, Seq: seq, Size: chunkBytes, SHA256: hex.EncodeToString(sum[:])}
					code, body, took := post("/api/ingest/logs/plan", c)
					var p protocol.LogChunkPlanned
					if code != http.StatusAccepted || json.Unmarshal(body, &p) != nil || p.Upload == nil {
						b.Errorf("plan: %d %s", code, body)
						return
					}
					myPlans = append(myPlans, took)
					req, _ := http.NewRequest(p.Upload.Method, p.Upload.URL, bytes.NewReader(chunk))
					for h, v := range p.Upload.Headers {
						req.Header.Set(h, v)
					}
					resp, err := hc.Do(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Errorf("PUT: %v %v", resp, err)
						return
					}
					resp.Body.Close()
					code, body, took = post("/api/ingest/logs/commit", c)
					if code != http.StatusAccepted {
						b.Errorf("commit: %d %s", code, body)
						return
					}
					myCommits = append(myCommits, took)
				}
			}
			mu.Lock()
			plans, commits = append(plans, myPlans...), append(commits, myCommits...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if b.Failed() {
		return
	}
	q := func(ds []time.Duration, p float64) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))].Microseconds()) / 1000
	}
	// The placement as the kernel holds it, every thread of the daemon.
	if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", d.Pid)); err == nil {
		seen := map[string]int{}
		for _, task := range tasks {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", d.Pid, task.Name()))
			for _, line := range strings.Split(string(st), "\n") {
				if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
					seen[strings.TrimSpace(v)]++
				}
			}
		}
		b.Logf("daemon threads by allowed CPUs: %v", seen)
	}
	b.ReportMetric(float64(len(commits)), "chunks")
	b.ReportMetric(float64(len(commits))/elapsed.Seconds(), "chunks/s")
	b.ReportMetric(q(plans, 0.5), "plan-p50-ms")
	b.ReportMetric(q(plans, 0.99), "plan-p99-ms")
	b.ReportMetric(q(plans, 1), "plan-max-ms")
	b.ReportMetric(q(commits, 0.5), "commit-p50-ms")
	b.ReportMetric(q(commits, 0.99), "commit-p99-ms")
	b.ReportMetric(q(commits, 1), "commit-max-ms")
}
