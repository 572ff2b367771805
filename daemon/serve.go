package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/storage"
)

// DefaultDrainTimeout bounds how long in-flight requests may finish after
// SIGTERM; heartbeats complete in milliseconds, so anything still running
// after this is stuck (docs/operations.md, "Start-up and shutdown").
const DefaultDrainTimeout = 10 * time.Second

// HTTP server bounds: a slow or stalled client cannot hold a connection (and
// its goroutine) indefinitely on a one-vCPU droplet.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 120 * time.Second
	// maxHeaderBytes is chalupa's bound on a request's line and headers,
	// checked in wrap so the refusal is JSON with a request id (431
	// headers_too_large). Real requests carry well under 1 KiB.
	maxHeaderBytes = 32 << 10
	// serverMaxHeaderBytes is http.Server.MaxHeaderBytes, net/http's own
	// bound (it reads 4 KiB more before refusing): above maxHeaderBytes so
	// that requests just over chalupa's bound reach wrap, yet still a cap
	// on what one connection can make the server buffer. Beyond it net/http
	// answers a plain-text 431 itself.
	serverMaxHeaderBytes = 2 * maxHeaderBytes
)

// minProcs is the fewest Ps (GOMAXPROCS) the serving daemon runs with, even
// on one vCPU (docs/operations.md, "Storage and the writer"). The writer's
// COMMIT blocks in fsync (synchronous=FULL) on a thread that keeps its P;
// with a single P nothing else runs until the runtime's monitor takes the P
// back, 20 µs to 10 ms later, so heartbeats arriving during the fsync are
// neither read nor queued and the next COMMIT carries one unit again. With
// a second P the HTTP goroutines read, verify and queue during the fsync
// and the next COMMIT carries them all: one core (taskset -c 0), contrib/load
// max phase went from ~1,700 to ~3,500 heartbeats/s, mean batch 3.6 to 30.
const minProcs = 2

// procsFor returns the GOMAXPROCS the daemon should run with: current
// raised to minProcs, unless the operator set GOMAXPROCS (env non-empty).
func procsFor(current int, env string) int {
	if env != "" || current >= minProcs {
		return current
	}
	return minProcs
}

// RunOptions adjusts Run for operators and tests.
type RunOptions struct {
	// LagLimit is how long replication may lag or fail before /api/ready
	// answers 503; zero means storage.DefaultLagLimit.
	LagLimit time.Duration
	// Logs receives the zerolog JSON log; nil means os.Stdout.
	Logs io.Writer
	// Listening, when set, is called with the bound address once the
	// server accepts connections.
	Listening func(addr string)
	// Clock is the daemon's one clock: request skew, stamps, uptime,
	// restore points and every background loop's schedule; nil means the
	// real clock.
	Clock clockwork.Clock
	// MaxConnections caps the client connections open at once; zero means
	// DefaultMaxConnections.
	MaxConnections int
	// PauseLoops are loops to pause at start (Options.PauseLoops).
	PauseLoops []string
}

// Run binds CHALUPA_LISTEN, opens the App, serves HTTP with the loops
// running, and blocks until ctx is cancelled, then shuts down in order: stop
// accepting and drain in-flight requests (bounded by DefaultDrainTimeout),
// then App.Close (loops, database, final replica sync). It returns nil
// after a clean shutdown, and an error wrapping storage.ErrReplicaBehind
// when the final sync left acknowledged commits out of the replica. A data
// dir another process holds is refused first, naming its pid
// (storage.LockedError); then the port is bound, so that a daemon that
// cannot serve (the port is taken) fails before it generates secrets,
// migrates or replicates anything.
func Run(ctx context.Context, cfg *Config, opt RunOptions) error {
	if cur, want := runtime.GOMAXPROCS(0), procsFor(runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS")); want != cur {
		runtime.GOMAXPROCS(want)
	}
	// A second serve on the same data dir holds the same port too: name
	// the lock's holder first, not the port clash (docs/operations.md,
	// "Embedded default"). Open takes the lock itself.
	if pid, held := storage.DataDirHolder(cfg.DataDir); held {
		return fmt.Errorf("lock CHALUPA_DATA_DIR: %w", &storage.LockedError{PID: pid})
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("listen on CHALUPA_LISTEN: %w", err)
	}
	app, err := Open(ctx, cfg, Options{LagLimit: opt.LagLimit, Logs: opt.Logs, Clock: opt.Clock, PauseLoops: opt.PauseLoops})
	if err != nil {
		_ = ln.Close()
		return err
	}
	log := app.Log
	hs := &http.Server{
		Handler:           app.Server.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes,
	}
	// The loops live until App.Close, after the drain (not until the
	// signal): a request still in flight may rely on them.
	if err := app.StartLoops(context.WithoutCancel(ctx)); err != nil {
		_ = ln.Close()
		app.Close(context.Background())
		return err
	}

	serveErr := make(chan error, 1)
	capped := newCapListener(ln, opt.MaxConnections)
	app.Server.m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chalupa_http_connections_refused_total",
		Help: "Connections refused because the connection cap (--max-connections) was reached.",
	}, func() float64 { return float64(capped.refused.Load()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chalupa_http_connections_open",
		Help: "Client connections open now.",
	}, func() float64 { return float64(capped.open.Load()) }))
	go func() { serveErr <- hs.Serve(capped) }()
	log.Info().Str("addr", ln.Addr().String()).Str("origin", cfg.HTTP.Origin).Str("version", buildinfo.Version).
		Str("replica", cfg.ReplicaKind()).Int("gomaxprocs", runtime.GOMAXPROCS(0)).Msg("chalupa serving")
	if opt.Listening != nil {
		opt.Listening(ln.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info().Msg("shutdown: draining requests")
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	}
	dctx, cancel := context.WithTimeout(context.Background(), DefaultDrainTimeout)
	if err := hs.Shutdown(dctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn().Err(err).Msg("shutdown: drain bound reached; closing remaining connections")
		_ = hs.Close()
	}
	cancel()
	if err := app.Close(context.Background()); err != nil {
		// The last line says what the replica lacks and what to do
		// (docs/operations.md, "Start-up and shutdown").
		var fe *storage.FinalSyncError
		ev := log.Error().Err(err)
		if errors.As(err, &fe) {
			ev = ev.Uint64("missing_commits", fe.Missing).Uint64("local_txid", fe.LocalTXID).Uint64("replica_txid", fe.RemoteTXID)
		}
		ev.Msg("shutdown complete, but the replica lacks acknowledged commits: fix the replica and start serve again, which resumes replicating them")
		return errors.Join(runErr, err)
	}
	log.Info().Msg("shutdown complete")
	return runErr
}
