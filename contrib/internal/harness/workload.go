package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chalupa-run/chalupa/protocol"
)

// HeartbeatPath is the signed route under load.
const HeartbeatPath = "/api/ingest/heartbeat"

// TelemetryPath is the signed route of telemetry windows (MixTelemetry).
const TelemetryPath = "/api/ingest/telemetry"

// TelemetryWindowsPerDeployment is how many minute windows one deployment
// can be sent in one run: its session's windows start TelemetryWindowsPerDeployment
// minutes before the workload was created and advance one minute per
// window, so each stays inside the 2-hour admission limit (with 20
// minutes to spare for the run itself) and no window is in the future.
const TelemetryWindowsPerDeployment = 100

// Workload sends signed heartbeats to one target, spread round-robin over a
// fleet of deployment ids, each with a fresh nonce and the current time.
type Workload struct {
	url         string // base URL + heartbeatPath
	keyID       string
	key         []byte
	env         string
	deployments int
	client      *http.Client
	seq         atomic.Uint64

	// Telemetry mixing (MixTelemetry): ratio is the share of Send's
	// requests that are windows (bits of a float64, 0: none); mixSeq
	// numbers the requests Send decides on, telSeq the windows sent.
	ratio    atomic.Uint64
	mixSeq   atomic.Uint64
	telSeq   atomic.Uint64
	telURL   string
	telStart time.Time // windowStart of each deployment's first window
	telSent  atomic.Uint64
}

// NewWorkload returns a Workload posting to base (which must be
// http://127.0.0.1:PORT) with key keyID, over at most conns kept-alive
// connections, each request bounded by timeout.
func NewWorkload(base, keyID string, key []byte, env string, deployments, conns int, timeout time.Duration) (*Workload, error) {
	if err := CheckLoopback(base); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               nil, // loopback only: never through a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &Workload{
		url: base + HeartbeatPath, keyID: keyID, key: key, env: env, deployments: deployments,
		client:   &http.Client{Transport: tr, Timeout: timeout},
		telURL:   base + TelemetryPath,
		telStart: time.Now().UTC().Truncate(time.Minute).Add(-TelemetryWindowsPerDeployment * time.Minute),
	}, nil
}

// MixTelemetry makes ratio (0–1) of the following Send calls post a signed
// telemetry window instead of a heartbeat (0: heartbeats only). Windows go
// round-robin over the deployments, one session per deployment
// ("load-sess-N"), each deployment's windows one minute apart from
// TelemetryWindowsPerDeployment minutes before NewWorkload, so every window
// is minute-aligned, within 2 hours and new (docs/operations.md,
// "Telemetry"). Each deployment must have had a heartbeat first (Prime).
// Beyond TelemetryWindowsPerDeployment windows per deployment the windows
// would reach the future; TelemetryCapacity says how many may be sent.
func (w *Workload) MixTelemetry(ratio float64) { w.ratio.Store(math.Float64bits(ratio)) }

// TelemetryCapacity is how many telemetry windows one workload may send:
// TelemetryWindowsPerDeployment per deployment.
func (w *Workload) TelemetryCapacity() int64 {
	return int64(w.deployments) * TelemetryWindowsPerDeployment
}

// TelemetrySent is how many telemetry windows Send has started.
func (w *Workload) TelemetrySent() uint64 { return w.telSent.Load() }

// Prime sends one heartbeat to every deployment (up to 16 at once), so
// that telemetry windows find their deployments. Errors: the first
// request that failed or was not answered 2xx.
func (w *Workload) Prime(ctx context.Context) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, w.deployments)
	var wg sync.WaitGroup
	for d := range w.deployments {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			status, err := w.sendHeartbeat(ctx, uint64(d))
			if err == nil && (status < 200 || status > 299) {
				err = fmt.Errorf("prime heartbeat for deployment %d: HTTP %d", d, status)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// telemetryMetrics is every metric of a GPU droplet's window, 12 samples
// each, valid per docs/operations.md ("Telemetry"): min ≤ last ≤ max and
// sum within [n×min, n×max].
const telemetryMetrics = `"cpuPct":{"n":12,"sum":540.5,"min":20,"max":80.5,"last":41},` +
	`"memUsedBytes":{"n":12,"sum":24000000000,"min":1900000000,"max":2100000000,"last":2000000000},` +
	`"memTotalBytes":{"n":12,"sum":48000000000,"min":4000000000,"max":4000000000,"last":4000000000},` +
	`"diskUsedBytes":{"n":12,"sum":120000000000,"min":10000000000,"max":10000000000,"last":10000000000},` +
	`"diskTotalBytes":{"n":12,"sum":960000000000,"min":80000000000,"max":80000000000,"last":80000000000},` +
	`"load1":{"n":12,"sum":9.6,"min":0.5,"max":1.1,"last":0.8},` +
	`"netRxBytes":{"n":12,"sum":1200000,"min":50000,"max":150000,"last":100000},` +
	`"netTxBytes":{"n":12,"sum":600000,"min":20000,"max":80000,"last":50000},` +
	`"gpuUtilPct":{"n":12,"sum":720,"min":40,"max":80,"last":60},` +
	`"gpuMemUsedBytes":{"n":12,"sum":96000000000,"min":8000000000,"max":8000000000,"last":8000000000},` +
	`"gpuMemTotalBytes":{"n":12,"sum":192000000000,"min":16000000000,"max":16000000000,"last":16000000000},` +
	`"gpuTempC":{"n":12,"sum":780,"min":60,"max":70,"last":65},` +
	`"gpuPowerW":{"n":12,"sum":3000,"min":200,"max":300,"last":250}`

// TelemetryBody appends window k (0-based, in the order sent) to b: the
// deployment k mod deployments, its session, its (k div deployments)-th
// minute from the workload's start.
func (w *Workload) TelemetryBody(b []byte, k uint64) []byte {
	dep := k % uint64(w.deployments)
	start := w.telStart.Add(time.Duration(k/uint64(w.deployments)) * time.Minute)
	b = append(b, `{"environmentSlug":"`...)
	b = append(b, w.env...)
	b = append(b, `","deploymentId":"load-dep-`...)
	b = strconv.AppendUint(b, dep, 10)
	b = append(b, `","sessionId":"load-sess-`...)
	b = strconv.AppendUint(b, dep, 10)
	b = append(b, `","windowStart":"`...)
	b = start.AppendFormat(b, time.RFC3339)
	b = append(b, `","windowSeconds":60,"final":false,"metrics":{`...)
	b = append(b, telemetryMetrics...)
	b = append(b, `}}`...)
	return b
}

// Close closes the idle connections.
func (w *Workload) Close() { w.client.CloseIdleConnections() }

// Sent is how many requests Send has started.
func (w *Workload) Sent() uint64 { return w.seq.Load() }

var regions = [...]string{"nyc3", "sfo3", "ams3", "fra1", "sgp1"}

// Body appends one HeartbeatV1 (ingest/heartbeat.go) for request n to b. It
// is built by hand rather than with encoding/json so that the client, which
// shares the CPU with the server, spends as little as it can.
func (w *Workload) Body(b []byte, n uint64, now time.Time) []byte {
	dep := n % uint64(w.deployments)
	b = append(b, `{"environmentSlug":"`...)
	b = append(b, w.env...)
	b = append(b, `","deployment":{"id":"load-dep-`...)
	b = strconv.AppendUint(b, dep, 10)
	b = append(b, `","dropletId":`...)
	b = strconv.AppendUint(b, 400000000+dep, 10)
	b = append(b, `,"region":"`...)
	b = append(b, regions[dep%uint64(len(regions))]...)
	b = append(b, `","size":"s-2vcpu-4gb"},"agentVersion":"load/1","sentAt":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","reaper":{"idleChecks":`...)
	b = strconv.AppendUint(b, n/uint64(w.deployments), 10)
	b = append(b, `,"limitMinutes":30,"lastActivityAt":"`...)
	b = now.Add(-2*time.Minute).UTC().AppendFormat(b, time.RFC3339)
	b = append(b, `","ciActive":`...)
	b = strconv.AppendBool(b, dep%7 == 0)
	b = append(b, `}}`...)
	return b
}

// Send posts one signed heartbeat, or while MixTelemetry's ratio is set
// that share of telemetry windows, and returns the status code.
func (w *Workload) Send(ctx context.Context) (int, error) {
	if r := math.Float64frombits(w.ratio.Load()); r > 0 {
		// Request m is a window when it crosses the next multiple of 1/r:
		// exactly ratio r of the requests, evenly spread.
		m := w.mixSeq.Add(1)
		if math.Floor(float64(m)*r) > math.Floor(float64(m-1)*r) {
			k := w.telSeq.Add(1) - 1
			w.telSent.Add(1)
			return w.post(ctx, w.telURL, TelemetryPath, w.TelemetryBody(make([]byte, 0, 1536), k), time.Now())
		}
	}
	return w.sendHeartbeat(ctx, w.seq.Add(1))
}

// sendHeartbeat posts heartbeat n (Body).
func (w *Workload) sendHeartbeat(ctx context.Context, n uint64) (int, error) {
	now := time.Now()
	return w.post(ctx, w.url, HeartbeatPath, w.Body(make([]byte, 0, 448), n, now), now)
}

// post signs body for path at now and posts it to url.
func (w *Workload) post(ctx context.Context, url, path string, body []byte, now time.Time) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	protocol.Attach(req.Header, w.keyID, w.key, strconv.FormatInt(now.Unix(), 10), protocol.NewNonce(), http.MethodPost, path, body)
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Tally is what one phase observed inside its measurement window.
type Tally struct {
	// Lat is the latency: from send (closed loop) or from the scheduled
	// time (open loop) to the answer.
	Lat *Histogram
	// Lag (open loop only) is the scheduled time to the moment the request
	// was handed to the HTTP client: large means the client, not the
	// server, was late.
	Lag *Histogram
	// OK, Non2xx and Transport count 2xx answers, other answers, and
	// requests with no answer (timeout, connection error).
	OK, Non2xx, Transport int64
	// Statuses counts answers by HTTP status.
	Statuses map[int]int64
	// LastDone is when the last recorded request finished.
	LastDone time.Time
}

// NewTally returns an empty Tally.
func NewTally() *Tally {
	return &Tally{Lat: NewHistogram(), Lag: NewHistogram(), Statuses: map[int]int64{}}
}

// Add records one request: its status (or transport error), its latency and
// when it finished.
func (t *Tally) Add(status int, err error, lat time.Duration, done time.Time) {
	switch {
	case err != nil:
		t.Transport++
	case status >= 200 && status < 300:
		t.OK++
	default:
		t.Non2xx++
	}
	if err == nil {
		t.Statuses[status]++
	}
	t.Lat.Record(lat)
	if done.After(t.LastDone) {
		t.LastDone = done
	}
}

// Merge adds everything o recorded.
func (t *Tally) Merge(o *Tally) {
	t.Lat.Merge(o.Lat)
	t.Lag.Merge(o.Lag)
	t.OK += o.OK
	t.Non2xx += o.Non2xx
	t.Transport += o.Transport
	for k, v := range o.Statuses {
		t.Statuses[k] += v
	}
	if o.LastDone.After(t.LastDone) {
		t.LastDone = o.LastDone
	}
}

// Window marks the measurement window of a phase for samplers (CPU,
// writer statistics): Start is called at its beginning, End at its end.
type Window interface {
	Start()
	End()
}

// runWindow calls win.Start at from and win.End at to (or when ctx ends),
// returning a channel closed once both have run.
func runWindow(ctx context.Context, win Window, from, to time.Time) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		SleepUntil(ctx, from)
		win.Start()
		SleepUntil(ctx, to)
		win.End()
	}()
	return done
}

// SleepUntil returns at t, or when ctx ends if that is earlier.
func SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// RunMax is the closed-loop phase: workers send back to back for warmup
// (not recorded), then for dur (recorded: requests sent and answered inside
// the window). It stops at the end of the window, or after maxRequests
// sends, or when ctx ends, whichever is first, and returns what it saw and
// the length of the window it actually measured.
func RunMax(ctx context.Context, w *Workload, win Window, workers int, warmup, dur time.Duration, maxRequests int64) (*Tally, time.Duration) {
	begin := time.Now()
	from := begin.Add(warmup)
	to := from.Add(dur)
	wctx, stopWindow := context.WithCancel(ctx)
	defer stopWindow()
	sampled := runWindow(wctx, win, from, to)
	var issued atomic.Int64
	tallies := make([]*Tally, workers)
	var wg sync.WaitGroup
	for i := range tallies {
		t := NewTally()
		tallies[i] = t
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && issued.Add(1) <= maxRequests {
				t0 := time.Now()
				if !t0.Before(to) {
					return
				}
				status, err := w.Send(ctx)
				t1 := time.Now()
				if t0.Before(from) || t1.After(to) || (err != nil && ctx.Err() != nil) {
					continue // outside the window, or cut short by an interrupt
				}
				t.Add(status, err, t1.Sub(t0), t1)
			}
		}()
	}
	wg.Wait()
	// Stopped early (the request bound, or ctx): close the window now.
	stopped := time.Now()
	stopWindow()
	<-sampled
	all := NewTally()
	for _, t := range tallies {
		all.Merge(t)
	}
	if stopped.Before(to) {
		to = stopped
	}
	return all, max(to.Sub(from), time.Millisecond)
}

// RunSteady is the open-loop phase: requests are scheduled at a constant
// rate for warmup+dur, each sent at its scheduled time whatever the
// previous ones are doing (at most maxInflight at once), and its latency is
// measured from the scheduled time, so a stalled server is charged for
// every request it delays (no coordinated omission). Only requests
// scheduled inside the dur window are recorded. It returns the tally and
// the scheduled count in the window.
func RunSteady(ctx context.Context, w *Workload, win Window, rate float64, warmup, dur time.Duration, maxInflight int) (*Tally, int64) {
	total := int64(rate * (warmup + dur).Seconds())
	interval := float64(time.Second) / rate
	begin := time.Now().Add(10 * time.Millisecond)
	from := begin.Add(warmup)
	to := from.Add(dur)
	sampled := runWindow(ctx, win, from, to)
	t := NewTally()
	var mu sync.Mutex
	var scheduled int64
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
loop:
	for i := int64(0); i < total; i++ {
		at := begin.Add(time.Duration(float64(i) * interval))
		SleepUntil(ctx, at)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		measured := !at.Before(from)
		if measured {
			scheduled++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			lag := time.Since(at)
			status, err := w.Send(ctx)
			done := time.Now()
			if !measured || (err != nil && ctx.Err() != nil) {
				return
			}
			mu.Lock()
			t.Add(status, err, done.Sub(at), done)
			t.Lag.Record(lag)
			mu.Unlock()
		}()
	}
	wg.Wait()
	<-sampled
	return t, scheduled
}
