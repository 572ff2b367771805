package daemon

import (
	"context"
	"fmt"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// preflightDB checks an existing database against the configuration.
func preflightDB(ctx context.Context, c *Config, db *storage.DB) error {
	sts, err := db.MigrationStatuses(ctx, nil)
	if err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	applied, err := db.SchemaVersion(ctx)
	if err != nil {
		// No schema yet: serve will migrate a fresh file.
		return nil
	}
	if n := len(sts); n > 0 && applied > sts[n-1].Version {
		return fmt.Errorf("%w: database at version %d, binary knows up to %d", storage.ErrSchemaTooNew, applied, sts[n-1].Version)
	}
	version, env, err := storage.MasterKeyCheck(ctx, db.Read)
	if err != nil {
		// No check value yet: the first serve stores one.
		return nil
	}
	if c.IngestMasterKey == "" {
		// Generated on first serve: a database that already has a check
		// value was sealed under another key.
		return ingest.ErrWrongMasterKey
	}
	if _, err := ingest.VerifyMasterKey(c.MasterKey(), version, env); err != nil {
		return err
	}
	return nil
}
