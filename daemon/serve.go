package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// Shutdown bounds (DESIGN.md: stop accepting, drain, stop loops, final sync).
const (
	// DefaultDrainTimeout bounds how long in-flight requests may finish
	// after SIGTERM; heartbeats complete in milliseconds, so anything
	// still running after this is stuck.
	DefaultDrainTimeout = 10 * time.Second
	// finalSyncTimeout bounds the last replica sync (storage caps its own
	// retries at DefaultShutdownSyncTimeout; this is the outer guard).
	finalSyncTimeout = 30 * time.Second
)

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
}

// Run starts the daemon and blocks until ctx is cancelled, then shuts down in
// order: stop accepting and drain in-flight requests (bounded), stop the
// background loops, close the application's database pools, and close
// replication, which performs the final sync. It returns nil after a clean
// shutdown.
func Run(ctx context.Context, cfg *Config, opt RunOptions) error {
	out := opt.Logs
	if out == nil {
		out = os.Stdout
	}
	log := zerolog.New(out).With().Timestamp().Logger()
	clock := opt.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}

	// Everything the daemon creates (database, WAL, Litestream's LTX files,
	// restore points, secrets) holds fleet data or keys: owner only, even in
	// a data dir the operator made by hand for a restore.
	syscall.Umask(0o077)
	unlock, err := storage.LockDataDir(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("lock CHALUPA_DATA_DIR: %w", err)
	}
	defer unlock()

	if err := cfg.checkMasterKeyForExistingDB(); err != nil {
		return err
	}
	wrote, err := cfg.EnsureSecrets()
	if err != nil {
		return err
	}
	if wrote {
		log.Warn().Str("path", cfg.SecretsFile).Strs("generated", cfg.Generated).
			Msg("generated secrets for the embedded default; values are in this file (0600), never printed")
	} else if len(cfg.Generated) > 0 {
		log.Info().Str("path", cfg.SecretsFile).Strs("from_file", cfg.Generated).Msg("using generated secrets")
	}
	if cfg.dropAWSCABundle() {
		log.Warn().Msg("AWS_CA_BUNDLE is set; unsetting it for this process so S3 replication can start (system roots are used)")
	}

	db, err := storage.Open(ctx, cfg.DatabasePath())
	if err != nil {
		return err
	}
	closeDB := func() {
		if err := db.Close(); err != nil {
			log.Error().Err(err).Msg("close database")
		}
	}
	res, err := db.Migrate(ctx, storage.MigrateOptions{Logger: log, Clock: clock})
	if err != nil {
		closeDB()
		return err
	}
	log.Info().Int64("from", res.From).Int64("to", res.To).Strs("applied", res.Applied).Msg("schema ready")

	sealer, err := ingest.OpenSealer(ctx, db, cfg.MasterKey(), clock.Now())
	if errors.Is(err, ingest.ErrWrongMasterKey) {
		recovered, rerr := cfg.recoverPendingRewrap(ctx, db, true)
		if rerr != nil {
			closeDB()
			return rerr
		}
		if recovered {
			log.Warn().Str("path", cfg.SecretsFile).Msg("finished an interrupted rewrap: secrets.env now holds the new master key")
			sealer, err = ingest.OpenSealer(ctx, db, cfg.MasterKey(), clock.Now())
		}
	}
	if err != nil {
		closeDB()
		return err
	}

	repl, err := storage.StartReplication(ctx, cfg.DatabasePath(), storage.ReplicaConfig{
		URL:             cfg.ReplicaURL,
		AccessKeyID:     cfg.SpacesKey.Reveal(),
		SecretAccessKey: cfg.SpacesSecret.Reveal(),
		LagLimit:        opt.LagLimit,
		Logger:          slog.New(storage.NewLitestreamLogHandler(log, slog.LevelWarn)),
	})
	if err != nil {
		closeDB()
		return err
	}
	closeRepl := func() {
		sctx, cancel := context.WithTimeout(context.Background(), finalSyncTimeout)
		defer cancel()
		if err := repl.Close(sctx); err != nil {
			log.Error().Err(err).Msg("final replica sync")
		} else {
			log.Info().Msg("replication closed after final sync")
		}
	}

	srv := NewServer(Deps{Config: cfg, DB: db, Replicator: repl, Keys: ingest.NewKeyring(db, sealer, clock), Log: log, Clock: clock})
	loops, err := registeredLoops(LoopDeps{DB: db, Clock: clock, Log: log, Metrics: srv.m.reg})
	if err != nil {
		closeDB()
		closeRepl()
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		closeDB()
		closeRepl()
		return fmt.Errorf("listen on CHALUPA_LISTEN: %w", err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          nil,
	}
	sup := startSupervisor(ctx, log, clock, loops)

	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	log.Info().Str("addr", ln.Addr().String()).Str("origin", cfg.Origin).Str("version", Version).
		Str("replica", cfg.ReplicaKind()).Msg("chalupa serving")
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
	sup.stop()
	closeDB()
	closeRepl()
	log.Info().Msg("shutdown complete")
	return runErr
}

// dropAWSCABundle unsets AWS_CA_BUNDLE for this process when the replica is
// s3:// and reports whether it did. Litestream's S3 client cannot load a
// custom CA bundle ("unable to add custom RootCAs HTTPClient", upstream issue
// #639): with it set, every replication attempt fails. Spaces uses a public CA.
func (c *Config) dropAWSCABundle() bool {
	if c.ReplicaKind() != "s3" || os.Getenv("AWS_CA_BUNDLE") == "" {
		return false
	}
	_ = os.Unsetenv("AWS_CA_BUNDLE")
	return true
}
