package logship_test

// The shipper against a real daemon assembled in process with its log
// broker on versitygw, behind a proxy with a stable URL (the daemon
// restarts under it) that can drop chosen answers. The shipper's clock is
// fake: FlushInterval passes by Advance, never by waiting.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent/logship"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

const (
	envSlug = "log-ship"
	depID   = "dep-ship"
)

type rig struct {
	t     *testing.T
	gw    *proctest.S3
	d     *daemontest.InProcess
	proxy *httptest.Server
	key   adminapi.IssuedKey
	raw   []byte
	clock *clockwork.FakeClock
	dir   string // the agent's state dir
	file  string // the file shipped

	mu       sync.Mutex
	loseNext string // a path whose next answer is replaced by a 502
	// limited is a path answered 429 rate_limited with Retry-After
	// retryAfter (seconds) instead of being forwarded; seen counts every
	// request by path.
	limited, retryAfter string
	seen                map[string]int
}

// newRig starts versitygw and a daemon (with log storage when logsOn),
// an environment, a key and a deployment.
func newRig(t *testing.T, logsOn bool) *rig {
	t.Helper()
	r := &rig{t: t, gw: proctest.StartVersityGW(t), clock: clockwork.NewFakeClockAt(time.Now().UTC()), dir: t.TempDir()}
	r.file = filepath.Join(t.TempDir(), "app.log")
	env := map[string]string{}
	if logsOn {
		env = r.logsEnv()
	}
	r.d = daemontest.NewInProcess(t, daemontest.AppOptions{Env: env})
	r.proxy = httptest.NewServer(http.HandlerFunc(r.forward))
	t.Cleanup(r.proxy.Close)
	ctx := context.Background()
	if _, err := r.d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: envSlug}); err != nil {
		t.Fatal(err)
	}
	k, err := r.d.Admin.IssueIngestKey(ctx, envSlug)
	if err != nil {
		t.Fatal(err)
	}
	r.key = k
	if r.raw, err = protocol.DecodeKeyMaterial(k.KeyMaterial); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	hb := fmt.Sprintf(`{"environmentSlug":%q,"deployment":{"id":%q},"agentVersion":"test/1","sentAt":%q,"reaper":{"idleChecks":0,"limitMinutes":30,"lastActivityAt":%q,"ciActive":false}}`,
		envSlug, depID, now.Format(time.RFC3339), now.Format(time.RFC3339))
	resp, err := r.client().Post(ctx, "/api/ingest/heartbeat", []byte(hb))
	if err != nil || resp.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %v %v", resp, err)
	}
	return r
}

func (r *rig) logsEnv() map[string]string {
	return map[string]string{
		"CHALUPA_LOGS_URL":    "s3://" + r.gw.Bucket + "/logs?endpoint=" + r.gw.Endpoint + "&region=us-east-1",
		"CHALUPA_LOGS_KEY":    r.gw.AccessKey,
		"CHALUPA_LOGS_SECRET": r.gw.SecretKey,
	}
}

func (r *rig) forward(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	r.seen[req.URL.Path]++
	if r.limited != "" && req.URL.Path == r.limited {
		r.mu.Unlock()
		w.Header().Set("Retry-After", r.retryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"code":"rate_limited","message":"deployment log request quota exceeded"}}`)
		return
	}
	lose := r.loseNext != "" && req.URL.Path == r.loseNext
	if lose {
		r.loseNext = ""
	}
	target, _ := url.Parse(r.d.URL)
	r.mu.Unlock()
	if lose {
		// Forwarded, then the answer lost: the daemon did the work.
		rec := httptest.NewRecorder()
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(rec, req)
		http.Error(w, `{"error":{"code":"bad_gateway"}}`, http.StatusBadGateway)
		return
	}
	httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, req)
}

func (r *rig) client() *protocol.Client {
	return &protocol.Client{BaseURL: r.proxy.URL, KeyID: r.key.KeyID, Key: r.raw}
}

// open opens a shipper for service over the rig's file; put is the
// upload client (nil: a working one).
func (r *rig) open(service string, put *http.Client, maxBytes int64) *logship.Shipper {
	r.t.Helper()
	sh, err := logship.Open(logship.Config{Service: service, Dir: logship.DirFor(r.dir, service),
		OpenSource:  func(c string) logship.Source { return logship.OpenFileSource(r.file, c) },
		Environment: envSlug, Deployment: depID, Client: r.client(), HTTP: put, Clock: r.clock,
		Log: zerolog.New(io.Discard), SpoolMaxBytes: maxBytes})
	if err != nil {
		r.t.Fatal(err)
	}
	return sh
}

func (r *rig) appendLines(prefix string, n int) []byte {
	r.t.Helper()
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "%s line %05d: the quick brown fox jumps over the lazy dog\n", prefix, i)
	}
	f, err := os.OpenFile(r.file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b.Bytes()); err != nil {
		r.t.Fatal(err)
	}
	return b.Bytes()
}

// tick ticks (reading what is new), advances past FlushInterval (so the
// lines read are cut) and any back-off, and ticks again; it returns the
// second tick's result with both ticks' counts.
func (r *rig) tick(sh *logship.Shipper) logship.TickResult {
	r.t.Helper()
	first, err := sh.Tick(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	r.clock.Advance(max(logship.FlushInterval, logship.RetryMax) + time.Second)
	res, err := sh.Tick(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	res.Read += first.Read
	res.Spooled += first.Spooled
	res.Committed += first.Committed
	res.Finished += first.Finished
	res.Dropped += first.Dropped
	return res
}

// stored reads back every committed chunk through download grants, in
// session and seq order, and returns the chunks' count and their
// decompressed concatenation.
func (r *rig) stored() (int, []byte) {
	r.t.Helper()
	ctx := context.Background()
	l, err := r.d.Admin.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: envSlug, DeploymentID: depID})
	if err != nil {
		r.t.Fatal(err)
	}
	var all bytes.Buffer
	n := 0
	for _, s := range l.Sessions {
		for _, c := range s.Chunks {
			if c.State != "committed" {
				continue
			}
			g, err := r.d.Admin.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: envSlug, DeploymentID: depID, Session: s.SessionID, Seq: fmt.Sprint(c.Seq)})
			if err != nil {
				r.t.Fatal(err)
			}
			resp, err := http.Get(g.URL)
			if err != nil {
				r.t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				r.t.Fatalf("chunk %s/%d: %v", s.SessionID, c.Seq, err)
			}
			plain, err := io.ReadAll(zr)
			if err != nil {
				r.t.Fatal(err)
			}
			all.Write(plain)
			n++
		}
	}
	return n, all.Bytes()
}

// objects counts the chunk objects in the bucket.
func (r *rig) objects() int {
	r.t.Helper()
	n := 0
	root := filepath.Join(r.gw.Root, r.gw.Bucket)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".chunk") {
			n++
		}
		return nil
	})
	return n
}

func (r *rig) rows(query string) int {
	r.t.Helper()
	var n int
	if err := r.d.App.DB.Read.QueryRow(query).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// failingPut is an upload client whose every request fails in transport:
// the agent dies (or loses its network) after the plan, before the PUT.
var failingPut = &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
	return nil, errors.New("upload interrupted")
})}

// tamperingPut is an upload client that stores other bytes of the same
// size for its first n PUTs (another upload with the chunk's grant won the
// race, or the store changed the bytes), then uploads faithfully; it
// counts the PUTs.
func tamperingPut(n int) (*http.Client, *int) {
	var mu sync.Mutex
	puts := 0
	return &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		puts++
		tamper := puts <= n
		mu.Unlock()
		if tamper {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			for i := range body {
				body[i] ^= 0xff
			}
			req = req.Clone(req.Context())
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		return http.DefaultTransport.RoundTrip(req)
	})}, &puts
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestShipperHonoursRetryAfter: a 429 of the rate quotas pauses shipping
// for its Retry-After when that is longer than the back-off (5 s), so a
// spooled chunk is not sent again before the bucket holds a token
// (docs/operations.md, "Quotas"); then it ships.
func TestShipperHonoursRetryAfter(t *testing.T) {
	r := newRig(t, true)
	if _, err := r.d.Admin.SetLogServices(context.Background(), adminapi.SetLogServicesRequest{EnvironmentSlug: envSlug, Services: []string{"app.log"}}); err != nil {
		t.Fatal(err)
	}
	const plan = "/api/ingest/logs/plan"
	r.mu.Lock()
	r.limited, r.retryAfter = plan, "120"
	r.mu.Unlock()
	seen := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.seen[plan]
	}
	sh := r.open("app.log", nil, 0)
	r.appendLines("a", 100)
	if _, err := sh.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(logship.FlushInterval + time.Second)
	if res, err := sh.Tick(context.Background()); err != nil || !res.Paused || res.Code != "rate_limited" || seen() != 1 {
		t.Fatalf("first plan: %+v %v, %d plans sent", res, err, seen())
	}
	r.mu.Lock()
	r.limited = ""
	r.mu.Unlock()
	for _, step := range []time.Duration{logship.RetryMin + time.Second, 60 * time.Second, 50 * time.Second} { // 116 s in all
		r.clock.Advance(step)
		if res, err := sh.Tick(context.Background()); err != nil || !res.Paused || seen() != 1 {
			t.Fatalf("%s into a Retry-After of 120 s: %+v %v, %d plans sent", step, res, err, seen())
		}
	}
	r.clock.Advance(5 * time.Second)
	if res, err := sh.Tick(context.Background()); err != nil || res.Paused || res.Committed != 1 {
		t.Fatalf("past the Retry-After: %+v %v", res, err)
	}
}

func TestShipper(t *testing.T) {
	t.Run("a file shipped and read back byte-exact, across a rotation", func(t *testing.T) {
		r := newRig(t, true)
		if _, err := r.d.Admin.SetLogServices(context.Background(), adminapi.SetLogServicesRequest{EnvironmentSlug: envSlug, Services: []string{"app.log"}}); err != nil {
			t.Fatal(err)
		}
		sh := r.open("app.log", nil, 0)
		want := r.appendLines("first", 2000)
		if res := r.tick(sh); res.Committed != 1 || res.Paused {
			t.Fatalf("tick: %+v", res)
		}
		os.Rename(r.file, r.file+".1")
		want = append(want, r.appendLines("rotated", 100)...)
		r.tick(sh) // drains the old file, moves to the new one
		r.tick(sh)
		res, err := sh.Stop(context.Background())
		if err != nil || res.Paused || res.Finished != 1 {
			t.Fatalf("stop: %+v %v", res, err)
		}
		n, got := r.stored()
		if !bytes.Equal(got, want) {
			t.Fatalf("read back %d bytes in %d chunks, want the file's %d bytes", len(got), n, len(want))
		}
		if o := r.objects(); o != n {
			t.Fatalf("%d objects for %d committed chunks", o, n)
		}
		if f := r.rows(`SELECT count(*) FROM log_sessions WHERE finished_at IS NOT NULL AND instr(CAST(final_payload AS TEXT), '"reason":"shutdown"') > 0`); f != 1 {
			var got string
			r.d.App.DB.Read.QueryRow(`SELECT group_concat(coalesce(final_payload, 'NULL'), ' | ') FROM log_sessions`).Scan(&got)
			t.Fatalf("finished sessions with the shutdown payload: %d (%s)", f, got)
		}
	})

	t.Run("replay after the agent dies before the PUT and the commit answer is lost", func(t *testing.T) {
		r := newRig(t, true)
		if _, err := r.d.Admin.SetLogServices(context.Background(), adminapi.SetLogServicesRequest{EnvironmentSlug: envSlug, Services: []string{"app.log"}}); err != nil {
			t.Fatal(err)
		}
		want := r.appendLines("a", 500)
		dead := r.open("app.log", failingPut, 0)
		if res := r.tick(dead); !res.Paused || res.Committed != 0 {
			t.Fatalf("tick with the upload failing: %+v", res)
		}
		if p := r.rows(`SELECT count(*) FROM log_chunks WHERE state = 'planned'`); p != 1 || r.objects() != 0 {
			t.Fatalf("after plan, before PUT: %d planned rows, %d objects", p, r.objects())
		}
		// The agent restarts (no Stop: it died); the daemon restarts too.
		r.d.Restart(daemontest.AppOptions{})
		sh := r.open("app.log", nil, 0)
		r.mu.Lock()
		r.loseNext = "/api/ingest/logs/commit" // committed, answer lost
		r.mu.Unlock()
		if res, err := sh.Tick(context.Background()); err != nil || !res.Paused || res.Committed != 0 {
			t.Fatalf("tick with the commit answer lost: %+v %v", res, err)
		}
		want = append(want, r.appendLines("b", 300)...)
		r.tick(sh)
		if _, err := sh.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		n, got := r.stored()
		if !bytes.Equal(got, want) {
			t.Fatalf("read back %d bytes in %d chunks, want %d", len(got), n, len(want))
		}
		chunks := r.rows(`SELECT count(*) FROM log_chunks`)
		if o := r.objects(); o != n || chunks != n || n != 2 {
			t.Fatalf("%d objects, %d chunk rows, %d committed: want each chunk once (2)", o, chunks, n)
		}
		if f := r.rows(`SELECT count(*) FROM log_sessions WHERE instr(CAST(final_payload AS TEXT), '"reason":"restart"') > 0`); f != 1 {
			t.Fatalf("the dead run's session finished with reason restart: %d", f)
		}
	})

	t.Run("503 without log storage keeps lines locally within the bound, shipped once configured", func(t *testing.T) {
		r := newRig(t, false)
		// About two chunks of 400 lines (~600 compressed bytes each).
		const spoolBound = 1500
		sh := r.open("cloud-init.service", nil, spoolBound)
		var want []byte
		for i := range 6 {
			want = append(want, r.appendLines(fmt.Sprint("batch", i), 400)...)
			if res := r.tick(sh); !res.Paused {
				t.Fatalf("tick %d without log storage: %+v", i, res)
			}
		}
		if sh.Dropped() == 0 {
			t.Fatalf("six chunks over the bound: nothing dropped")
		}
		spooled, bytesHeld := sh.Spooled()
		if bytesHeld > spoolBound || spooled == 0 {
			t.Fatalf("spool holds %d chunks, %d bytes: want some, within the bound", spooled, bytesHeld)
		}
		for k, v := range r.logsEnv() {
			r.d.Env[k] = v
		}
		r.d.Restart(daemontest.AppOptions{})
		if res := r.tick(sh); res.Paused || res.Committed != spooled {
			t.Fatalf("tick once configured: %+v, want %d committed", res, spooled)
		}
		n, got := r.stored()
		if n != spooled || !bytes.HasSuffix(want, got) || len(got) == len(want) {
			t.Fatalf("stored %d chunks, %d bytes: want the newest %d chunks (the oldest dropped) of %d bytes", n, len(got), spooled, len(want))
		}
	})

	t.Run("restarts while the daemon refuses keep the spool within the bound", func(t *testing.T) {
		r := newRig(t, false)
		const spoolBound = 1500 // about two chunks of 400 lines
		var want []byte
		dropped := int64(0)
		for i := range 6 {
			// Each run reads a batch, is refused (503) and stops: SIGTERM's
			// cut spools the batch as a chunk while the session is refused.
			sh := r.open("cloud-init.service", nil, spoolBound)
			want = append(want, r.appendLines(fmt.Sprint("run", i), 400)...)
			if i == 0 {
				if res := r.tick(sh); !res.Paused || res.Code != "logs_not_configured" {
					t.Fatalf("tick while refused: %+v", res)
				}
				if st := inspect(t, r.dir); st.SessionState != logship.SessionRefused || st.Session != sh.Session() || st.Refusal != "open 503 logs_not_configured" || st.Chunks != 1 {
					t.Fatalf("status while refused: %+v", st)
				}
			}
			if res, err := sh.Stop(context.Background()); err != nil || !res.Paused {
				t.Fatalf("run %d: stop while refused: %+v %v", i, res, err)
			}
			n, held := sh.Spooled()
			if held > spoolBound || n == 0 {
				t.Fatalf("run %d: the spool holds %d chunks, %d bytes: want some, within %d", i, n, held, spoolBound)
			}
			dropped = sh.Dropped()
			st := inspect(t, r.dir)
			if st.Chunks != n || st.Bytes != held || st.Numbered != 0 || st.Dropped != dropped || st.SessionState != logship.SessionStopped ||
				st.Finishes != 0 || st.Oldest.IsZero() || st.Oldest.After(r.clock.Now()) {
				t.Fatalf("run %d: status %+v, want %d unnumbered chunks of %d bytes, %d dropped, stopped, no final payload", i, st, n, held, dropped)
			}
		}
		if dropped == 0 {
			t.Fatal("six runs' chunks over the bound: nothing dropped")
		}
		for k, v := range r.logsEnv() {
			r.d.Env[k] = v
		}
		r.d.Restart(daemontest.AppOptions{})
		sh := r.open("cloud-init.service", nil, spoolBound)
		spooled, _ := sh.Spooled()
		if res, err := sh.Tick(context.Background()); err != nil || res.Paused || res.Committed != spooled {
			t.Fatalf("tick once configured: %+v %v, want %d committed", res, err, spooled)
		}
		if st := inspect(t, r.dir); st.SessionState != logship.SessionOpen || st.Refusal != "" || st.Chunks != 0 {
			t.Fatalf("status once shipped: %+v", st)
		}
		if res, err := sh.Stop(context.Background()); err != nil || res.Paused || res.Finished != 1 {
			t.Fatalf("stop once configured: %+v %v, want this run's finish", res, err)
		}
		n, got := r.stored()
		if n != spooled || !bytes.HasSuffix(want, got) || len(got) == len(want) {
			t.Fatalf("stored %d chunks, %d bytes: want the newest %d chunks (the oldest dropped) of %d bytes", n, len(got), spooled, len(want))
		}
		// The refused runs told the daemon nothing: one session, finished
		// with exactly the chunks it holds.
		if s, c := r.rows(`SELECT count(*) FROM log_sessions`), r.rows(`SELECT count(*) FROM log_chunks`); s != 1 || c != n || r.objects() != n {
			t.Fatalf("%d sessions, %d chunk rows, %d objects: want 1 session and %d chunks once", s, c, r.objects(), n)
		}
		if f := r.rows(fmt.Sprintf(`SELECT count(*) FROM log_sessions WHERE instr(CAST(final_payload AS TEXT), '"chunks":%d,') > 0`, n)); f != 1 {
			t.Fatalf("the session's final payload does not count its %d chunks", n)
		}
	})

	t.Run("a chunk stored as other bytes is uploaded again under a renewed grant", func(t *testing.T) {
		r := newRig(t, true)
		if _, err := r.d.Admin.SetLogServices(context.Background(), adminapi.SetLogServicesRequest{EnvironmentSlug: envSlug, Services: []string{"app.log"}}); err != nil {
			t.Fatal(err)
		}
		hc, puts := tamperingPut(1)
		sh := r.open("app.log", hc, 0)
		want := r.appendLines("a", 500)
		if res := r.tick(sh); res.Paused || res.Committed != 1 || res.Dropped != 0 {
			t.Fatalf("tick: %+v", res)
		}
		if *puts != 2 {
			t.Fatalf("%d PUTs, want 2 (the tampered one, then the chunk again)", *puts)
		}
		n, got := r.stored()
		if n != 1 || !bytes.Equal(got, want) || r.objects() != 1 {
			t.Fatalf("stored %d chunks (%d objects), %d bytes: want the file's %d bytes once", n, r.objects(), len(got), len(want))
		}
	})

	t.Run("a chunk stored as other bytes every time is dropped after MaxUploads, and shipping goes on", func(t *testing.T) {
		r := newRig(t, true)
		if _, err := r.d.Admin.SetLogServices(context.Background(), adminapi.SetLogServicesRequest{EnvironmentSlug: envSlug, Services: []string{"app.log"}}); err != nil {
			t.Fatal(err)
		}
		hc, puts := tamperingPut(logship.MaxUploads)
		sh := r.open("app.log", hc, 0)
		r.appendLines("lost", 500)
		if res := r.tick(sh); res.Paused || res.Committed != 0 || res.Dropped != 1 {
			t.Fatalf("tick: %+v", res)
		}
		if *puts != logship.MaxUploads || sh.Mismatched() != 1 || sh.Dropped() != 1 || r.objects() != 0 {
			t.Fatalf("%d PUTs, %d mismatched, %d dropped, %d objects: want %d, 1, 1, 0", *puts, sh.Mismatched(), sh.Dropped(), r.objects(), logship.MaxUploads)
		}
		if st := inspect(t, r.dir); st.Mismatched != 1 || st.Dropped != 1 || st.Chunks != 0 {
			t.Fatalf("status: %+v", st)
		}
		want := r.appendLines("kept", 300)
		if res := r.tick(sh); res.Paused || res.Committed != 1 {
			t.Fatalf("tick after the drop: %+v", res)
		}
		if n, got := r.stored(); n != 1 || !bytes.Equal(got, want) {
			t.Fatalf("stored %d chunks, %d bytes: want the next chunk's %d bytes", n, len(got), len(want))
		}
	})

	t.Run("a service off the allowlist is refused and nothing is stored", func(t *testing.T) {
		r := newRig(t, true)
		sh := r.open("nginx.service", nil, 0)
		r.appendLines("x", 100)
		res := r.tick(sh)
		if !res.Paused || res.Committed != 0 {
			t.Fatalf("tick: %+v", res)
		}
		if s, o := r.rows(`SELECT count(*) FROM log_sessions`)+r.rows(`SELECT count(*) FROM log_chunks`), r.objects(); s != 0 || o != 0 {
			t.Fatalf("refused service stored %d rows, %d objects", s, o)
		}
		if n, _ := sh.Spooled(); n != 1 {
			t.Fatalf("the refused chunk is kept for a later allowlist: %d spooled", n)
		}
	})
}

// inspect is the one service spool under dir as `agent status` reads it.
func inspect(t *testing.T, dir string) logship.SpoolStatus {
	t.Helper()
	all := logship.Inspect(dir)
	if len(all) != 1 || all[0].Error != "" {
		t.Fatalf("spools: %+v", all)
	}
	return all[0]
}
