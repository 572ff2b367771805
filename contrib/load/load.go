package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chalupa-run/chalupa/ingest/signer"
)

// heartbeatPath is the signed route under load.
const heartbeatPath = "/api/ingest/heartbeat"

// workload sends signed heartbeats to one target, spread round-robin over a
// fleet of deployment ids, each with a fresh nonce and the current time.
type workload struct {
	url         string // base URL + heartbeatPath
	keyID       string
	key         []byte
	env         string
	deployments int
	client      *http.Client
	seq         atomic.Uint64
}

func newWorkload(base, keyID string, key []byte, env string, deployments, conns int, timeout time.Duration) (*workload, error) {
	if err := checkLoopback(base); err != nil {
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
	return &workload{
		url: base + heartbeatPath, keyID: keyID, key: key, env: env, deployments: deployments,
		client: &http.Client{Transport: tr, Timeout: timeout},
	}, nil
}

func (w *workload) close() { w.client.CloseIdleConnections() }

var regions = [...]string{"nyc3", "sfo3", "ams3", "fra1", "sgp1"}

// body appends one HeartbeatV1 (ingest/heartbeat.go) for request n to b. It
// is built by hand rather than with encoding/json so that the client, which
// shares the CPU with the server, spends as little as it can.
func (w *workload) body(b []byte, n uint64, now time.Time) []byte {
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

// send posts one signed heartbeat and returns the status code.
func (w *workload) send(ctx context.Context) (int, error) {
	n := w.seq.Add(1)
	now := time.Now()
	body := w.body(make([]byte, 0, 448), n, now)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	signer.Attach(req.Header, w.keyID, w.key, strconv.FormatInt(now.Unix(), 10), signer.NewNonce(), http.MethodPost, heartbeatPath, body)
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// tally is what one phase observed inside its measurement window.
type tally struct {
	lat       *histogram // from send (closed loop) or from the scheduled time (open loop)
	lag       *histogram // open loop: scheduled time to the moment the request was handed to the client
	ok        int64
	non2xx    int64
	transport int64
	statuses  map[int]int64
	lastDone  time.Time
}

func newTally() *tally {
	return &tally{lat: newHistogram(), lag: newHistogram(), statuses: map[int]int64{}}
}

func (t *tally) add(status int, err error, lat time.Duration, done time.Time) {
	switch {
	case err != nil:
		t.transport++
	case status >= 200 && status < 300:
		t.ok++
	default:
		t.non2xx++
	}
	if err == nil {
		t.statuses[status]++
	}
	t.lat.Record(lat)
	if done.After(t.lastDone) {
		t.lastDone = done
	}
}

func (t *tally) merge(o *tally) {
	t.lat.Merge(o.lat)
	t.lag.Merge(o.lag)
	t.ok += o.ok
	t.non2xx += o.non2xx
	t.transport += o.transport
	for k, v := range o.statuses {
		t.statuses[k] += v
	}
	if o.lastDone.After(t.lastDone) {
		t.lastDone = o.lastDone
	}
}

// window marks the measurement window of a phase for samplers (CPU,
// writer statistics): start is called at its beginning, end at its end.
type window interface {
	start()
	end()
}

// runWindow calls win.start at from and win.end at to (or when ctx ends),
// returning a channel closed once both have run.
func runWindow(ctx context.Context, win window, from, to time.Time) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sleepUntil(ctx, from)
		win.start()
		sleepUntil(ctx, to)
		win.end()
	}()
	return done
}

func sleepUntil(ctx context.Context, t time.Time) {
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

// runMax is the closed-loop phase: workers send back to back for warmup
// (not recorded), then for dur (recorded: requests sent and answered inside
// the window). It stops at the end of the window, or after maxRequests
// sends, or when ctx ends, whichever is first, and returns what it saw and
// the length of the window it actually measured.
func runMax(ctx context.Context, w *workload, win window, workers int, warmup, dur time.Duration, maxRequests int64) (*tally, time.Duration) {
	begin := time.Now()
	from := begin.Add(warmup)
	to := from.Add(dur)
	wctx, stopWindow := context.WithCancel(ctx)
	defer stopWindow()
	sampled := runWindow(wctx, win, from, to)
	var issued atomic.Int64
	tallies := make([]*tally, workers)
	var wg sync.WaitGroup
	for i := range tallies {
		t := newTally()
		tallies[i] = t
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && issued.Add(1) <= maxRequests {
				t0 := time.Now()
				if !t0.Before(to) {
					return
				}
				status, err := w.send(ctx)
				t1 := time.Now()
				if t0.Before(from) || t1.After(to) || (err != nil && ctx.Err() != nil) {
					continue // outside the window, or cut short by an interrupt
				}
				t.add(status, err, t1.Sub(t0), t1)
			}
		}()
	}
	wg.Wait()
	// Stopped early (the request bound, or ctx): close the window now.
	stopped := time.Now()
	stopWindow()
	<-sampled
	all := newTally()
	for _, t := range tallies {
		all.merge(t)
	}
	if stopped.Before(to) {
		to = stopped
	}
	return all, max(to.Sub(from), time.Millisecond)
}

// runSteady is the open-loop phase: requests are scheduled at a constant
// rate for warmup+dur, each sent at its scheduled time whatever the
// previous ones are doing (at most maxInflight at once), and its latency is
// measured from the scheduled time, so a stalled server is charged for
// every request it delays (no coordinated omission). Only requests
// scheduled inside the dur window are recorded. It returns the tally and
// the scheduled count in the window.
func runSteady(ctx context.Context, w *workload, win window, rate float64, warmup, dur time.Duration, maxInflight int) (*tally, int64) {
	total := int64(rate * (warmup + dur).Seconds())
	interval := float64(time.Second) / rate
	begin := time.Now().Add(10 * time.Millisecond)
	from := begin.Add(warmup)
	to := from.Add(dur)
	sampled := runWindow(ctx, win, from, to)
	t := newTally()
	var mu sync.Mutex
	var scheduled int64
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
loop:
	for i := int64(0); i < total; i++ {
		at := begin.Add(time.Duration(float64(i) * interval))
		sleepUntil(ctx, at)
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
			status, err := w.send(ctx)
			done := time.Now()
			if !measured || (err != nil && ctx.Err() != nil) {
				return
			}
			mu.Lock()
			t.add(status, err, done.Sub(at), done)
			t.lag.Record(lag)
			mu.Unlock()
		}()
	}
	wg.Wait()
	<-sampled
	return t, scheduled
}
