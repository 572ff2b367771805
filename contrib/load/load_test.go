package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
	"github.com/chalupa-run/chalupa/protocol"
)

// startTestReference serves the reference handler on loopback over a real
// SQLite file.
func startTestReference(t *testing.T) (*httptest.Server, *refServer, []byte, string) {
	t.Helper()
	material := protocol.NewKeyMaterial()
	key, err := protocol.DecodeKeyMaterial(material)
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
	w, err := harness.NewWorkload(ts.URL, keyID, key, "load-test", 10, 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	now := time.Now()
	body := w.Body(nil, 3, now)
	nonce := protocol.NewNonce()
	post := func(body []byte, sign func(h http.Header)) int {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+harness.HeartbeatPath, bytes.NewReader(body))
		sign(req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := func(h http.Header) {
		protocol.Attach(h, keyID, key, strconv.FormatInt(now.Unix(), 10), nonce, http.MethodPost, harness.HeartbeatPath, body)
	}
	if got := post(body, good); got != http.StatusAccepted {
		t.Fatalf("signed heartbeat: %d, want 202", got)
	}
	if got := post(body, good); got != http.StatusConflict {
		t.Errorf("replayed nonce: %d, want 409", got)
	}
	if got := post(body, func(h http.Header) {
		protocol.Attach(h, keyID, []byte("another key of thirty-two bytes!"), strconv.FormatInt(now.Unix(), 10), protocol.NewNonce(), http.MethodPost, harness.HeartbeatPath, body)
	}); got != http.StatusUnauthorized {
		t.Errorf("wrong key: %d, want 401", got)
	}
	if got := post(body, func(h http.Header) {
		protocol.Attach(h, keyID, key, strconv.FormatInt(now.Add(-301*time.Second).Unix(), 10), protocol.NewNonce(), http.MethodPost, harness.HeartbeatPath, body)
	}); got != http.StatusUnauthorized {
		t.Errorf("stale timestamp: %d, want 401", got)
	}
	other := bytes.Replace(body, []byte(`"load-test"`), []byte(`"elsewhere"`), 1)
	if got := post(other, func(h http.Header) {
		protocol.Attach(h, keyID, key, strconv.FormatInt(now.Unix(), 10), protocol.NewNonce(), http.MethodPost, harness.HeartbeatPath, other)
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

type nopWindow struct{ started, ended bool }

func (n *nopWindow) Start() { n.started = true }
func (n *nopWindow) End()   { n.ended = true }

func TestPhasesAgainstReference(t *testing.T) {
	ts, _, key, keyID := startTestReference(t)
	w, err := harness.NewWorkload(ts.URL, keyID, key, "load-test", 50, 16, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()

	win := &nopWindow{}
	tl, _ := harness.RunMax(ctx, w, win, 4, 100*time.Millisecond, 400*time.Millisecond, 1_000_000)
	if tl.OK == 0 || tl.Non2xx+tl.Transport != 0 || !win.started || !win.ended {
		t.Fatalf("max: ok %d non2xx %d transport %d statuses %v", tl.OK, tl.Non2xx, tl.Transport, tl.Statuses)
	}

	win = &nopWindow{}
	tl, scheduled := harness.RunSteady(ctx, w, win, 200, 100*time.Millisecond, 500*time.Millisecond, 64)
	if scheduled != 100 {
		t.Errorf("steady scheduled %d in the window, want 100", scheduled)
	}
	if tl.OK != scheduled || tl.Lat.Count() != uint64(scheduled) || tl.Lag.Count() != uint64(scheduled) {
		t.Errorf("steady: ok %d, %d latencies, %d lags; want %d each (statuses %v)", tl.OK, tl.Lat.Count(), tl.Lag.Count(), scheduled, tl.Statuses)
	}
}

func TestMaxRequestsBoundsTheClosedLoop(t *testing.T) {
	ts, _, key, keyID := startTestReference(t)
	w, err := harness.NewWorkload(ts.URL, keyID, key, "load-test", 5, 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	_, measured := harness.RunMax(context.Background(), w, &nopWindow{}, 4, 0, 10*time.Second, 20)
	if n := w.Sent(); n != 20 {
		t.Errorf("sent %d requests, want the bound of 20", n)
	}
	if took := time.Since(start); took > 5*time.Second || measured > 5*time.Second {
		t.Errorf("stopping at the bound took %v (window %v); want it to end at once", took, measured)
	}
}

// TestFloorServerAnswers checks the floor handler answers health with 200
// and a heartbeat with 202 after reading its body, whatever the signature.
func TestFloorServerAnswers(t *testing.T) {
	ts := httptest.NewServer(floorServer{})
	defer ts.Close()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/api/health", http.StatusOK},
		{"POST", harness.HeartbeatPath, http.StatusAccepted},
	} {
		t.Run(tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, bytes.NewReader([]byte(`{"v":1}`)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		})
	}
}
