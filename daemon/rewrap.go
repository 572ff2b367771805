package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	newKey, err := decodeKey(newKeyB64)
	if err != nil || len(newKey) != 32 {
		return rep, &ConfigError{Problems: []string{"CHALUPA_INGEST_MASTER_KEY_NEW must be base64 of exactly 32 bytes"}}
	}
	if cfg.IngestMasterKey == "" {
		return rep, &ConfigError{Problems: []string{"CHALUPA_INGEST_MASTER_KEY (the current key) is required"}}
	}
	cfg.dropAWSCABundle()
	unlock, err := storage.LockDataDir(cfg.DataDir)
	if err != nil {
		return rep, err
	}
	defer unlock()
	db, err := storage.Open(ctx, cfg.DatabasePath())
	if err != nil {
		return rep, err
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{Clock: clock}); err != nil {
		db.Close()
		return rep, err
	}
	repl, err := storage.StartReplication(ctx, cfg.DatabasePath(), storage.ReplicaConfig{
		URL: cfg.ReplicaURL, AccessKeyID: cfg.SpacesKey.Reveal(), SecretAccessKey: cfg.SpacesSecret.Reveal(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		db.Close()
		return rep, err
	}
	defer func() {
		db.Close()
		repl.Close(context.Background())
	}()

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
		return rep, err
	}

	// Record the new key as pending before the commit: a crash between the
	// commit and the file update leaves serve a key that opens the database
	// (recoverPendingRewrap), never only the old one.
	if err := sf.stage(newKeyB64); err != nil {
		return rep, err
	}
	res, err := ingest.Rewrap(ctx, db, cfg.MasterKey(), newKey, clock.Now())
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

// pendingMasterKey is the secrets.env entry a rewrap writes before it
// commits and removes once the file holds the new key.
const pendingMasterKey = "CHALUPA_INGEST_MASTER_KEY_PENDING"

// secretsFile keeps the embedded default's secrets.env in step with a
// rewrap. It acts only when the file holds the old key (wherever this run
// read the key from): otherwise the operator holds the key elsewhere.
type secretsFile struct {
	path string
	old  []byte
}

// holdsOld reads the file and reports whether its master key is the old one.
func (f secretsFile) holdsOld() (map[string]string, bool, error) {
	m, err := ReadSecretsFile(f.path)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %s", SecretsFileName, errKind(err))
	}
	b, err := decodeKey(m["CHALUPA_INGEST_MASTER_KEY"])
	return m, err == nil && bytes.Equal(b, f.old), nil
}

func (f secretsFile) stage(newKey string) error {
	m, ok, err := f.holdsOld()
	if err != nil || !ok {
		return err
	}
	m[pendingMasterKey] = newKey
	return writeSecretsFile(f.path, m)
}

func (f secretsFile) unstage() error {
	m, err := ReadSecretsFile(f.path)
	if err != nil || m[pendingMasterKey] == "" {
		return nil
	}
	delete(m, pendingMasterKey)
	return writeSecretsFile(f.path, m)
}

func (f secretsFile) commit(rep *RewrapReport, newKey string) error {
	m, ok, err := f.holdsOld()
	if err != nil {
		return fmt.Errorf("rewrapped, but the new key could not be stored: %w", err)
	}
	if !ok {
		return nil
	}
	m["CHALUPA_INGEST_MASTER_KEY"] = newKey
	delete(m, pendingMasterKey)
	if err := writeSecretsFile(f.path, m); err != nil {
		return fmt.Errorf("rewrapped, but the new key could not be stored: %w", err)
	}
	rep.SecretsFileUpdated, rep.SecretsFile = true, f.path
	return nil
}

// recoverPendingRewrap finishes a rewrap that committed but was stopped
// before secrets.env followed: when the file's pending key opens the
// database's check value, it becomes the file's (and cfg's) master key.
// It returns false when there is nothing to recover. With write false it
// only reports (for config check). It acts only when the configured key is
// the file's, so a key given in the environment is never overridden.
func (c *Config) recoverPendingRewrap(ctx context.Context, db *storage.DB, write bool) (bool, error) {
	path := filepath.Join(c.DataDir, SecretsFileName)
	m, err := ReadSecretsFile(path)
	if err != nil || m[pendingMasterKey] == "" {
		return false, nil
	}
	if cur, err := decodeKey(m["CHALUPA_INGEST_MASTER_KEY"]); err != nil || !bytes.Equal(cur, c.MasterKey()) {
		return false, nil
	}
	pending, err := decodeKey(m[pendingMasterKey])
	if err != nil || len(pending) != 32 {
		return false, nil
	}
	version, check, err := storage.MasterKeyCheck(ctx, db.Read)
	if err != nil {
		return false, nil
	}
	if _, err := ingest.VerifyMasterKey(pending, version, check); err != nil {
		return false, nil
	}
	if !write {
		return true, nil
	}
	m["CHALUPA_INGEST_MASTER_KEY"] = m[pendingMasterKey]
	delete(m, pendingMasterKey)
	if err := writeSecretsFile(path, m); err != nil {
		return false, err
	}
	c.IngestMasterKey = Secret(m["CHALUPA_INGEST_MASTER_KEY"])
	return true, nil
}
