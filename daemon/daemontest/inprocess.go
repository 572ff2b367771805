package daemontest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// AppOptions configures New. Zero fields take defaults.
type AppOptions struct {
	// Env is the configuration on top of the defaults New picks (fresh
	// secrets from proctest.NewSecrets, a loopback listen address, a t.TempDir()
	// data dir, a file:// replica in another t.TempDir() and
	// proctest.AgentRelease). An entry with
	// an empty value removes the default.
	Env map[string]string
	// Clock is the App's clock; nil means a real one.
	Clock clockwork.Clock
	// Logs receives the daemon's log; nil means a proctest.SyncBuffer kept in
	// InProcess.Logs.
	Logs *proctest.SyncBuffer
	// HTTP is the http.Client the admin client uses (a recording
	// transport, say); nil means one with a 60 s timeout.
	HTTP *http.Client
	// StartLoops runs the background loops under the supervisor. Off by
	// default: tests call a loop's tick themselves.
	StartLoops bool
	// Executor runs converge jobs (a fake in tests); nil: converge is not
	// configured.
	Executor jobs.Executor
	// PauseLoops are loop switch names to pause at open (serve
	// --pause-loops).
	PauseLoops []string
	// Statfs measures the data dir's filesystem for the free-space guard
	// (a test's full disk); nil means the real one.
	Statfs storage.StatfsFunc
}

// InProcess is one daemon assembled in the test process.
type InProcess struct {
	// App is the assembled daemon (its DB, Replicator, Keys and Server).
	App *daemon.App
	// Admin is the typed admin client, with the admin token, pointed at
	// URL.
	Admin *adminapi.Client
	// URL is the httptest server serving App.Server.Handler().
	URL string
	// Env is the configuration the App was opened with (secrets included).
	Env map[string]string
	// Logs holds everything the daemon logged.
	Logs *proctest.SyncBuffer

	t  testing.TB
	ts *httptest.Server
}

// New assembles a daemon in the test process (Coder's coderdtest.New): the
// configuration from opt over fresh defaults, daemon.Open over a real
// SQLite file replicating to a file:// replica, and the App's handler on an
// httptest server. It returns the App and a typed admin client; the whole
// InProcess is NewInProcess's. Cleanup stops the server and closes the App.
// Errors (a bad configuration, Open failing) fail the test.
func New(t testing.TB, opt AppOptions) (*daemon.App, *adminapi.Client) {
	t.Helper()
	p := NewInProcess(t, opt)
	return p.App, p.Admin
}

// NewInProcess is New returning everything it assembled.
func NewInProcess(t testing.TB, opt AppOptions) *InProcess {
	t.Helper()
	env := proctest.NewSecrets()
	env["CHALUPA_DATA_DIR"] = t.TempDir()
	env["CHALUPA_LISTEN"] = "127.0.0.1:0"
	env["CHALUPA_REPLICA_URL"] = (&url.URL{Scheme: "file", Path: filepath.Join(t.TempDir(), "replica")}).String()
	// The free-space guard off: the test machine's disk must not decide
	// a test (docs/operations.md, "Quotas").
	env[proctest.MinFreeBytesVar] = "0"
	// A box carries the agent by default, and converge refuses its up
	// without an installable release (docs/operations.md, "Converge").
	for k, v := range proctest.AgentRelease() {
		env[k] = v
	}
	for k, v := range opt.Env {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	p := &InProcess{Env: env, Logs: opt.Logs, t: t}
	if p.Logs == nil {
		p.Logs = &proctest.SyncBuffer{}
	}
	p.open(opt)
	t.Cleanup(p.Close)
	return p
}

func (p *InProcess) open(opt AppOptions) {
	t := p.t
	t.Helper()
	cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := p.Env[k]; return v, ok })
	if err != nil {
		t.Fatalf("daemontest: LoadConfig: %v", err)
	}
	app, err := daemon.Open(context.Background(), cfg, daemon.Options{Logs: p.Logs, Clock: opt.Clock, Executor: opt.Executor, PauseLoops: opt.PauseLoops, Statfs: opt.Statfs})
	if err != nil {
		t.Fatalf("daemontest: daemon.Open: %v", err)
	}
	if opt.StartLoops {
		if err := app.StartLoops(context.Background()); err != nil {
			app.Close(context.Background())
			t.Fatalf("daemontest: StartLoops: %v", err)
		}
	}
	p.App = app
	p.ts = httptest.NewServer(app.Server.Handler())
	p.URL = p.ts.URL
	hc := opt.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: proctest.RequestTimeout * 2}
	}
	p.Admin = &adminapi.Client{BaseURL: p.URL, Token: p.Env[proctest.AdminTokenVar], HTTP: hc}
}

// Close stops the HTTP server and closes the App (loops, database, final
// replica sync). Closing twice does nothing.
func (p *InProcess) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.close(ctx)
}

// CloseWithoutFinalSync closes like Close but gives up the final replica
// sync at once instead of retrying it for storage.DefaultShutdownSyncTimeout
// (20 s): for a test that broke the replica on purpose (removed its
// directory, stopped its S3 server) and asserts nothing about shutdown.
// Closing twice does nothing.
func (p *InProcess) CloseWithoutFinalSync() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.close(ctx)
}

func (p *InProcess) close(ctx context.Context) {
	if p.ts == nil {
		return
	}
	p.ts.Close()
	p.App.Close(ctx)
	p.ts, p.App = nil, nil
}

// Restart closes the App and opens a new one on the same data dir and
// configuration (a process restart, as far as caches are concerned), with
// the same options. URL and Admin change.
func (p *InProcess) Restart(opt AppOptions) {
	p.t.Helper()
	p.Close()
	p.open(opt)
}

// EnvironmentKey creates environment slug through cl and issues its first
// ingest key: the start of every test that sends signed requests. Errors
// fail the test.
func EnvironmentKey(t testing.TB, cl *adminapi.Client, slug string) adminapi.IssuedKey {
	t.Helper()
	ctx := context.Background()
	if _, err := cl.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: slug}); err != nil {
		t.Fatal(err)
	}
	k, err := cl.IssueIngestKey(ctx, slug)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
