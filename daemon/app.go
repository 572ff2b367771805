package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/storage"
)

// ErrNoDatabase is returned by an Offline Open when the data dir holds no
// database: a maintenance command must never create one, because starting
// replication on a fresh, empty file would overwrite the replica of the real
// database with it.
var ErrNoDatabase = errors.New("no " + DatabaseFileName + " in CHALUPA_DATA_DIR (check CHALUPA_DATA_DIR: an offline command never creates a database)")

// finalSyncTimeout bounds the last replica sync at Close (storage caps its
// own retries at DefaultShutdownSyncTimeout; this is the outer guard).
const finalSyncTimeout = 30 * time.Second

// Options adjusts Open for operators and tests.
type Options struct {
	// LagLimit is how long replication may lag or fail before /api/ready
	// answers 503; zero means storage.DefaultLagLimit.
	LagLimit time.Duration
	// Logs receives the zerolog JSON log; nil means os.Stdout.
	Logs io.Writer
	// Clock is the one clock of the daemon (ingest windows, write stamps,
	// uptime, loops); nil means the real clock. Tests pass a fake.
	Clock clockwork.Clock
	// Offline opens storage for a maintenance command run while the daemon
	// is stopped (rewrap): lock, migrations and replication only; no
	// secrets are generated, no master-key check is made and no services or
	// loops are built. The command makes its own key checks. The database
	// must exist (ErrNoDatabase).
	Offline bool
	// Executor runs converge jobs (docs/operations.md, "Jobs"); nil: the
	// Pulumi executor when DIGITALOCEAN_PROVISION_TOKEN is set, else converge
	// answers 503 converge_not_configured and the job lane is not run.
	Executor jobs.Executor
	// PauseLoops are switch names (ParseLoopNames) to pause at start: the
	// pause is persisted and lasts until resumed (docs/operations.md,
	// "Loop switches").
	PauseLoops []string
	// Statfs measures the data directory's filesystem for the free-space
	// guard (docs/operations.md, "Quotas"); nil means storage.Statfs.
	// Tests inject a full disk with it.
	Statfs storage.StatfsFunc
}

// App is an assembled daemon: the data dir lock, the open and migrated
// database, its running replication, and (unless Offline) the key ring,
// the HTTP server and the background loops. Open builds one; Close takes it
// down in the one right order.
type App struct {
	// Config is the validated configuration the App was opened with.
	Config *Config
	// Log is the daemon's logger.
	Log zerolog.Logger
	// Clock is the injected clock.
	Clock clockwork.Clock
	// DB is the database (its Writer is the only write path).
	DB *storage.DB
	// Replicator is the embedded Litestream replication.
	Replicator *storage.Replicator
	// Keys is the ingest key ring (nil when Offline).
	Keys *ingest.Keyring
	// Sealer is the master-key sealer proven at start (nil when Offline):
	// converge's key delivery opens its SSH identity with it
	// (docs/operations.md, "SSH key delivery").
	Sealer *envelope.Sealer
	// Server is the HTTP side (nil when Offline).
	Server *Server

	lock *storage.DataDirLock
	sup  *supervisor
}

// Open assembles the daemon in order: lock the data dir (ErrLocked beside a
// running daemon), check an existing database read-only (its master key
// opens the check value, its schema is not newer than this binary), generate
// the embedded default's secrets, open the database, migrate it (a restore point first when it holds a schema),
// prove the master key against the stored check value (finishing an
// interrupted rewrap), start replication, and build the key ring and the
// server. On any error everything opened so far is closed again. Start the
// loops with StartLoops; serve App.Server.Handler(); call Close when done.
func Open(ctx context.Context, cfg *Config, opt Options) (*App, error) {
	out := opt.Logs
	if out == nil {
		out = os.Stdout
	}
	clock := opt.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	a := &App{Config: cfg, Log: zerolog.New(out).With().Timestamp().Logger(), Clock: clock}
	if err := a.open(ctx, opt); err != nil {
		a.Close(context.Background())
		return nil, err
	}
	return a, nil
}

func (a *App) open(ctx context.Context, opt Options) error {
	cfg, log := a.Config, a.Log
	// Everything the daemon creates (database, WAL, Litestream's LTX files,
	// restore points, secrets) holds fleet data or keys: owner only, even in
	// a data dir the operator made by hand for a restore.
	syscall.Umask(0o077)
	if cfg.dropAWSCABundle() {
		log.Warn().Msg("AWS_CA_BUNDLE is set; unsetting it for this process so S3 replication can start (system roots are used)")
	}
	lock, err := storage.AcquireDataDir(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("lock CHALUPA_DATA_DIR: %w", err)
	}
	a.lock = lock
	fresh, err := a.prepareDataDir(ctx, opt.Offline)
	if errors.Is(err, storage.ErrReplicaForeign) {
		// Refused before anything was written: take back the lock file and
		// a data dir this start made (docs/operations.md, "Backup and
		// restore").
		a.lock.Abandon()
		a.lock = nil
	}
	if err != nil {
		return err
	}
	if a.DB, err = storage.Open(ctx, cfg.DatabasePath()); err != nil {
		return err
	}
	res, err := a.DB.Migrate(ctx, storage.MigrateOptions{Logger: log, Clock: a.Clock})
	if err != nil {
		return err
	}
	log.Info().Int64("from", res.From).Int64("to", res.To).Strs("applied", res.Applied).Msg("schema ready")
	if !opt.Offline {
		if a.Sealer, err = a.openSealer(ctx); err != nil {
			return err
		}
	}
	if err := a.startReplication(ctx, opt, fresh || res.From == 0); err != nil {
		return err
	}
	if opt.Offline {
		return nil
	}
	return a.openServices(ctx, opt)
}

// prepareDataDir checks the data dir before anything is written to it and
// reports whether it holds no database yet. Offline: the database must
// exist (ErrNoDatabase). Otherwise a new database never joins a replica
// that holds a history (docs/operations.md, "Backup and restore"), an
// existing database's master key (and schema) is proven read-only before
// the first write, so a refusal leaves the data dir as it was, without a
// secrets.env generated for a daemon that never ran; then the embedded
// default's secrets are generated.
func (a *App) prepareDataDir(ctx context.Context, offline bool) (fresh bool, err error) {
	cfg, log := a.Config, a.Log
	_, statErr := os.Stat(cfg.DatabasePath())
	fresh = errors.Is(statErr, os.ErrNotExist)
	if offline {
		if fresh {
			return fresh, ErrNoDatabase
		}
		return fresh, nil
	}
	if fresh {
		if err := a.checkReplicaUnused(ctx); err != nil {
			return fresh, err
		}
	}
	if err := cfg.preflightExistingDB(ctx); err != nil {
		return fresh, err
	}
	wrote, err := cfg.EnsureSecrets()
	if err != nil {
		return fresh, err
	}
	if wrote {
		log.Warn().Str("path", cfg.Secrets.File).Strs("generated", cfg.Secrets.Generated).
			Msg("generated secrets for the embedded default; values are in this file (0600), never printed")
	} else if len(cfg.Secrets.Generated) > 0 {
		log.Info().Str("path", cfg.Secrets.File).Strs("from_file", cfg.Secrets.Generated).Msg("using generated secrets")
	}
	return fresh, nil
}

// openSealer proves the master key against the stored check value,
// finishing an interrupted rewrap first when the key is the old one.
func (a *App) openSealer(ctx context.Context) (*envelope.Sealer, error) {
	cfg := a.Config
	s, err := ingest.OpenSealer(ctx, a.DB, cfg.MasterKey(), a.Clock.Now())
	if errors.Is(err, ingest.ErrWrongMasterKey) {
		recovered, rerr := cfg.recoverPendingRewrap(ctx, a.DB, true)
		if rerr != nil {
			return nil, rerr
		}
		if recovered {
			a.Log.Warn().Str("path", cfg.Secrets.File).Msg("finished an interrupted rewrap: secrets.env now holds the new master key")
			s, err = ingest.OpenSealer(ctx, a.DB, cfg.MasterKey(), a.Clock.Now())
		}
	}
	return s, err
}

// startReplication starts the embedded Litestream on the database (fresh:
// a database without a history yet) and hooks it to the writer's commits.
func (a *App) startReplication(ctx context.Context, opt Options, fresh bool) error {
	cfg := a.Config
	replLog := slog.New(storage.NewLitestreamLogHandler(a.Log, slog.LevelWarn))
	if opt.Offline {
		replLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// After a rollback the database names a replica generation of its own
	// (docs/operations.md, "Rollback").
	gen, err := storage.ReplicaGeneration(ctx, a.DB.Read)
	if err != nil {
		return err
	}
	identity, err := storage.DatabaseIdentity(ctx, a.DB.Read)
	if err != nil {
		return err
	}
	if a.Replicator, err = storage.StartReplication(ctx, cfg.DatabasePath(), storage.ReplicaConfig{
		Identity:        identity,
		Fresh:           fresh,
		OnEvent:         a.replicaEventRecorder(a.DB),
		URL:             cfg.Replica.URL,
		Generation:      gen,
		AccessKeyID:     cfg.Replica.SpacesKey.Reveal(),
		SecretAccessKey: cfg.Replica.SpacesSecret.Reveal(),
		LagLimit:        opt.LagLimit,
		Clock:           a.Clock,
		Logger:          replLog,
	}); err != nil {
		return err
	}
	// Replication follows commits instead of polling the WAL.
	a.DB.Writer.SetCommitHook(a.Replicator.Committed)
	return nil
}

// openServices builds the key ring, the converge executor (unless
// opt.Executor is given), the workers and the server over them, and pauses
// the loops opt.PauseLoops names.
func (a *App) openServices(ctx context.Context, opt Options) error {
	cfg, log := a.Config, a.Log
	a.Keys = ingest.NewKeyring(a.DB, a.Sealer, a.Clock)
	tokens := ingest.NewProviderTokens(a.DB, a.Sealer, a.Clock)
	// The reaper's and costs' modes and deprecated variables, every start
	// (docs/operations.md, "Configuration").
	for _, w := range append(cfg.ModeNotes(), cfg.Warnings...) {
		log.Warn().Msg(w)
	}
	if off := cfg.UnlimitedQuotas(); len(off) > 0 {
		log.Warn().Strs("unlimited", off).Msg("ingest quotas set to 0 (unlimited): for benchmarks only; one leaked key can then fill the disk (docs/operations.md, \"Quotas\")")
	}
	exec := opt.Executor
	if exec == nil && cfg.Converge.token() != "" {
		// The provision token reaches the executor alone
		// (docs/operations.md, "Converge").
		var err error
		if exec, err = newConvergeExecutor(cfg, a.DB, a.Keys, a.Sealer, a.Clock, log); err != nil {
			return err
		}
		// Every job would fail without the provider plugin: say so now,
		// not at the first up (docs/operations.md, "Converge").
		if err := pulumiexec.CheckPlugin(cfg.Converge.PulumiHome); err != nil {
			log.Warn().Msg("converge is configured but " + err.Error())
		}
	}
	deps := serverDeps{Config: cfg, DB: a.DB, Replicator: a.Replicator, Keys: a.Keys, ProviderTokens: tokens, Sealer: a.Sealer, Log: log, Clock: a.Clock,
		Executor: exec, Statfs: opt.Statfs}
	w, err := buildWorkers(ctx, deps)
	if err != nil {
		return err
	}
	if a.Server, err = newServer(deps, w); err != nil {
		return err
	}
	for _, name := range opt.PauseLoops {
		if _, _, err := a.Server.switches.set(ctx, name, true, "serve --pause-loops"); err != nil {
			return fmt.Errorf("pause loop %s: %w", name, err)
		}
	}
	return nil
}

// StartLoops starts every registered background loop (loops.go) under the
// supervisor; Close stops them. Calling it twice, or on an Offline App,
// does nothing. Errors: a loop's metrics could not be registered.
func (a *App) StartLoops(ctx context.Context) error {
	if a.sup != nil || a.Server == nil {
		return nil
	}
	loops, err := registeredLoops(LoopDeps{DB: a.DB, Clock: a.Clock, Log: a.Log, Metrics: a.Server.m.reg,
		NonceActivity: a.Server.ingest.NonceActivity(), NonceLedger: a.Server.ingest.NonceLedger(), QuotaEvents: a.Server.ingest.QuotaEvents(),
		Ingest:    a.Server.ingest,
		Retention: a.Server.retention, Costs: a.Server.costs, Reaper: a.Server.reaper,
		Jobs: a.Server.jobRunner, JobWatch: a.Server.jobWatch, Switches: a.Server.switches, LogRetention: a.Server.logRetention(),
		Disk: a.Server.disk, Alerter: a.Server.alerter, Digest: a.Server.digest, Tokens: a.Server.tokens,
		StorageAlerts: a.Server.storageAlerts, Replication: a.Replicator})
	if err != nil {
		return err
	}
	a.sup = startSupervisor(ctx, a.Log, a.Clock, loops)
	return nil
}

// Close shuts the App down in order: stop the background loops, write the
// last hour's request statistics (docs/operations.md, "Operations report"),
// close the database's pools (the writer drains first), then close replication, which
// performs the final sync (bounded by finalSyncTimeout), and release the
// data dir lock. The HTTP server must have stopped serving before (Run
// drains it first). Close always completes; it logs what fails. Errors: a
// *storage.FinalSyncError (storage.ErrReplicaBehind) when the replica lacks
// acknowledged commits after the final sync (docs/operations.md, "Exit
// codes"); nothing else is returned.
func (a *App) Close(ctx context.Context) error {
	var err error
	if a.sup != nil {
		a.sup.stop()
		a.sup = nil
	}
	if a.Server != nil && a.Server.rollouts != nil {
		// Agent upgrades in progress are cut while the writer still
		// runs, so each records where it stopped.
		a.Server.rollouts.Close()
	}
	if a.Server != nil && a.DB != nil {
		a.Server.stats.flush() // the last hour's request statistics, while the writer still runs
	}
	if a.DB != nil {
		if err := a.DB.Close(); err != nil {
			a.Log.Error().Err(err).Msg("close database")
		}
		a.DB = nil
	}
	if a.Replicator != nil {
		sctx, cancel := context.WithTimeout(ctx, finalSyncTimeout)
		cerr := a.Replicator.Close(sctx)
		switch {
		case errors.Is(cerr, storage.ErrReplicaBehind):
			err = cerr
		case cerr != nil:
			a.Log.Error().Err(cerr).Msg("final replica sync")
		default:
			a.Log.Info().Msg("replication closed after final sync")
		}
		cancel()
		a.Replicator = nil
	}
	if a.lock != nil {
		a.lock.Release()
		a.lock = nil
	}
	return err
}

// replicaCheckTimeout bounds the start-up look at the replica of a new
// database: a replica that does not answer is checked again before the
// first upload (storage.ReplicaConfig.Fresh).
const replicaCheckTimeout = 15 * time.Second

// checkReplicaUnused refuses to create a database whose replica already
// holds a history (ErrReplicaForeign with the cure). A replica that cannot
// be listed now is left to the replicator, which refuses it before
// writing anything.
func (a *App) checkReplicaUnused(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, replicaCheckTimeout)
	defer cancel()
	err := storage.CheckReplicaUnused(cctx, a.Config.Replica.URL, a.Config.Replica.SpacesKey.Reveal(), a.Config.Replica.SpacesSecret.Reveal())
	switch {
	case errors.Is(err, storage.ErrReplicaForeign):
		return fmt.Errorf("CHALUPA_DATA_DIR holds no database, and CHALUPA_REPLICA_URL already holds a database's history: "+
			"a new database there would make two histories on one replica. To continue that history, `litestream restore` it "+
			"into %s and start serve again; to start a new database, point CHALUPA_REPLICA_URL at a new, empty path (%w)",
			a.Config.DatabasePath(), err)
	case err != nil:
		a.Log.Warn().Str("error", err.Error()).Msg("replica not checked at start; it is checked again before the first upload")
	}
	return nil
}

// replicaEventRecorder returns the hook that records a replication event
// (replica-reseeded, replica-refused) in db as a platform lifecycle event.
// It runs on the replication goroutine, bounded; a failure (the database is
// closing) is logged.
func (a *App) replicaEventRecorder(db *storage.DB) func(storage.ReplicaEvent) {
	log := a.Log
	return func(ev storage.ReplicaEvent) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := db.Writer.Do(ctx, func(tx storage.Tx) error {
			_, err := storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{
				ID: fmt.Sprintf("%s:%d", ev.Kind, ev.At.UnixMilli()), Kind: ev.Kind, Message: ev.Message, OccurredAt: ev.At,
			})
			return err
		})
		if err != nil {
			log.Warn().Str("kind", ev.Kind).Err(err).Msg("replication event not recorded")
		}
	}
}

// dropAWSCABundle unsets AWS_CA_BUNDLE for this process when the replica is
// s3:// and reports whether it did. Litestream's S3 client cannot load a
// custom CA bundle ("unable to add custom RootCAs HTTPClient",
// benbjohnson/litestream#639): with it set, every replication attempt fails. Spaces uses a public CA.
func (c *Config) dropAWSCABundle() bool {
	if c.ReplicaKind() != "s3" || os.Getenv("AWS_CA_BUNDLE") == "" {
		return false
	}
	_ = os.Unsetenv("AWS_CA_BUNDLE")
	return true
}
