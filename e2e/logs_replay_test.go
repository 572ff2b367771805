package e2e

// Replay after both sides restart, with the built agent and daemon
// (docs/operations.md, "Logs"): each side is SIGKILLed while a chunk is
// planned and not committed. The kills are placed from outside, by
// proxies that hold one request unanswered (never a hook in the binary):
// the agent is then stuck in that request with the plan persisted on both
// sides, and the test reads that state from the spool, the bucket and the
// daemon's log_chunks rows before killing.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/agent/logship"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
)

// holdProxy forwards to target, except the first request hold matches:
// that one is never forwarded nor answered (its client waits) until the
// client goes away; held is closed when it arrives. The Host header is
// kept, so presigned URLs signed for the proxy stay valid behind it.
type holdProxy struct {
	*httptest.Server
	mu      sync.Mutex
	target  *url.URL
	hold    func(*http.Request) bool
	held    chan struct{}
	release chan struct{}
}

func newHoldProxy(t *testing.T, target string, hold func(*http.Request) bool) *holdProxy {
	p := &holdProxy{hold: hold, held: make(chan struct{}), release: make(chan struct{})}
	p.retarget(target)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		hold := p.hold != nil && p.hold(r)
		if hold {
			p.hold = nil
			close(p.held)
		}
		target := p.target
		p.mu.Unlock()
		if hold {
			// Read the body first: the server watches for the client going
			// away only once it is consumed.
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-p.release:
			}
			return
		}
		(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		}}).ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	t.Cleanup(func() { close(p.release) }) // before Close, which waits for the held request
	return p
}

func (p *holdProxy) retarget(target string) {
	u, _ := url.Parse(target)
	p.mu.Lock()
	p.target = u
	p.mu.Unlock()
}

// TestLogsReplayAfterBothSidesRestart: the built agent ships a 10 MiB file
// through the built daemon to versitygw; its first chunk's upload (or its
// commit) is held, then agent and daemon are both SIGKILLed with the chunk
// planned, not committed. Restarted, the agent replays the same plan (the
// daemon renews the grant for the same key) and ships the rest: every
// chunk is one committed row and one object, `admin logs get` reads the
// file back byte-exact, and the dead run's session is finished with
// reason restart.
func TestLogsReplayAfterBothSidesRestart(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	for _, tc := range []struct {
		// name: no comma, it is in the temporary paths, and a comma
		// separates --log-file's values.
		name string
		// store holds a request to the object store; daemon one to the
		// daemon; object is whether the held chunk's object exists at the
		// kills.
		store, daemon func(*http.Request) bool
		object        bool
	}{
		{name: "killed after plan before the PUT", store: func(r *http.Request) bool { return r.Method == http.MethodPut }},
		{name: "killed after the PUT before the commit", daemon: func(r *http.Request) bool { return r.URL.Path == "/api/ingest/logs/commit" }, object: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := proctest.StartVersityGW(t)
			store := newHoldProxy(t, gw.Endpoint, tc.store)
			d := proctest.Start(t, bin, proctest.Options{Env: e2eLogsEnv(gw, store.URL)})
			front := newHoldProxy(t, d.URL, tc.daemon)
			ctx := context.Background()
			if _, err := d.Admin().CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "replay-demo"}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Admin().SetLogServices(ctx, adminapi.SetLogServicesRequest{EnvironmentSlug: "replay-demo", Services: []string{"app.log"}}); err != nil {
				t.Fatal(err)
			}
			k, err := d.Admin().IssueIngestKey(ctx, "replay-demo")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			keyFile := e2eAgentKey(t, dir, k)
			appLog := filepath.Join(dir, "app.log")
			want := replayLines(t, appLog, 10<<20)
			state := filepath.Join(dir, "state")
			spoolDir := logship.DirFor(state, "app.log")
			env := agentEnv(os.Getenv("PATH"), map[string]string{"CHALUPA_AGENT_URL": front.URL, "CHALUPA_AGENT_ENV": "replay-demo",
				"CHALUPA_AGENT_KEY_FILE": keyFile, "CHALUPA_AGENT_DEPLOYMENT": "dep-replay",
				"CHALUPA_AGENT_DROPLET_ID": "12", "CHALUPA_AGENT_REGION": "nyc3", "CHALUPA_AGENT_STATE_DIR": state, "CHALUPA_AGENT_DISK_PATH": dir})
			args := []string{"--nvidia-smi", "none", "--run-root", filepath.Join(dir, "run"), "--log-file", appLog}

			first := startAgent(t, bin, env, args...)
			select {
			case <-store.held:
			case <-front.held:
			case <-time.After(60 * time.Second):
				t.Fatalf("no request held; agent log:\n%s", first.log.String())
			}
			// The plan is persisted on both sides: the chunk's seq in its
			// spool file, its row planned in the daemon.
			numbered := 0
			for _, st := range logship.Inspect(state) {
				numbered += st.Numbered
			}
			planned, committed := logChunkStates(t, d)
			if numbered != 1 || planned != 1 || committed != 0 || countObjects(gw) != map[bool]int{true: 1, false: 0}[tc.object] {
				t.Fatalf("at the kills: %d numbered chunks in the spool, %d planned and %d committed rows, %d objects", numbered, planned, committed, countObjects(gw))
			}
			first.cmd.Process.Kill()
			<-first.exited
			d.Kill()

			env2 := d.EnvCopy()
			env2["CHALUPA_LISTEN"] = proctest.FreeAddr(t)
			d2 := proctest.Start(t, bin, proctest.Options{Env: env2})
			front.retarget(d2.URL)
			second := startAgent(t, bin, env, args...)
			testwait.Eventually(t, testwait.Long, "the spool shipped", func() (bool, string) {
				left, _ := filepath.Glob(filepath.Join(spoolDir, "*.chunk"))
				return len(left) == 0 && strings.Contains(second.log.String(), `"message":"agent started"`), second.log.String()
			})
			second.stop() // cuts and ships the tail still waiting for FlushInterval

			planned, committed = logChunkStates(t, d2)
			if objects := countObjects(gw); planned != 0 || committed < 3 || objects != committed {
				t.Fatalf("%d planned and %d committed rows, %d objects: want every chunk committed once", planned, committed, objects)
			}
			got, err := e2eLogsGet(t, bin, d2, "replay-demo", "dep-replay")
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read back %d bytes (%v), want the file's %d exactly once", len(got), err, len(want))
			}
			l, err := d2.Admin().ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: "replay-demo", DeploymentID: "dep-replay"})
			if err != nil || len(l.Sessions) != 2 || !strings.Contains(l.Sessions[0].Final, `"reason":"restart"`) || !strings.Contains(l.Sessions[1].Final, `"reason":"shutdown"`) {
				t.Fatalf("sessions %+v (%v): want the killed run's finished with reason restart, the second's at shutdown", l, err)
			}
			if n := len(l.Sessions[0].Chunks); n != 1 {
				t.Fatalf("the killed run's session holds %d chunks, want its one planned chunk", n)
			}
		})
	}
}

// replayLines writes about size bytes of varied request lines to path and
// returns them.
func replayLines(t *testing.T, path string, size int) []byte {
	t.Helper()
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	seed := uint64(7)
	for i := 0; b.Len()+w.Buffered() < size; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		fmt.Fprintf(w, "2026-12-01T10:%02d:%02d.%06dZ app[%d]: GET /api/items/%d?page=%d 200 %d bytes in %d us trace=%016x\n",
			i/60%60, i%60, i%1000000, 4000+i%7, seed%100000, seed>>40%50, seed>>20%65536, seed>>8%9973, seed)
	}
	w.Flush()
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// logChunkStates counts the daemon's planned and committed log_chunks rows.
func logChunkStates(t *testing.T, d *proctest.Daemon) (planned, committed int) {
	t.Helper()
	db, err := storage.OpenReadOnly(context.Background(), d.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Read.QueryRow(`SELECT count(*) FILTER (WHERE state = 'planned'), count(*) FILTER (WHERE state = 'committed') FROM log_chunks`).Scan(&planned, &committed); err != nil {
		t.Fatal(err)
	}
	return planned, committed
}

// countObjects counts the chunk objects in the bucket.
func countObjects(gw *proctest.S3) int {
	n := 0
	filepath.WalkDir(filepath.Join(gw.Root, gw.Bucket), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, ".chunk") {
			n++
		}
		return nil
	})
	return n
}
