package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// RewrapReport is what RunRewrap did.
type RewrapReport struct {
	ingest.RewrapResult
	// SecretsFileUpdated is true when the generated secrets file held the
	// old key and now holds the new one (SecretsFile is its path).
	SecretsFileUpdated bool
	SecretsFile        string
	// AlreadyDone is true when the database was already sealed under the
	// new key (an earlier rewrap stopped after its commit) and this run only
	// brought secrets.env up to date.
	AlreadyDone bool
}

// errRewrapWrongKey is rewrap's refusal when the current key does not open
// the database: ingest.ErrWrongMasterKey (errors.Is holds) in rewrap's words,
// since that error's own message speaks of start-up.
var errRewrapWrongKey error = rewrapWrongKey{}

type rewrapWrongKey struct{}

func (rewrapWrongKey) Error() string {
	return "CHALUPA_INGEST_MASTER_KEY does not open this database's envelopes (wrong master key? it must be the current one); nothing was rewrapped"
}

func (rewrapWrongKey) Unwrap() error { return ingest.ErrWrongMasterKey }

// RunRewrap rotates the ingest master key offline: with the daemon stopped
// (it takes the data-dir lock; ErrLocked if serve is running), it re-encrypts
// every envelope from cfg's CHALUPA_INGEST_MASTER_KEY to newKey in one
// transaction and waits until the change is in the replica. When the data
// dir's generated secrets file holds the old key, it is updated to the new
// one; otherwise the operator sets CHALUPA_INGEST_MASTER_KEY to the new value
// before the next serve. clock stamps the new master key check and any
// restore point; nil means the real clock.
func RunRewrap(ctx context.Context, cfg *Config, newKeyB64 string, clock clockwork.Clock) (RewrapReport, error) {
	var rep RewrapReport
	newKey, err := decodeKey(newKeyB64)
	if err != nil || len(newKey) != 32 {
		return rep, &ConfigError{Problems: []string{"CHALUPA_INGEST_MASTER_KEY_NEW must be base64 of exactly 32 bytes"}}
	}
	if cfg.Secrets.IngestMasterKey == "" {
		return rep, &ConfigError{Problems: []string{"CHALUPA_INGEST_MASTER_KEY (the current key) is required"}}
	}
	app, err := Open(ctx, cfg, Options{Offline: true, Logs: io.Discard, Clock: clock})
	if err != nil {
		return rep, err
	}
	defer app.Close(context.Background())
	db, repl := app.DB, app.Replicator

	sf := secretsFile{path: filepath.Join(cfg.DataDir, SecretsFileName), old: cfg.MasterKey()}
	version, check, err := storage.MasterKeyCheck(ctx, db.Read)
	if err != nil {
		return rep, fmt.Errorf("read master key check: %w", err)
	}
	if _, err := ingest.VerifyMasterKey(cfg.MasterKey(), version, check); err != nil {
		// An earlier rewrap to this same new key committed but was stopped
		// before secrets.env followed: finish that instead of failing.
		if _, nerr := ingest.VerifyMasterKey(newKey, version, check); nerr == nil {
			rep.AlreadyDone = true
			rep.FromVersion, rep.ToVersion = version, version
			return rep, sf.commit(&rep, newKeyB64)
		}
		return rep, errRewrapWrongKey
	}

	// Record the new key as pending before the commit: a crash between the
	// commit and the file update leaves serve a key that opens the database
	// (recoverPendingRewrap), never only the old one.
	if err := sf.stage(newKeyB64); err != nil {
		return rep, err
	}
	res, err := ingest.Rewrap(ctx, db, cfg.MasterKey(), newKey, app.Clock.Now())
	if err != nil {
		return rep, errors.Join(err, sf.unstage())
	}
	rep.RewrapResult = res
	if err := sf.commit(&rep, newKeyB64); err != nil {
		return rep, err
	}
	sctx, cancel := context.WithTimeout(ctx, finalSyncTimeout)
	defer cancel()
	if err := repl.SyncAndWait(sctx); err != nil {
		return rep, fmt.Errorf("rewrap committed (use the new key from now on) but not yet replicated; serve will replicate it: %w", err)
	}
	return rep, nil
}
