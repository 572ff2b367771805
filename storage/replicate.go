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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/smithy-go"
	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/benbjohnson/litestream/s3"
	"github.com/superfly/ltx"
)

// Replication defaults. Litestream's library API is documented as unstable;
// go.mod pins v0.5.18 and these values are chosen against that version.
const (
	// DefaultSyncInterval is how often the replica uploads new LTX files: an
	// acknowledged write reaches Spaces within about this long (plus upload
	// time), which bounds what a lost droplet can lose.
	DefaultSyncInterval = time.Second
	// DefaultLagLimit is how long replication may be behind (or failing)
	// before readiness reports unavailable. Two minutes rides out a Spaces
	// blip and Litestream's retry backoff without paging, yet turns /api/ready
	// red long before an hour of writes is at risk.
	DefaultLagLimit = 2 * time.Minute
	// DefaultMonitorInterval is how often Litestream copies new WAL frames
	// into LTX files and checkpoints. Litestream's 1 s default let the WAL
	// grow to ~7,000 pages at 1,000 heartbeats/s, and its checkpoint then
	// held the write lock 17–30 ms, setting the ingest p99; at 250 ms each
	// checkpoint is a quarter of the size (contrib/load, 2026-11-30). When
	// idle a tick is a stat of the WAL file.
	DefaultMonitorInterval = 250 * time.Millisecond
	// DefaultShutdownSyncTimeout bounds the final sync on shutdown, so a
	// replica that is down cannot hold the process past systemd's stop timeout.
	DefaultShutdownSyncTimeout = 20 * time.Second
)

// ReplicaConfig says where and how to replicate.
type ReplicaConfig struct {
	// URL is s3://BUCKET/PATH?endpoint=…&region=… or file:///ABS/DIR.
	URL string
	// AccessKeyID and SecretAccessKey are the S3 (Spaces) credentials; they
	// override AWS_* and LITESTREAM_* variables. Unused for file://.
	AccessKeyID, SecretAccessKey string
	// SyncInterval overrides DefaultSyncInterval when non-zero.
	SyncInterval time.Duration
	// LagLimit overrides DefaultLagLimit when non-zero.
	LagLimit time.Duration
	// Logger receives Litestream's own logs; nil discards them.
	Logger *slog.Logger
}

// ReplicationHealth is the replication state reported by /api/admin/status,
// /api/ready and /metrics. It never holds the replica URL or credentials.
type ReplicationHealth struct {
	// Kind is "s3" or "file".
	Kind string
	// LocalTXID and RemoteTXID are Litestream transaction ids: the newest
	// local LTX file and the newest one confirmed in the replica.
	LocalTXID  uint64
	RemoteTXID uint64
	// LastSyncAt is when an upload to the replica last succeeded.
	LastSyncAt time.Time
	// LagSeconds is the age of the oldest local change not yet in the
	// replica, 0 when the replica holds everything.
	LagSeconds float64
	// LastError is the most recent replica error, redacted to its kind (no
	// URL, bucket, key or path), and LastErrorAt when it happened.
	LastError   string
	LastErrorAt time.Time
	// SyncErrors counts replica operations that failed since start.
	SyncErrors int64
	// Failing is true when LagSeconds or an unbroken run of errors exceeds
	// the lag limit; readiness is 503 while it is.
	Failing bool
	// LagLimitSeconds is that limit.
	LagLimitSeconds float64
}

// Replicator runs embedded Litestream for one database file.
type Replicator struct {
	db       *litestream.DB
	store    *litestream.Store
	client   *observedClient
	kind     string
	lagLimit time.Duration
	closed   sync.Once
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

// StartReplication opens Litestream on the database at path and starts
// continuous replication to cfg.URL. Call it after migrations (so the first
// LTX file already holds the schema) and before serving. Close it after the
// application's pools are closed; Close performs the final sync.
func StartReplication(ctx context.Context, path string, cfg ReplicaConfig) (*Replicator, error) {
	kind, err := ParseReplicaURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	raw, err := litestream.NewReplicaClientFromURL(cfg.URL)
	if err != nil {
		// Litestream's parse errors can echo the URL; say only what kind failed.
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

	db := litestream.NewDB(path)
	db.MonitorInterval = DefaultMonitorInterval
	client := &observedClient{ReplicaClient: raw}
	r := litestream.NewReplicaWithClient(db, client)
	r.SyncInterval = DefaultSyncInterval
	if cfg.SyncInterval > 0 {
		r.SyncInterval = cfg.SyncInterval
	}
	if fc, ok := raw.(*file.ReplicaClient); ok {
		fc.Replica = r
		if err := mkdirPrivate(fc.Path()); err != nil {
			return nil, fmt.Errorf("create file replica dir: %w", err)
		}
	}
	db.Replica = r

	levels := litestream.CompactionLevels{
		{Level: 0},
		{Level: 1, Interval: 30 * time.Second},
		{Level: 2, Interval: 5 * time.Minute},
	}
	store := litestream.NewStore([]*litestream.DB{db}, levels)
	store.Logger = logger
	db.SetLogger(logger)
	store.SetShutdownSyncTimeout(DefaultShutdownSyncTimeout)
	if err := store.Open(ctx); err != nil {
		return nil, fmt.Errorf("start replication: %s", redactReplicaError(err))
	}
	// Litestream initialises a database on its first monitor tick (one
	// second after Open), and Close makes its final sync only for an
	// initialised database: a daemon stopped within its first second would
	// leave the writes it acknowledged out of the replica. Sync once now
	// (local only: WAL to LTX, no replica I/O).
	if err := db.Sync(ctx); err != nil {
		_ = store.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start replication: %s", redactReplicaError(err))
	}
	lag := DefaultLagLimit
	if cfg.LagLimit > 0 {
		lag = cfg.LagLimit
	}
	return &Replicator{db: db, store: store, client: client, kind: kind, lagLimit: lag}, nil
}

// SyncAndWait blocks until every committed transaction is in the replica.
func (r *Replicator) SyncAndWait(ctx context.Context) error {
	if err := r.db.SyncAndWait(ctx); err != nil {
		return fmt.Errorf("sync replica: %s", redactReplicaError(err))
	}
	return nil
}

// Close stops replication after a final sync (bounded by
// DefaultShutdownSyncTimeout). Close the application's database pools first:
// Litestream cannot finish while other connections hold the file.
func (r *Replicator) Close(ctx context.Context) error {
	var err error
	r.closed.Do(func() {
		if cerr := r.store.Close(ctx); cerr != nil {
			err = fmt.Errorf("close replication: %s", redactReplicaError(cerr))
		}
	})
	return err
}

// Health reports the replication state without any network I/O: the remote
// position is Litestream's in-memory record of its last confirmed upload.
func (r *Replicator) Health(now time.Time) ReplicationHealth {
	h := ReplicationHealth{Kind: r.kind, LagLimitSeconds: r.lagLimit.Seconds()}
	local, _ := r.db.Pos()
	remote := r.db.Replica.Pos()
	h.LocalTXID, h.RemoteTXID = uint64(local.TXID), uint64(remote.TXID)
	h.LastSyncAt = r.db.LastSuccessfulSyncAt()

	st := r.client.snapshot()
	h.LastError, h.LastErrorAt, h.SyncErrors = st.lastErr, st.lastErrAt, st.errors

	if local.TXID > remote.TXID {
		if oldest, ok := r.oldestUnreplicated(remote.TXID); ok && now.After(oldest) {
			h.LagSeconds = now.Sub(oldest).Seconds()
		}
	}
	failingSince := st.failingSince
	h.Failing = h.LagSeconds > r.lagLimit.Seconds() ||
		(!failingSince.IsZero() && now.Sub(failingSince) > r.lagLimit)
	return h
}

// oldestUnreplicated returns the modification time of the oldest local L0 LTX
// file holding a transaction after remote: the age of the oldest change the
// replica does not have yet.
func (r *Replicator) oldestUnreplicated(remote ltx.TXID) (time.Time, bool) {
	entries, err := os.ReadDir(r.db.LTXLevelDir(0))
	if err != nil {
		return time.Time{}, false
	}
	var oldest time.Time
	for _, e := range entries {
		_, maxTX, err := ltx.ParseFilename(e.Name())
		if err != nil || maxTX <= remote {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if oldest.IsZero() || fi.ModTime().Before(oldest) {
			oldest = fi.ModTime()
		}
	}
	return oldest, !oldest.IsZero()
}

// observedClient wraps the replica client to record the outcome of every
// remote operation, which Litestream's library does not expose.
type observedClient struct {
	litestream.ReplicaClient
	mu    sync.Mutex
	state clientState
}

type clientState struct {
	lastErr      string
	lastErrAt    time.Time
	failingSince time.Time
	errors       int64
}

func (c *observedClient) snapshot() clientState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *observedClient) observe(err error) {
	if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, context.Canceled) {
		if err == nil {
			c.mu.Lock()
			c.state.failingSince = time.Time{}
			c.mu.Unlock()
		}
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.lastErr = redactReplicaError(err)
	c.state.lastErrAt = now
	c.state.errors++
	if c.state.failingSince.IsZero() {
		c.state.failingSince = now
	}
}

// LTXFiles implements litestream.ReplicaClient.
func (c *observedClient) LTXFiles(ctx context.Context, level int, seek ltx.TXID, useMetadata bool) (ltx.FileIterator, error) {
	it, err := c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
	c.observe(err)
	return it, err
}

// WriteLTXFile implements litestream.ReplicaClient.
func (c *observedClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, rd io.Reader) (*ltx.FileInfo, error) {
	info, err := c.ReplicaClient.WriteLTXFile(ctx, level, minTXID, maxTXID, rd)
	c.observe(err)
	return info, err
}

// DeleteLTXFiles implements litestream.ReplicaClient.
func (c *observedClient) DeleteLTXFiles(ctx context.Context, a []*ltx.FileInfo) error {
	err := c.ReplicaClient.DeleteLTXFiles(ctx, a)
	c.observe(err)
	return err
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

// LitestreamVersion is the embedded Litestream library version (pinned in go.mod).
const LitestreamVersion = "v0.5.18"
