package storage

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"strconv"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// The replica's identity marker and re-seeding (docs/operations.md,
// "Replication"). A replica holds one database's history: the marker, an
// object beside the LTX files, names the database (its identity, stored in
// the database by migration 0022), so a replica path that holds another
// database's history is recognised and never written to.
const (
	// IdentityMarkerDir is the folder under the replica path (S3 key prefix
	// or file replica subdirectory) that holds the marker. Litestream lists
	// only its level folders (0000… on S3, ltx/ for file), so neither
	// replication nor `litestream restore` ever reads it.
	IdentityMarkerDir = "chalupa-identity"
	// markerPageSize is the page size of the marker's one-page LTX body:
	// the file replica reads an LTX header of every file it stores, so the
	// marker is a minimal valid LTX file; its name carries the identity.
	markerPageSize = 512
)

// Replica event kinds, recorded as platform lifecycle events by the daemon.
const (
	// ReplicaReseededKind: the replica held no restorable history (emptied,
	// a new bucket or path) and a fresh snapshot of the current database was
	// written to it.
	ReplicaReseededKind = "replica-reseeded"
	// ReplicaRefusedKind: the replica path holds another database's history;
	// nothing is written to it until the operator cures it.
	ReplicaRefusedKind = "replica-refused"
)

// Errors of replica verification.
var (
	// ErrReplicaForeign: the replica path holds another database's history
	// (its marker names another identity, or this database is new and the
	// path already holds a history). Nothing is written to it.
	ErrReplicaForeign = errors.New("the replica path holds another database's history")
	// ErrReplicaBehind is returned by Close when the final sync did not
	// confirm every acknowledged commit (FinalSyncError says how many).
	ErrReplicaBehind = errors.New("the replica lacks acknowledged commits")
)

// ReplicaForeignCure is what the operator does about ErrReplicaForeign
// (docs/operations.md, "Backup and restore").
const ReplicaForeignCure = "point CHALUPA_REPLICA_URL at a new, empty path; or, to continue that history, " +
	"stop serve, `litestream restore` it into an empty data dir and serve the restored file; " +
	"or empty the path if its history is not needed"

// ReplicaEvent is a replication event for the lifecycle log.
type ReplicaEvent struct {
	// Kind is ReplicaReseededKind or ReplicaRefusedKind.
	Kind string
	// Message is operator-facing text: kinds and transaction ids only, never
	// a URL, bucket, key or path.
	Message string
	// At is when it happened (the replicator's clock).
	At time.Time
}

// FinalSyncError is Close's error when the replica lacks acknowledged
// commits after the final sync. It wraps ErrReplicaBehind.
type FinalSyncError struct {
	// Missing counts the acknowledged commits of this run the replica has
	// not confirmed (commits of earlier runs that never reached it come on
	// top: LocalTXID and RemoteTXID tell).
	Missing uint64
	// LocalTXID and RemoteTXID are Litestream's local and last confirmed
	// remote transaction ids.
	LocalTXID, RemoteTXID uint64
	// Cause is the last failure's kind (redacted like every replica error).
	Cause string
}

// Error says how many acknowledged commits the replica lacks and why.
func (e *FinalSyncError) Error() string {
	return fmt.Sprintf("%s: %d acknowledged commits not confirmed in the replica (local txid %d, replica txid %d): %s",
		ErrReplicaBehind, e.Missing, e.LocalTXID, e.RemoteTXID, e.Cause)
}

// Unwrap returns ErrReplicaBehind.
func (e *FinalSyncError) Unwrap() error { return ErrReplicaBehind }

// DatabaseIdentity returns the database's identity (migration 0022), "" for
// a schema without it.
func DatabaseIdentity(ctx context.Context, q Querier) (string, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'chalupa_database_identity'`).Scan(&n); err != nil {
		return "", fmt.Errorf("read database identity: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	var id string
	if err := q.QueryRowContext(ctx, `SELECT id FROM chalupa_database_identity WHERE singleton = 1`).Scan(&id); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("read database identity: %w", err)
	}
	return id, nil
}

// parseIdentity turns an identity's 16 hex digits into the marker's
// transaction id (never zero).
func parseIdentity(id string) (ltx.TXID, error) {
	v, err := strconv.ParseUint(id, 16, 64)
	if err != nil || v == 0 || len(id) != 16 {
		return 0, errors.New("database identity is not 16 hex digits")
	}
	return ltx.TXID(v), nil
}

// markerURL is the replica URL target with IdentityMarkerDir appended.
func markerURL(target string) (string, error) {
	p, err := url.Parse(target)
	if err != nil {
		return "", ErrBadReplicaURL
	}
	p.Path = path.Join("/", p.Path, IdentityMarkerDir)
	p.RawPath = ""
	return p.String(), nil
}

// markerIDs lists the identities the replica's marker names (none when it
// has no marker).
func (r *Replicator) markerIDs(ctx context.Context) ([]ltx.TXID, error) {
	it, err := r.marker.LTXFiles(ctx, 0, 0, false)
	if err != nil {
		return nil, err
	}
	var ids []ltx.TXID
	for it.Next() {
		ids = append(ids, it.Item().MinTXID)
	}
	err = it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return ids, err
}

// writeMarker writes the marker naming this database.
func (r *Replicator) writeMarker(ctx context.Context) error {
	var buf bytes.Buffer
	enc, err := ltx.NewEncoder(&buf)
	if err != nil {
		return err
	}
	if err := enc.EncodeHeader(ltx.Header{Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: markerPageSize,
		Commit: 1, MinTXID: r.identity, MaxTXID: r.identity, Timestamp: r.clock.Now().UnixMilli()}); err != nil {
		return err
	}
	if err := enc.EncodePage(ltx.PageHeader{Pgno: 1}, make([]byte, markerPageSize)); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = r.marker.WriteLTXFile(ctx, 0, r.identity, r.identity, &buf)
	return err
}

// replicaBase reports whether the replica holds a history a restore can
// start from: a snapshot, or an LTX file at L2, L1 or L0 that begins at
// transaction 1; and whether it holds any LTX file at all.
func (r *Replicator) replicaBase(ctx context.Context) (base, any bool, err error) {
	return replicaBase(ctx, r.replica.Client)
}

// listingAttempts bounds how often replicaBase lists the replica again
// when a file vanished while it was being listed: the file replica client
// stats each entry after reading the directory, and compaction renames
// and removes files meanwhile, so a listing can fail with "no such file"
// although nothing is wrong. Three is ample: each retry is a fresh
// listing of a few directories.
const listingAttempts = 3

// replicaBase is Replicator.replicaBase over any replica client.
func replicaBase(ctx context.Context, client litestream.ReplicaClient) (base, any bool, err error) {
	for attempt := 1; ; attempt++ {
		base, any, err = replicaBaseOnce(ctx, client)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == listingAttempts {
			return base, any, err
		}
	}
}

// replicaBaseOnce is one listing of replicaBase.
func replicaBaseOnce(ctx context.Context, client litestream.ReplicaClient) (base, any bool, err error) {
	for _, level := range []int{litestream.SnapshotLevel, 2, 1, 0} {
		it, err := client.LTXFiles(ctx, level, 0, false)
		if err != nil {
			return false, false, err
		}
		for it.Next() {
			any = true
			if it.Item().MinTXID == 1 {
				base = true
				break
			}
		}
		err = it.Err()
		if cerr := it.Close(); err == nil {
			err = cerr
		}
		if err != nil || base {
			return base, any, err
		}
	}
	return false, any, nil
}

// verify decides whether this database may write the replica
// (docs/operations.md, "Replication"), before anything is uploaded and
// again whenever the marker goes missing:
//   - a marker naming another identity: refused (ErrReplicaForeign);
//   - no marker, a history in the replica, and a database created by this
//     start: refused (two histories on one replica);
//   - otherwise the marker is written (a replica written before markers
//     existed is adopted by the database that finds it), and a replica
//     with no history to restore from while the local database has one
//     (emptied, lost, a new path) is re-seeded with a fresh snapshot.
//
// Without an identity (ReplicaConfig.Identity "") only the re-seeding runs.
//
// Litestream compacts and trims LTX files, local and replica, while verify
// reads them: a file listed a moment ago can be gone when it is opened
// ("no such file or directory") although nothing is wrong. verify then
// starts over, at most verifyAttempts times; every step of it can run
// again (the marker write and a re-seed are idempotent).
func (r *Replicator) verify(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := r.verifyOnce(ctx)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == verifyAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// verifyAttempts bounds verify's fresh starts after a vanished file
// (each one a few listings and reads; a re-seed at most once succeeds).
const verifyAttempts = 3

// verifyOnce is one pass of verify.
func (r *Replicator) verifyOnce(ctx context.Context) error {
	if r.marker != nil {
		ids, err := r.markerIDs(ctx)
		if err != nil {
			return err
		}
		ours := false
		for _, id := range ids {
			if id != r.identity {
				return r.refuse(fmt.Sprintf("its marker names database %s, this database is %s", id, r.identity))
			}
			ours = true
		}
		if !ours {
			if _, any, err := r.replicaBase(ctx); err != nil {
				return err
			} else if any && r.isFresh() {
				return r.refuse("it holds a history and this database was created by this start")
			}
			if err := r.writeMarker(ctx); err != nil {
				return err
			}
		}
	}
	base, _, err := r.replicaBase(ctx)
	if err != nil {
		return err
	}
	local, err := r.db.Pos()
	if err != nil {
		return err
	}
	if !base && local.TXID > 0 {
		if err := r.reseed(ctx); err != nil {
			return err
		}
	}
	r.mu.Lock()
	// Claimed: a marker that goes missing later means the replica was
	// emptied or replaced, not that this database is new.
	lifted := r.refused != ""
	r.verified, r.refused, r.fresh = true, "", false
	r.mu.Unlock()
	if lifted {
		r.signalChanged()
	}
	return nil
}

// refuse records that the replica holds another database's history: no
// sync runs, health is failing with the cause, and one replica-refused
// event is raised per episode. It returns ErrReplicaForeign.
func (r *Replicator) refuse(why string) error {
	msg := fmt.Sprintf("%s (%s); nothing is written to it. Cure: %s", ErrReplicaForeign, why, ReplicaForeignCure)
	r.mu.Lock()
	first := r.refused == ""
	r.refused = msg
	r.mu.Unlock()
	if first {
		r.log.Error("replica refused", "reason", why)
		r.emit(ReplicaRefusedKind, msg)
		r.signalChanged()
	}
	return ErrReplicaForeign
}

// reseed writes a fresh snapshot of the current database to a replica that
// holds no restorable history (Litestream's own snapshot path, the daily
// snapshot's), then the newest local L0 file, and continues replication
// from there. Litestream alone would start uploading at transaction 1,
// which the local history no longer holds once L0 retention trimmed it.
func (r *Replicator) reseed(ctx context.Context) error {
	if err := r.db.Sync(ctx); err != nil {
		return err
	}
	info, err := r.db.Snapshot(ctx)
	if err != nil {
		return err
	}
	minTXID, maxTXID, err := r.db.MaxLTX()
	if err != nil {
		return err
	}
	if maxTXID != info.MaxTXID {
		return fmt.Errorf("re-seed: local position moved during the snapshot (%s → %s)", info.MaxTXID, maxTXID)
	}
	f, err := os.Open(r.db.LTXPath(0, minTXID, maxTXID))
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := r.replica.Client.WriteLTXFile(ctx, 0, minTXID, maxTXID, f); err != nil {
		return err
	}
	r.replica.SetPos(ltx.Pos{TXID: maxTXID})
	r.mu.Lock()
	r.reseeds++
	r.mu.Unlock()
	r.log.Warn("replica re-seeded with a fresh snapshot", "txid", uint64(maxTXID), "bytes", info.Size)
	r.emit(ReplicaReseededKind, fmt.Sprintf("the replica held no restorable history; re-seeded with a snapshot at txid %d (%d bytes)", uint64(maxTXID), info.Size))
	return nil
}

// emit hands an event to the OnEvent hook, if any.
func (r *Replicator) emit(kind, msg string) {
	if r.onEvent != nil {
		r.onEvent(ReplicaEvent{Kind: kind, Message: msg, At: r.clock.Now()})
	}
}

// markerPresent is the running check that the replica still holds this
// database's marker (one listing): false when it was emptied or replaced,
// and verify must run again.
func (r *Replicator) markerPresent(ctx context.Context) (bool, error) {
	r.presenceChecks.Add(1)
	if r.marker == nil {
		base, _, err := r.replicaBase(ctx)
		return base, err
	}
	ids, err := r.markerIDs(ctx)
	if err != nil {
		return false, err
	}
	return len(ids) == 1 && ids[0] == r.identity, nil
}

// CheckReplicaUnused lists the replica at replicaURL (with the S3
// credentials key and secret, unused for file://) and returns
// ErrReplicaForeign when it holds any LTX file or an identity marker: a
// database created now must not join it. It writes nothing. Other errors
// are the listing's failure kind (redacted) or ErrBadReplicaURL.
func CheckReplicaUnused(ctx context.Context, replicaURL, key, secret string) error {
	kind, err := ParseReplicaURL(replicaURL)
	if err != nil {
		return err
	}
	cfg := ReplicaConfig{AccessKeyID: key, SecretAccessKey: secret}
	client, err := newReplicaClient(replicaURL, kind, cfg)
	if err != nil {
		return err
	}
	mu, err := markerURL(replicaURL)
	if err != nil {
		return err
	}
	marker, err := newReplicaClient(mu, kind, cfg)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		client litestream.ReplicaClient
		levels []int
	}{{marker, []int{0}}, {client, []int{litestream.SnapshotLevel, 2, 1, 0}}} {
		for _, level := range c.levels {
			it, err := c.client.LTXFiles(ctx, level, 0, false)
			if err != nil {
				return fmt.Errorf("list the replica: %s", redactReplicaError(err))
			}
			found := it.Next()
			err = it.Err()
			if cerr := it.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("list the replica: %s", redactReplicaError(err))
			}
			if found {
				return ErrReplicaForeign
			}
		}
	}
	return nil
}

// isFresh reports whether this database was created by this start and has
// not claimed a replica yet.
func (r *Replicator) isFresh() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fresh
}
