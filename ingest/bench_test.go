//go:build linux

package ingest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// BenchmarkHeartbeat drives the real POST /api/ingest/heartbeat handler
// (router, wrap, verification, decoding, the writer unit, the COMMIT with
// synchronous=FULL, Litestream replicating to a file:// replica) over a
// real database, in process: no network, no client on the same CPU. Every
// request is signed with a fresh nonce before the timer starts.
//
//	go test -run XXX -bench Heartbeat -benchmem -cpu 1,2 ./ingest
//
// Besides ns/op (wall time per heartbeat) it reports cpu-µs/op (user+system
// CPU of the whole process per heartbeat, Litestream and GC included) and
// batch (units per writer commit). "serial" sends one request at a time
// (every commit holds one unit); "64-in-flight" keeps 64 requests in
// flight, as 64 agents would; "1000-per-s" sends at a steady 1,000
// requests per second whatever the answers do (an open loop, so b.N/1000
// seconds long) and also reports the latency percentiles p50-ms and p99-ms.
// write-B/op is the bytes the process handed to write(2)/pwrite(2) per
// heartbeat (/proc/self/io wchar: WAL frames, Litestream's LTX files and
// the file:// replica's copies; no sockets are involved in process): with
// "serial" (one unit per COMMIT) it does not depend on timing.
func BenchmarkHeartbeat(b *testing.B) {
	for _, bc := range []struct {
		name     string
		inFlight int
		rate     float64 // requests per second; 0: closed loop of inFlight
	}{{"serial", 1, 0}, {"64-in-flight", 64, 0}, {"1000-per-s", 0, 1000}} {
		b.Run(bc.name, func(b *testing.B) {
			// Quotas off: a benchmark measures heartbeats, never 429s.
			h := daemontest.NewIngest(b, daemontest.IngestOptions{NoLeakCheck: true, Env: daemontest.UnlimitedQuotas()})
			h.CreateEnv("bench-env")
			k := h.Issue("bench-env")
			reqs := make([]*http.Request, b.N)
			ts := strconv.FormatInt(h.Clock.Now().Unix(), 10)
			for i := range reqs {
				body := h.Heartbeat(daemontest.HeartbeatOpts{Env: "bench-env", Deployment: "dep-" + strconv.Itoa(i%500), IdleChecks: int64(i), Region: "nyc3", Size: "s-2vcpu-4gb", DropletID: 400000000 + int64(i%500)})
				req, err := http.NewRequest("POST", ingest.HeartbeatRoute, bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				protocol.Attach(req.Header, k.ID, k.Raw, ts, protocol.NewNonce(), "POST", ingest.HeartbeatRoute, body)
				reqs[i] = req
			}
			handler := h.App.Server.Handler()
			w := h.App.DB.Writer
			var next atomic.Int64
			var failed, lastCode atomic.Int64
			serve := func() {
				i := next.Add(1) - 1
				var rw daemontest.DiscardWriter
				handler.ServeHTTP(&rw, reqs[i])
				if rw.Code != http.StatusAccepted {
					failed.Add(1)
					lastCode.Store(int64(rw.Code))
				}
			}
			runtime.GC()
			c0, u0 := w.Stats()
			cpu0 := cpuTime()
			wchar0 := writtenBytes(b)
			var lat []time.Duration
			b.ResetTimer()
			switch {
			case bc.rate > 0:
				lat = make([]time.Duration, b.N)
				var wg sync.WaitGroup
				start := time.Now()
				for i := range b.N {
					at := start.Add(time.Duration(float64(i) / bc.rate * float64(time.Second)))
					time.Sleep(time.Until(at))
					wg.Add(1)
					go func() {
						defer wg.Done()
						serve()
						lat[i] = time.Since(at)
					}()
				}
				wg.Wait()
			case bc.inFlight == 1:
				for range b.N {
					serve()
				}
			default:
				b.SetParallelism(max(1, bc.inFlight/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						serve()
					}
				})
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			wchar := writtenBytes(b) - wchar0
			c1, u1 := w.Stats()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d heartbeats were not accepted (the last refused: HTTP %d)", n, b.N, lastCode.Load())
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(wchar)/float64(b.N), "write-B/op")
			if c1 > c0 {
				b.ReportMetric(float64(u1-u0)/float64(c1-c0), "batch")
			}
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			}
		})
	}
}

// writtenBytes is /proc/self/io's wchar: bytes this process passed to
// write-family system calls so far.
func writtenBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no wchar in /proc/self/io")
	return 0
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
