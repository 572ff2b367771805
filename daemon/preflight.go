package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// Preflight runs the checks serve makes before it starts that need more than
// the environment: the data dir is usable, and an existing database is not
// newer than this binary. `chalupa config check` calls it so that it exits
// non-zero whenever serve would refuse this configuration. A daemon running
// on the data dir is no refusal of the configuration: the database is read
// beside it (read only) and the caller notes it (DataDirInUse). It writes
// nothing.
func Preflight(ctx context.Context, c *Config) error {
	if fi, err := os.Stat(c.DataDir); err == nil && !fi.IsDir() {
		return &ConfigError{Problems: []string{"CHALUPA_DATA_DIR is not a directory"}}
	}
	return c.preflightExistingDB(ctx)
}

// DataDirInUse reports whether a running chalupa (serve, rewrap) holds
// the data dir's lock: a second serve would refuse to start beside it.
func (c *Config) DataDirInUse() bool { return storage.DataDirLocked(c.DataDir) }

// preflightExistingDB makes serve's checks of an existing database, read
// only: a master key is configured for it, the schema is not newer than
// this binary nor an applied migration edited, and the master key (or the
// pending key of an interrupted rewrap) opens the check value. Open runs it
// before it writes anything, so that a refusal leaves the data dir as it
// was; Preflight runs it for config check. No database is no problem.
func (c *Config) preflightExistingDB(ctx context.Context) error {
	// Same rule as serve, before anything else reads the file.
	if err := c.checkMasterKeyForExistingDB(); err != nil {
		return err
	}
	db, err := storage.OpenReadOnly(ctx, c.DatabasePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("database in CHALUPA_DATA_DIR cannot be opened: %s", errKind(err))
	}
	defer db.Close()
	return preflightDB(ctx, c, db)
}

// preflightDB checks an existing database against the configuration.
func preflightDB(ctx context.Context, c *Config, db *storage.DB) error {
	if err := db.CheckApplied(ctx, nil); err != nil {
		return err
	}
	version, sealed, err := storage.MasterKeyCheck(ctx, db.Read)
	if err != nil {
		// No check value yet: the first serve stores one.
		return nil
	}
	if _, err := ingest.VerifyMasterKey(c.MasterKey(), version, sealed); err != nil {
		if ok, _ := c.recoverPendingRewrap(ctx, db, false); ok {
			return nil // serve finishes the interrupted rewrap
		}
		return err
	}
	return nil
}

// checkMasterKeyForExistingDB refuses to generate a master key for a
// database that already exists (a restored file, or a data dir whose
// secrets.env was lost): its envelopes are sealed under another key, and a
// fresh one would be written to secrets.env only to be refused.
func (c *Config) checkMasterKeyForExistingDB() error {
	if c.Secrets.IngestMasterKey != "" {
		return nil
	}
	if _, err := os.Stat(c.DatabasePath()); err != nil {
		return nil
	}
	return &ConfigError{Problems: []string{"CHALUPA_INGEST_MASTER_KEY is unset but " + DatabaseFileName +
		" already exists: set it to the key this database was sealed with (a restored database needs its original key)"}}
}
