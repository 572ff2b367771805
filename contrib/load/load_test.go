package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/signer"
)

func TestHistogramQuantilesWithinOnePercent(t *testing.T) {
	h := newHistogram()
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

// startTestReference serves the reference handler on loopback over a real
// SQLite file.
func startTestReference(t *testing.T) (*httptest.Server, *refServer, []byte, string) {
	t.Helper()
	material := signer.NewKeyMaterial()
	key, err := signer.DecodeKeyMaterial(material)
	if err != nil {
		t.Fatal(err)
	}
	db, err := openReference(context.Background(), filepath.Join(t.TempDir(), "ref.db"), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rs := &refServer{db: db, keyID: "env_load-test_0123456789abcdef", key: key, envSlug: "load-test", now: time.Now}
	ts := httptest.NewServer(rs)
	t.Cleanup(ts.Close)
	return ts, rs, key, rs.keyID
}

func TestReferenceServerVerifiesAndWritesOnce(t *testing.T) {
	ts, rs, key, keyID := startTestReference(t)
	w, err := newWorkload(ts.URL, keyID, key, "load-test", 10, 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()

	now := time.Now()
	body := w.body(nil, 3, now)
	nonce := signer.NewNonce()
	post := func(body []byte, sign func(h http.Header)) int {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+heartbeatPath, bytes.NewReader(body))
		sign(req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := func(h http.Header) {
		signer.Attach(h, keyID, key, strconv.FormatInt(now.Unix(), 10), nonce, http.MethodPost, heartbeatPath, body)
	}
	if got := post(body, good); got != http.StatusAccepted {
		t.Fatalf("signed heartbeat: %d, want 202", got)
	}
	if got := post(body, good); got != http.StatusConflict {
		t.Errorf("replayed nonce: %d, want 409", got)
	}
	if got := post(body, func(h http.Header) {
		signer.Attach(h, keyID, []byte("another key of thirty-two bytes!"), strconv.FormatInt(now.Unix(), 10), signer.NewNonce(), http.MethodPost, heartbeatPath, body)
	}); got != http.StatusUnauthorized {
		t.Errorf("wrong key: %d, want 401", got)
	}
	if got := post(body, func(h http.Header) {
		signer.Attach(h, keyID, key, strconv.FormatInt(now.Add(-301*time.Second).Unix(), 10), signer.NewNonce(), http.MethodPost, heartbeatPath, body)
	}); got != http.StatusUnauthorized {
		t.Errorf("stale timestamp: %d, want 401", got)
	}
	other := bytes.Replace(body, []byte(`"load-test"`), []byte(`"elsewhere"`), 1)
	if got := post(other, func(h http.Header) {
		signer.Attach(h, keyID, key, strconv.FormatInt(now.Unix(), 10), signer.NewNonce(), http.MethodPost, heartbeatPath, other)
	}); got != http.StatusForbidden {
		t.Errorf("other environment: %d, want 403", got)
	}

	var hb, nonces int
	if err := rs.db.QueryRow(`SELECT (SELECT count(*) FROM heartbeats), (SELECT count(*) FROM nonces)`).Scan(&hb, &nonces); err != nil {
		t.Fatal(err)
	}
	if hb != 1 || nonces != 1 {
		t.Errorf("rows: %d heartbeats, %d nonces; want 1 and 1", hb, nonces)
	}
}

func TestBodyIsAStrictHeartbeatV1(t *testing.T) {
	w := &workload{env: "load-test", deployments: 500}
	for _, n := range []uint64{0, 1, 499, 500, 123457} {
		b := w.body(nil, n, time.Now())
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var hb ingest.HeartbeatV1
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

type nopWindow struct{ started, ended bool }

func (n *nopWindow) start() { n.started = true }
func (n *nopWindow) end()   { n.ended = true }

func TestPhasesAgainstReference(t *testing.T) {
	ts, _, key, keyID := startTestReference(t)
	w, err := newWorkload(ts.URL, keyID, key, "load-test", 50, 16, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ctx := context.Background()

	win := &nopWindow{}
	tl, _ := runMax(ctx, w, win, 4, 100*time.Millisecond, 400*time.Millisecond, 1_000_000)
	if tl.ok == 0 || tl.non2xx+tl.transport != 0 || !win.started || !win.ended {
		t.Fatalf("max: ok %d non2xx %d transport %d statuses %v", tl.ok, tl.non2xx, tl.transport, tl.statuses)
	}

	win = &nopWindow{}
	tl, scheduled := runSteady(ctx, w, win, 200, 100*time.Millisecond, 500*time.Millisecond, 64)
	if scheduled != 100 {
		t.Errorf("steady scheduled %d in the window, want 100", scheduled)
	}
	if tl.ok != scheduled || tl.lat.Count() != uint64(scheduled) || tl.lag.Count() != uint64(scheduled) {
		t.Errorf("steady: ok %d, %d latencies, %d lags; want %d each (statuses %v)", tl.ok, tl.lat.Count(), tl.lag.Count(), scheduled, tl.statuses)
	}
}

func TestMaxRequestsBoundsTheClosedLoop(t *testing.T) {
	ts, _, key, keyID := startTestReference(t)
	w, err := newWorkload(ts.URL, keyID, key, "load-test", 5, 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	start := time.Now()
	_, measured := runMax(context.Background(), w, &nopWindow{}, 4, 0, 10*time.Second, 20)
	if n := w.seq.Load(); n != 20 {
		t.Errorf("sent %d requests, want the bound of 20", n)
	}
	if took := time.Since(start); took > 5*time.Second || measured > 5*time.Second {
		t.Errorf("stopping at the bound took %v (window %v); want it to end at once", took, measured)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "http://[::1]:80", "http://localhost:80"} {
		if checkLoopback(u) == nil {
			t.Errorf("%s accepted", u)
		}
	}
	if err := checkLoopback("http://127.0.0.1:8080"); err != nil {
		t.Error(err)
	}
}

func TestProcCPU(t *testing.T) {
	if procCPUSeconds("self") < 0 {
		t.Skip("no /proc on this system")
	}
	if machineCPUSeconds() <= 0 {
		t.Error("machine CPU not read")
	}
}
