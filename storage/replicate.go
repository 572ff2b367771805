package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/smithy-go"
	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/benbjohnson/litestream/s3"
	"github.com/jonboulle/clockwork"
	"github.com/superfly/ltx"

	"github.com/chalupa-run/chalupa/internal/buildinfo"
)

// Replication defaults (docs/operations.md, "Replication"). Litestream's
// library API is documented as unstable; go.mod pins v0.5.18 and these values
// are chosen against that version. chalupa drives Litestream itself: its WAL
// monitor and replica ticker are off, and one goroutine syncs after commits.
const (
	// DefaultSyncGap is the least time between two syncs while commits keep
	// arriving: a lone commit is synced at once, a burst costs one sync per
	// gap (at most 10 a second), which keeps LTX files and replica requests
	// few on a one-vCPU droplet while a commit reaches the replica within
	// about this long plus the upload.
	DefaultSyncGap = 100 * time.Millisecond
	// DefaultIdleCheckInterval is how often an idle daemon checks that the
	// replica still answers (one cheap listing), and runs compaction and
	// retention: the only timer of replication while nothing is written, so
	// an outage of an idle replica is noticed within about this long.
	DefaultIdleCheckInterval = time.Minute
	// DefaultMarkerCheckInterval is how often, while commits flow, the
	// replica is listed for this database's identity marker (syncs only
	// upload and never list, so without it a replica deleted under a
	// steady stream of writes would look healthy, lag 0, until the next
	// idle check). Ten seconds notices the loss within 10 s plus one sync
	// gap, and costs at most one listing each 10 s, 8,640 a day of
	// continuous writes (Spaces bills listings per thousand); an idle
	// daemon lists only at its idle check, so "Quiet when idle" holds
	// (docs/operations.md, "Replication").
	DefaultMarkerCheckInterval = 10 * time.Second
	// DefaultLagLimit is how long replication may be behind (or failing)
	// before readiness reports unavailable. Two minutes rides out a Spaces
	// blip and the retry back-off without paging, yet turns /api/ready red
	// long before an hour of writes is at risk.
	DefaultLagLimit = 2 * time.Minute
	// DefaultShutdownSyncTimeout bounds the final sync on shutdown, so a
	// replica that is down cannot hold the process past systemd's stop timeout.
	DefaultShutdownSyncTimeout = 20 * time.Second
	// retryBackoffMin and retryBackoffMax bound the pause after a failed
	// sync: it doubles from the first to the second. New commits do not cut
	// it short (a dead replica is not hammered), and the cap keeps the
	// reported lag close to the real outage once the replica returns.
	retryBackoffMin = 500 * time.Millisecond
	retryBackoffMax = 10 * time.Second
	// l0RetentionInterval is how often, while awake, L0 files already
	// compacted into L1 are removed locally and remotely (Litestream's own
	// default cadence).
	l0RetentionInterval = 15 * time.Second
	// l0RetentionWindow is how long after the last upload L0 retention keeps
	// running: Litestream's L0 retention (5 min) plus the L1 interval, with
	// room to spare; after it there is nothing left to retire.
	l0RetentionWindow = 10 * time.Minute
	// lagMarkerResolution is how close together two commit-time markers may
	// be: lag is exact to this much, and an hour of outage at any write rate
	// keeps at most 36,000 markers.
	lagMarkerResolution = 100 * time.Millisecond
	// maxLagMarkers caps the markers kept during a very long outage; beyond
	// it new commits reuse the last (older) marker, so lag may be overstated
	// after a partial catch-up but never understated.
	maxLagMarkers = 100_000
	// quietWALMax is the largest WAL an idle check leaves alone. Litestream
	// writes one frame to the WAL right after every checkpoint it runs
	// (~4 KiB with 4 KiB pages), so "truncate whenever it is not empty"
	// checkpointed, wrote a local LTX file and fsynced a dozen times at
	// every idle check, for ever: ~100 of an idle daemon's ~120-200
	// context switches a minute. 64 KiB is a handful of pages, nothing to
	// keep, yet far above that one frame.
	quietWALMax = 64 << 10
	// checkpointPages is the WAL size, in pages, at which a sync runs
	// Litestream's PASSIVE checkpoint (its MinCheckpointPageN; Litestream's
	// default is 1,000, ~4 MiB). Each checkpoint copies every distinct page
	// of the WAL into the database and fsyncs it, and Litestream brackets it
	// with two extra syncs and holds the write lock while it seals the WAL.
	// At 1,000 heartbeats/s the WAL filled 1,000 pages three times a
	// second; at 4,000 (16 MiB) the same heartbeats share hot pages across
	// four times the window: a quarter of the checkpoints and half the
	// pages copied per heartbeat (1.36 -> 0.67 in a page count of 30,000
	// heartbeats in batches of 5). SQLite's own wal_autocheckpoint (10,000
	// pages, WALAutocheckpointPages) stays above it.
	checkpointPages = 4000
	// maxCommitStamps caps the per-commit times kept for the commit →
	// replica delay (SetReplicatedHook): 8 bytes each, so at most 512 KiB.
	// Healthy, a sync confirms a few dozen commits; only an outage of
	// minutes at full load fills it, and commits beyond it are measured
	// from the last stamp kept (earlier than theirs: overstated, never
	// understated).
	maxCommitStamps = 1 << 16
)

// compactionLevels are Litestream's levels: L0 (every sync's LTX file),
// L1 every 30 s and L2 every 5 min, plus daily snapshots.
var compactionLevels = litestream.CompactionLevels{
	{Level: 0},
	{Level: 1, Interval: 30 * time.Second},
	{Level: 2, Interval: 5 * time.Minute},
}

// ReplicaConfig says where and how to replicate.
type ReplicaConfig struct {
	// URL is s3://BUCKET/PATH?endpoint=…&region=… or file:///ABS/DIR.
	URL string
	// Generation, when set, is the database's replica generation
	// (ReplicaGeneration): replication goes to URL with it appended to the
	// path, a history of its own after a rollback (docs/operations.md,
	// "Rollback").
	Generation string
	// AccessKeyID and SecretAccessKey are the S3 (Spaces) credentials; they
	// override AWS_* and LITESTREAM_* variables. Unused for file://.
	AccessKeyID, SecretAccessKey string
	// LagLimit overrides DefaultLagLimit when non-zero.
	LagLimit time.Duration
	// SyncGap overrides DefaultSyncGap when non-zero.
	SyncGap time.Duration
	// IdleCheckInterval overrides DefaultIdleCheckInterval when non-zero.
	IdleCheckInterval time.Duration
	// MarkerCheckInterval overrides DefaultMarkerCheckInterval when
	// non-zero; the marker is checked at least once an idle check
	// whichever is shorter.
	MarkerCheckInterval time.Duration
	// Clock stamps commits and measures lag, back-off and idle checks; nil
	// means the real clock.
	Clock clockwork.Clock
	// Logger receives Litestream's own logs and chalupa's replication
	// events; nil discards them.
	Logger *slog.Logger
	// Identity is the database's identity (DatabaseIdentity): the replica's
	// marker must name it or the replica is refused (ErrReplicaForeign). ""
	// skips the marker (a schema without one); re-seeding still runs.
	Identity string
	// Fresh says this start created the database: a replica that already
	// holds a history is then another database's and is refused.
	Fresh bool
	// OnEvent, when set, hears replica-reseeded and replica-refused events
	// on the replication goroutine; it must return within seconds.
	OnEvent func(ReplicaEvent)
}

// ReplicationHealth is the replication state reported by /api/admin/status,
// /api/ready and /metrics. It never holds the replica URL or credentials.
type ReplicationHealth struct {
	// Kind is "s3" or "file".
	Kind string
	// Generation is the replica generation replicated to ("" for the
	// replica URL itself): after a rollback, restore from the replica URL
	// with "/<generation>" appended.
	Generation string
	// LocalTXID is the newest local Litestream transaction; RemoteTXID the
	// newest one chalupa saw confirmed in the replica.
	LocalTXID  uint64
	RemoteTXID uint64
	// LastSyncAt is when a sync with the replica last succeeded.
	LastSyncAt time.Time
	// LagSeconds is the age of the oldest acknowledged commit not yet
	// confirmed in the replica, 0 when the replica holds every commit.
	LagSeconds float64
	// LastError is the most recent replica error, redacted to its kind (no
	// URL, bucket, key or path), and LastErrorAt when it happened.
	LastError   string
	LastErrorAt time.Time
	// SyncErrors counts failed sync attempts since start.
	SyncErrors int64
	// FailingSince is when the current unbroken run of failed attempts
	// began; zero while the last attempt succeeded.
	FailingSince time.Time
	// Failing is true when LagSeconds, or an unbroken run of failed
	// attempts, exceeds the lag limit; readiness is 503 while it is.
	Failing bool
	// LagLimitSeconds is that limit.
	LagLimitSeconds float64
	// Refused is set while the replica path holds another database's
	// history: the reason and the cure. Nothing is written to the replica
	// then, and Failing is true.
	Refused string
	// Reseeds counts re-seedings since start: a replica that held no
	// restorable history got a fresh snapshot.
	Reseeds int64
}

// Replicator drives embedded Litestream for one database file: after every
// writer commit (Committed) it syncs the WAL into LTX files and uploads them,
// coalescing bursts; while idle it checks the replica once a minute. It keeps
// its own account of which commits the replica holds, so lag and failure
// are measured, not inferred from file ages.
type Replicator struct {
	db      *litestream.DB
	store   *litestream.Store
	replica *litestream.Replica
	// marker is the client of the identity marker's folder (nil without
	// an identity), identity the marker's name for this database.
	marker   litestream.ReplicaClient
	identity ltx.TXID
	fresh    bool
	onEvent  func(ReplicaEvent)
	kind     string
	// generation is ReplicaConfig.Generation, shown by Health.
	generation string
	lagLimit   time.Duration
	gap        time.Duration
	idle       time.Duration
	// markerEvery is the shorter of MarkerCheckInterval and idle: the
	// least time between two marker listings of the run loop.
	markerEvery time.Duration
	// presenceChecks counts the run loop's marker listings (tests read it).
	presenceChecks atomic.Int64
	clock          clockwork.Clock
	log            *slog.Logger

	notify chan struct{} // capacity 1: a pending "commits to sync"
	// changed (capacity 1) receives when a run of failed attempts begins
	// or ends and when a refusal begins or ends (Changed).
	changed chan struct{}
	// onReplicated, when set, hears the commit → replica delay of every
	// marker a sync confirmed (SetReplicatedHook).
	onReplicated atomic.Pointer[func(delay time.Duration)]
	cancel       context.CancelFunc
	done         chan struct{}
	closed       sync.Once

	mu      sync.Mutex
	seq     uint64   // commits recorded by Committed
	markers []marker // commit times of commits not yet in the replica
	// stamps are the times of the commits not yet in the replica, one per
	// commit from seq stampsFrom on, as offsets from epoch (monotonic
	// with the real clock), at most stampCap of them (maxCommitStamps);
	// commits past them have none and are measured from the last.
	stamps       []time.Duration
	stampsFrom   uint64
	stampCap     int
	epoch        time.Time
	lastSyncAt   time.Time
	lastErr      string
	lastErrAt    time.Time
	failingSince time.Time
	syncErrors   int64
	remoteTXID   uint64
	// confirmed is the last commit seq a sync put in the replica.
	confirmed uint64
	// verified is true once verify allowed this database to write the
	// replica; refused holds the refusal while it lasts; reseeds counts
	// re-seedings.
	verified     bool
	refused      string
	reseeds      int64
	uploads      uint64    // successful syncs that moved the replica forward
	lastUploadAt time.Time // the last of them
}

// marker says that commits from seq on happened at or after at.
type marker struct {
	seq uint64
	at  time.Time
}

// ErrBadReplicaURL is returned for a replica URL chalupa does not accept.
var ErrBadReplicaURL = errors.New("replica URL must be s3://bucket/path?endpoint=… or file:///absolute/path")

// ParseReplicaURL validates u and returns its kind ("s3" or "file"). The error
// never repeats the URL (it may carry credentials in its user info).
func ParseReplicaURL(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", ErrBadReplicaURL
	}
	switch p.Scheme {
	case "s3":
		if p.Host == "" {
			return "", fmt.Errorf("%w: bucket missing", ErrBadReplicaURL)
		}
		if p.User != nil {
			return "", fmt.Errorf("%w: credentials belong in CHALUPA_SPACES_KEY/SECRET, not the URL", ErrBadReplicaURL)
		}
		return "s3", nil
	case "file":
		if p.Host != "" || !filepath.IsAbs(p.Path) {
			return "", fmt.Errorf("%w: file replica needs an absolute path (file:///…)", ErrBadReplicaURL)
		}
		return "file", nil
	}
	return "", ErrBadReplicaURL
}

// ReplicaBucketPath returns the bucket and key path of an s3:// replica URL
// as Litestream reads it: a host may name the bucket alone
// (s3://bucket/path?endpoint=…) or the bucket and its endpoint
// (s3://bucket.nyc3.digitaloceanspaces.com/path, s3://bucket.host:9000/path).
// ok is false for any other URL. The log broker's configuration check
// compares its location against this (docs/operations.md, "Logs").
func ReplicaBucketPath(u string) (bucket, path string, ok bool) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "s3" || p.Host == "" {
		return "", "", false
	}
	bucket = p.Host
	if !strings.HasPrefix(p.Host, "arn:") {
		if b, _, _, _ := s3.ParseHost(p.Host); b != "" {
			bucket = b
		}
	}
	return bucket, p.Path, true
}

// newReplicaClient builds Litestream's client for the replica URL u (of
// kind) with cfg's credentials. Errors: ErrBadReplicaURL, naming the kind
// only (Litestream's parse errors can echo the URL).
func newReplicaClient(u, kind string, cfg ReplicaConfig) (litestream.ReplicaClient, error) {
	raw, err := litestream.NewReplicaClientFromURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %s replica URL not accepted", ErrBadReplicaURL, kind)
	}
	if c, ok := raw.(*s3.ReplicaClient); ok {
		if cfg.AccessKeyID != "" {
			c.AccessKeyID = cfg.AccessKeyID
			c.SecretAccessKey = cfg.SecretAccessKey
		}
		if c.Region == "" {
			// Spaces ignores the region in signing; a fixed value avoids
			// Litestream probing for one (a request that cannot succeed
			// against a custom endpoint).
			c.Region = "us-east-1"
		}
	}
	return raw, nil
}

// StartReplication opens Litestream on the database at path and starts the
// replication goroutine. It makes no network request: a replica that is down
// at start-up is retried in the background (health says failing) and the
// daemon serves from its local, durable database meanwhile. Call it after
// migrations and before serving; wire the writer's commit hook to
// Committed; Close it after the application's pools are closed (Close
// performs the final sync).
func StartReplication(ctx context.Context, path string, cfg ReplicaConfig) (*Replicator, error) {
	kind, err := ParseReplicaURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	target, err := ReplicaURLWithGeneration(cfg.URL, cfg.Generation)
	if err != nil {
		return nil, err
	}
	raw, err := newReplicaClient(target, kind, cfg)
	if err != nil {
		return nil, err
	}
	var marker litestream.ReplicaClient
	var identity ltx.TXID
	if cfg.Identity != "" {
		if identity, err = parseIdentity(cfg.Identity); err != nil {
			return nil, err
		}
		mu, err := markerURL(target)
		if err != nil {
			return nil, err
		}
		if marker, err = newReplicaClient(mu, kind, cfg); err != nil {
			return nil, err
		}
	}

	db := litestream.NewDB(path)
	// Driven by the host: no WAL monitor, no replica ticker (both woke
	// several times a second whether or not anything was written).
	db.MonitorInterval = 0
	db.MinCheckpointPageN = checkpointPages
	r := litestream.NewReplicaWithClient(db, raw)
	r.MonitorEnabled = false
	if fc, ok := raw.(*file.ReplicaClient); ok {
		fc.Replica = r
		if err := mkdirPrivate(fc.Path()); err != nil {
			return nil, fmt.Errorf("create file replica dir: %w", err)
		}
	}
	db.Replica = r

	store := litestream.NewStore([]*litestream.DB{db}, compactionLevels)
	store.Logger = logger
	db.SetLogger(logger)
	// Close runs the final sync itself (bounded, counting what the replica
	// lacks); Litestream's own shutdown sync is then one attempt.
	store.SetShutdownSyncTimeout(0)
	// Compaction, snapshots and L0 retention run from the replication
	// goroutine when it is awake anyway, not on their own tickers.
	store.CompactionMonitorEnabled = false
	store.L0RetentionCheckInterval = 0
	if err := store.Open(ctx); err != nil {
		return nil, fmt.Errorf("start replication: %s", redactReplicaError(err))
	}
	clock := cfg.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	rep := &Replicator{
		db: db, store: store, replica: r, kind: kind, generation: cfg.Generation, clock: clock, log: logger,
		marker: marker, identity: identity, fresh: cfg.Fresh, onEvent: cfg.OnEvent,
		lagLimit: DefaultLagLimit, gap: DefaultSyncGap, idle: DefaultIdleCheckInterval,
		notify: make(chan struct{}, 1), changed: make(chan struct{}, 1), done: make(chan struct{}),
		stampsFrom: 1, stampCap: maxCommitStamps, epoch: clock.Now(),
	}
	if cfg.LagLimit > 0 {
		rep.lagLimit = cfg.LagLimit
	}
	if cfg.SyncGap > 0 {
		rep.gap = cfg.SyncGap
	}
	if cfg.IdleCheckInterval > 0 {
		rep.idle = cfg.IdleCheckInterval
	}
	rep.markerEvery = DefaultMarkerCheckInterval
	if cfg.MarkerCheckInterval > 0 {
		rep.markerEvery = cfg.MarkerCheckInterval
	}
	rep.markerEvery = min(rep.markerEvery, rep.idle)
	// Migrations (and anything before the hook was wired) committed
	// without Committed: count them as one commit to replicate now.
	rep.Committed()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rep.cancel = cancel
	go rep.run(runCtx)
	return rep, nil
}

// Committed records one committed write transaction and wakes the
// replication goroutine. It is the writer's commit hook: quick, never
// blocking.
func (r *Replicator) Committed() {
	now := r.clock.Now()
	r.mu.Lock()
	r.seq++
	if n := len(r.markers); n == 0 || (n < maxLagMarkers && now.Sub(r.markers[n-1].at) >= lagMarkerResolution) {
		r.markers = append(r.markers, marker{seq: r.seq, at: now})
	}
	// Stamps stay one per commit, in order: after the cap was reached, none
	// is added until a sync has confirmed every commit.
	if len(r.stamps) == 0 {
		r.stampsFrom = r.seq
	}
	if len(r.stamps) < r.stampCap && r.stampsFrom+uint64(len(r.stamps)) == r.seq {
		r.stamps = append(r.stamps, now.Sub(r.epoch))
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// run is the replication goroutine: sync now, then wait for commits (at
// least the sync gap after the last sync), a retry after a failure, or the
// idle check.
func (r *Replicator) run(ctx context.Context) {
	defer close(r.done)
	var backoff time.Duration
	housekeeping := newHousekeeping(r.clock.Now(), r.store.SnapshotLevel())
	// The marker is checked at most once a marker interval (10 s), also
	// under a steady stream of commits (syncs never list the replica): an
	// emptied replica is noticed, and re-seeded, within about that long.
	// Idle, the loop wakes only at the idle check, and lists no more.
	var presenceDue time.Time
	for {
		started := r.clock.Now()
		pending := r.drainNotify()
		var err error
		if !started.Before(presenceDue) && r.isVerified() {
			presenceDue = started.Add(r.markerEvery)
			var present bool
			if present, err = r.markerPresent(ctx); err == nil && !present {
				r.log.Warn("replica marker missing: the replica was emptied or replaced; verifying it again")
				r.mu.Lock()
				r.verified = false
				r.mu.Unlock()
			}
		}
		if err == nil && !r.isVerified() {
			err = r.verify(ctx)
			presenceDue = r.clock.Now().Add(r.markerEvery)
		}
		switch {
		case errors.Is(err, ErrReplicaForeign):
			// Refused: nothing is synced; look again at the next idle check.
		case err != nil:
			r.failed(ctx, err)
		case pending:
			err = r.syncOnce(ctx)
		default:
			err = r.checkRemote(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = 0
			// Housekeeping talks to the replica too: a failure there is a
			// failed attempt like a sync's (counted, failing shown, backed
			// off), so an outage that begins under it is not hidden.
			if err = housekeeping.run(ctx, r); err != nil {
				r.failed(ctx, err)
			} else if !pending {
				r.truncateQuietWAL(ctx)
			}
		}
		if err != nil {
			backoff = nextRetry(backoff)
		}
		if ctx.Err() != nil {
			return
		}

		var wake <-chan struct{} = r.notify
		wait := r.idle
		if errors.Is(err, ErrReplicaForeign) {
			wake, backoff = nil, 0
		} else if backoff > 0 {
			wake, wait = nil, backoff // a dead replica is not hammered by commits
		}
		t := r.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
			if backoff > 0 {
				r.markPending() // retry what failed
			}
		case <-wake:
			t.Stop()
			r.markPending()
			// Coalesce a burst: at most one sync per gap.
			if d := r.gap - r.clock.Since(started); d > 0 {
				g := r.clock.NewTimer(d)
				select {
				case <-ctx.Done():
					g.Stop()
					return
				case <-g.Chan():
				}
			}
		}
	}
}

// drainNotify takes a pending signal, if any, and reports whether a sync is
// owed: a signal, or commits recorded and not yet replicated.
func (r *Replicator) drainNotify() bool {
	select {
	case <-r.notify:
		return true
	default:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.markers) > 0
}

// markPending leaves a signal so the next round syncs.
func (r *Replicator) markPending() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// nextRetry doubles the pause after a failed sync within its bounds.
func nextRetry(prev time.Duration) time.Duration {
	if prev == 0 {
		return retryBackoffMin
	}
	return min(2*prev, retryBackoffMax)
}

// syncOnce syncs the WAL into LTX files and uploads them, then records the
// outcome: every commit recorded before it started is in the replica when
// it succeeds.
func (r *Replicator) syncOnce(ctx context.Context) error {
	r.mu.Lock()
	upTo := r.seq
	r.mu.Unlock()
	err := r.db.Sync(ctx)
	if err == nil {
		err = r.replica.Sync(ctx)
	}
	if err != nil {
		r.failed(ctx, err)
		return err
	}
	r.succeeded(upTo, uint64(r.replica.Pos().TXID))
	return nil
}

// checkRemote is the idle health check: one listing of the replica's L0
// files (a cheap request), so an outage of an idle replica is noticed.
func (r *Replicator) checkRemote(ctx context.Context) error {
	it, err := r.replica.Client.LTXFiles(ctx, 0, 0, false)
	if err == nil {
		err = it.Close()
	}
	if err != nil {
		r.failed(ctx, err)
		return err
	}
	r.mu.Lock()
	upTo := r.seq
	r.mu.Unlock()
	r.succeeded(upTo, uint64(r.replica.Pos().TXID))
	return nil
}

// ErrReplicaListing is returned by Inventory when listing the replica
// failed; the error's text adds the failure's kind only (timeout, s3 error
// code, …), never an endpoint, bucket or path.
var ErrReplicaListing = errors.New("listing the replica failed")

// ReplicaInventory is what the replica's current generation holds: its LTX
// objects at the levels this daemon writes, and their bytes.
type ReplicaInventory struct {
	Objects, Bytes int64
	// Truncated is true when the listing stopped at its cap: Objects and
	// Bytes are then lower bounds.
	Truncated bool
}

// Inventory lists the replica's LTX files at L0, L1, L2 and the snapshot
// level (docs/operations.md, "Operations report"): one listing per level,
// paged by the replica (an S3 LIST returns at most 1,000 objects), stopping
// once limit objects are counted (limit > 0). It runs beside replication
// and changes nothing. Errors: ErrReplicaListing, with the failure's kind.
func (r *Replicator) Inventory(ctx context.Context, limit int) (ReplicaInventory, error) {
	var inv ReplicaInventory
	levels := []int{litestream.SnapshotLevel}
	for _, l := range compactionLevels {
		levels = append(levels, l.Level)
	}
	for _, level := range levels {
		it, err := r.replica.Client.LTXFiles(ctx, level, 0, false)
		if err != nil {
			return ReplicaInventory{}, fmt.Errorf("%w: %s", ErrReplicaListing, redactReplicaError(err))
		}
		for it.Next() {
			if inv.Objects >= int64(limit) {
				inv.Truncated = true
				break
			}
			inv.Objects++
			inv.Bytes += it.Item().Size
		}
		err = it.Err()
		if cerr := it.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return ReplicaInventory{}, fmt.Errorf("%w: %s", ErrReplicaListing, redactReplicaError(err))
		}
		if inv.Truncated {
			break
		}
	}
	return inv, nil
}

// truncateQuietWAL shrinks the WAL file back to (nearly) zero at an idle
// check: after a write storm the WAL keeps its size (SQLite reuses it), and
// Litestream's own TRUNCATE checkpoint waits for ~500 MB. Idle means nothing
// was committed since the last check, so the brief lock a TRUNCATE takes
// costs no one. A WAL of at most quietWALMax is left as it is. A failure (a
// long reader holding the WAL) is retried at the next idle check.
func (r *Replicator) truncateQuietWAL(ctx context.Context) {
	fi, err := os.Stat(r.db.WALPath())
	if err != nil || fi.Size() <= quietWALMax {
		return
	}
	if err := r.db.Checkpoint(ctx, litestream.CheckpointModeTruncate); err != nil && ctx.Err() == nil {
		r.log.Debug("idle WAL truncation deferred", "error", redactReplicaError(err))
	}
}

// Changed receives (coalesced, never blocking replication) when a run of
// failed attempts begins or ends and when a refusal (ErrReplicaForeign)
// begins or ends: the replica detector waits on it instead of polling
// while replication works (docs/operations.md, "Alerts"). Lag that passes
// the limit without a failed attempt sends nothing: read Health then.
func (r *Replicator) Changed() <-chan struct{} { return r.changed }

// signalChanged leaves a signal on changed, never blocking.
func (r *Replicator) signalChanged() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// SetReplicatedHook makes the replicator report, after each successful sync,
// how long each commit it confirmed waited: one call per writer COMMIT,
// from the commit hook (Committed, right after the COMMIT) to the end of
// the sync that put it in the replica. Beyond maxCommitStamps commits
// waiting at once (a long outage), the later ones are measured from the
// last commit time kept: overstated, never understated. fn runs on the
// replication goroutine and must be quick; nil removes it.
func (r *Replicator) SetReplicatedHook(fn func(delay time.Duration)) {
	if fn == nil {
		r.onReplicated.Store(nil)
		return
	}
	r.onReplicated.Store(&fn)
}

// succeeded records a successful sync covering commits up to upTo.
func (r *Replicator) succeeded(upTo, remote uint64) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failingSince != (time.Time{}) {
		r.log.Info("replica sync recovered", "failed_for", now.Sub(r.failingSince).Round(time.Second).String())
		r.signalChanged()
	}
	r.lastSyncAt, r.failingSince = now, time.Time{}
	r.confirmed = max(r.confirmed, upTo)
	if remote > r.remoteTXID {
		r.uploads++
		r.lastUploadAt = now
		r.remoteTXID = remote
	}
	// Drop the markers of replicated commits. When commits after upTo share
	// the last dropped marker's span, that marker stays for them (its time
	// is no later than theirs: lag is never understated).
	r.confirmStamps(upTo, now)
	i := 0
	for i < len(r.markers) && r.markers[i].seq <= upTo {
		i++
	}
	if i > 0 && r.seq > upTo && (i == len(r.markers) || r.markers[i].seq > upTo+1) {
		i--
		r.markers[i].seq = upTo + 1
	}
	r.markers = slices.Delete(r.markers, 0, i)
}

// confirmStamps reports (SetReplicatedHook) and drops the commit times of
// the commits up to upTo, confirmed in the replica at now. Called with mu
// held.
func (r *Replicator) confirmStamps(upTo uint64, now time.Time) {
	if upTo < r.stampsFrom || len(r.stamps) == 0 {
		return
	}
	n := upTo - r.stampsFrom + 1 // commits confirmed, some maybe past the cap
	at := now.Sub(r.epoch)
	if hook := r.onReplicated.Load(); hook != nil {
		for k := uint64(0); k < n; k++ {
			(*hook)(at - r.stamps[min(k, uint64(len(r.stamps)-1))])
		}
	}
	switch {
	case n < uint64(len(r.stamps)):
		r.stamps = slices.Delete(r.stamps, 0, int(n))
	case r.seq > upTo:
		// The commits after upTo came past the cap, unstamped: they keep
		// the last stamp until a sync confirms them all.
		r.stamps = append(r.stamps[:0], r.stamps[len(r.stamps)-1])
	default:
		r.stamps = r.stamps[:0]
	}
	r.stampsFrom = upTo + 1
}

// failed records a failed attempt (not one cut short by shutdown).
func (r *Replicator) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	now := r.clock.Now()
	kind := redactReplicaError(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failingSince.IsZero() {
		r.failingSince = now
		r.log.Warn("replica sync failed; retrying with back-off", "error", kind)
		r.signalChanged()
	}
	r.lastErr, r.lastErrAt = kind, now
	r.syncErrors++
}

// housekeeping runs Litestream's compaction, snapshots and L0 retention
// when due, from the replication goroutine (instead of their own tickers),
// and only when there is something for them: a level is compacted when new
// LTX files were uploaded since it last ran, and L0 retention runs while
// uploaded L0 files may still be waiting to be retired. A long-idle daemon
// therefore does none of it: its idle check is one listing of the replica.
type housekeeping struct {
	levels []*litestream.CompactionLevel // L1, L2 and the snapshot level
	due    map[int]time.Time
	seen   map[int]uint64 // Replicator.uploads when the level last ran
	l0Due  time.Time
	l0Seen uint64
}

func newHousekeeping(now time.Time, snapshot *litestream.CompactionLevel) *housekeeping {
	h := &housekeeping{
		levels: append(slices.Clone([]*litestream.CompactionLevel(compactionLevels[1:])), snapshot),
		due:    map[int]time.Time{}, seen: map[int]uint64{}, l0Due: now.Add(l0RetentionInterval),
	}
	for _, lvl := range compactionLevels[1:] {
		h.due[lvl.Level] = lvl.NextCompactionAt(now)
	}
	h.due[litestream.SnapshotLevel] = now // a first snapshot soon after start
	return h
}

// run does whatever is due. It stops at the first failure to reach the
// replica and returns it (its kind logged with the step), so an outage that
// begins under it costs one operation's retries, not every due level's; a
// step that failed stays due for the next round. Litestream's "nothing to
// compact yet" answers are no failure.
func (h *housekeeping) run(ctx context.Context, r *Replicator) error {
	now := r.clock.Now()
	r.mu.Lock()
	uploads, lastUpload := r.uploads, r.lastUploadAt
	r.mu.Unlock()
	for _, lvl := range h.levels {
		if now.Before(h.due[lvl.Level]) || uploads == h.seen[lvl.Level] {
			continue
		}
		_, err := r.store.CompactDB(ctx, r.db, lvl)
		if err != nil && !errors.Is(err, litestream.ErrNoCompaction) && !errors.Is(err, litestream.ErrCompactionTooEarly) &&
			!errors.Is(err, litestream.ErrDBNotReady) {
			if ctx.Err() == nil {
				r.log.Warn("compaction failed", "level", lvl.Level, "error", redactReplicaError(err))
			}
			return err
		}
		h.due[lvl.Level] = lvl.NextCompactionAt(now)
		h.seen[lvl.Level] = uploads
		if lvl.Level == litestream.SnapshotLevel {
			if err := r.store.EnforceSnapshotRetention(ctx, r.db); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("snapshot retention failed", "error", redactReplicaError(err))
				}
				return err
			}
		}
	}
	// L0 files are retired L0Retention after L1 holds them: keep checking
	// for a while after the last upload, then stop.
	if !now.Before(h.l0Due) && (uploads != h.l0Seen || now.Sub(lastUpload) < l0RetentionWindow) {
		if err := r.db.EnforceL0RetentionByTime(ctx); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("L0 retention failed", "error", redactReplicaError(err))
			}
			return err
		}
		h.l0Due, h.l0Seen = now.Add(l0RetentionInterval), uploads
	}
	return nil
}

// isVerified reports whether verify allowed writing the replica.
func (r *Replicator) isVerified() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verified
}

// SyncAndWait blocks until every committed transaction is in the replica.
// Errors: ErrReplicaForeign (nothing written), or the sync's failure kind.
func (r *Replicator) SyncAndWait(ctx context.Context) error {
	if !r.isVerified() {
		if err := r.verify(ctx); err != nil {
			if errors.Is(err, ErrReplicaForeign) {
				return err
			}
			return fmt.Errorf("verify replica: %s", redactReplicaError(err))
		}
	}
	if err := r.syncOnce(ctx); err != nil {
		return fmt.Errorf("sync replica: %s", redactReplicaError(err))
	}
	return nil
}

// Close stops the replication goroutine, then makes the final sync: it
// retries for up to DefaultShutdownSyncTimeout (or until ctx ends) until
// every acknowledged commit is confirmed in the replica, then closes
// Litestream. Close the application's database pools first: Litestream
// cannot finish while other connections hold the file. A replica that was
// refused (ErrReplicaForeign), or never verified, is not written.
// Errors: a *FinalSyncError (ErrReplicaBehind) saying how many
// acknowledged commits the replica lacks (docs/operations.md, "Start-up
// and shutdown"); otherwise Litestream's close error, redacted.
func (r *Replicator) Close(ctx context.Context) error {
	var err error
	r.closed.Do(func() {
		r.cancel()
		<-r.done
		ferr := r.finalSync(ctx)
		if ferr != nil {
			// Litestream's own final sync would write an unverified
			// replica, or only fail again.
			_ = r.replica.Stop(true)
			r.db.Replica = nil
		}
		if cerr := r.store.Close(ctx); cerr != nil && ferr == nil {
			err = fmt.Errorf("close replication: %s", redactReplicaError(cerr))
		}
		if ferr != nil {
			err = ferr
		}
	})
	return err
}

// finalSync is Close's last sync: verify the replica if that never
// succeeded, then sync until every commit recorded by Committed is
// confirmed, retrying after a pause (real time: shutdown does not follow
// the injected clock) within DefaultShutdownSyncTimeout. A database
// Litestream never got to initialise (the replica was down since start) is
// initialised here, so its acknowledged writes are uploaded if the replica
// is back.
func (r *Replicator) finalSync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultShutdownSyncTimeout)
	defer cancel()
	var last error
	pause := retryBackoffMin
	for {
		last = nil
		if !r.isVerified() {
			last = r.verify(ctx)
		}
		if last == nil {
			if last = r.db.Sync(ctx); last == nil {
				if last = r.replica.Sync(ctx); last == nil {
					r.mu.Lock()
					upTo := r.seq
					r.mu.Unlock()
					r.succeeded(upTo, uint64(r.replica.Pos().TXID))
					return nil
				}
			}
		}
		if errors.Is(last, ErrReplicaForeign) {
			break
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
			pause = nextRetry(pause)
			continue
		}
		break
	}
	e := &FinalSyncError{Cause: redactReplicaError(last)}
	if errors.Is(last, ErrReplicaForeign) {
		e.Cause = r.Health(r.clock.Now()).Refused
	}
	if local, err := r.db.Pos(); err == nil {
		e.LocalTXID = uint64(local.TXID)
	}
	r.mu.Lock()
	e.Missing, e.RemoteTXID = r.seq-r.confirmed, r.remoteTXID
	r.mu.Unlock()
	if e.Missing == 0 && !errors.Is(last, ErrReplicaForeign) {
		// Every acknowledged commit was confirmed before; only the
		// last check failed.
		r.log.Warn("final replica sync failed after every commit was confirmed", "error", e.Cause)
		return nil
	}
	return e
}

// Health reports the replication state without any network I/O.
func (r *Replicator) Health(now time.Time) ReplicationHealth {
	h := ReplicationHealth{Kind: r.kind, Generation: r.generation, LagLimitSeconds: r.lagLimit.Seconds()}
	if local, err := r.db.Pos(); err == nil {
		h.LocalTXID = uint64(local.TXID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h.RemoteTXID = r.remoteTXID
	h.LastSyncAt = r.lastSyncAt
	h.LastError, h.LastErrorAt, h.SyncErrors = r.lastErr, r.lastErrAt, r.syncErrors
	h.FailingSince = r.failingSince
	if len(r.markers) > 0 && now.After(r.markers[0].at) {
		h.LagSeconds = now.Sub(r.markers[0].at).Seconds()
	}
	h.Refused, h.Reseeds = r.refused, r.reseeds
	h.Failing = h.LagSeconds > r.lagLimit.Seconds() ||
		(!r.failingSince.IsZero() && now.Sub(r.failingSince) > r.lagLimit) || r.refused != ""
	if r.refused != "" {
		h.LastError = ErrReplicaForeign.Error()
	}
	return h
}

// redactReplicaError reduces a replica error to its kind. S3 and filesystem
// errors embed the endpoint URL, bucket, object keys and local paths; none of
// those may reach a status response or an error body.
func redactReplicaError(err error) string {
	var apiErr smithy.APIError
	var opErr *net.OpError
	var dnsErr *net.DNSError
	var errno syscall.Errno
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &apiErr):
		return "s3 error: " + apiErr.ErrorCode()
	case errors.As(err, &dnsErr):
		return "dns lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &opErr):
		return "network error: " + opErr.Op
	case errors.As(err, &errno):
		return "filesystem error: " + errno.Error()
	case strings.Contains(err.Error(), "custom RootCAs"):
		return "aws config: AWS_CA_BUNDLE could not be loaded"
	}
	return "replica error"
}

// LitestreamVersion is the embedded Litestream library version (pinned in
// go.mod), kept in the buildinfo leaf so `chalupa version` reads it without
// linking storage.
const LitestreamVersion = buildinfo.LitestreamVersion
