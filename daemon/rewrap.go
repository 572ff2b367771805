package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

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
}

// RunRewrap rotates the ingest master key offline: with the daemon stopped
// (it takes the data-dir lock; ErrLocked if serve is running), it re-encrypts
// every envelope from cfg's CHALUPA_INGEST_MASTER_KEY to newKey in one
// transaction and waits until the change is in the replica. When the data
// dir's generated secrets file holds the old key, it is updated to the new
// one; otherwise the operator sets CHALUPA_INGEST_MASTER_KEY to the new value
// before the next serve.
func RunRewrap(ctx context.Context, cfg *Config, newKeyB64 string) (RewrapReport, error) {
	var rep RewrapReport
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
	if _, err := db.Migrate(ctx, storage.MigrateOptions{}); err != nil {
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
	res, err := ingest.Rewrap(ctx, db, cfg.MasterKey(), newKey, time.Now())
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, finalSyncTimeout)
		if serr := repl.SyncAndWait(sctx); serr != nil {
			err = fmt.Errorf("rewrap committed locally but not yet replicated: %w", serr)
		}
		cancel()
	}
	cerr := db.Close()
	rerr := repl.Close(context.Background())
	if err != nil {
		return rep, err
	}
	if cerr != nil || rerr != nil {
		return rep, errors.Join(cerr, rerr)
	}
	rep.RewrapResult = res
	// The generated secrets file must follow: if it holds the old key
	// (wherever this run read the key from), the next serve would read it
	// and refuse to start.
	path := filepath.Join(cfg.DataDir, SecretsFileName)
	m, err := ReadSecretsFile(path)
	if err != nil {
		return rep, fmt.Errorf("rewrapped, but %s could not be read to store the new key: %s", SecretsFileName, errKind(err))
	}
	if old, ok := m["CHALUPA_INGEST_MASTER_KEY"]; ok && old != "" {
		if b, err := decodeKey(old); err == nil && bytes.Equal(b, cfg.MasterKey()) {
			m["CHALUPA_INGEST_MASTER_KEY"] = newKeyB64
			if err := writeSecretsFile(path, m); err != nil {
				return rep, fmt.Errorf("rewrapped, but the new key could not be stored: %w", err)
			}
			rep.SecretsFileUpdated = true
			rep.SecretsFile = path
		}
	}
	return rep, nil
}
