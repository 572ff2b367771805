package daemon

import (
	"context"
	"fmt"

	"github.com/chalupa-run/chalupa/storage"
)

// preflightDB checks an existing database against the configuration.
func preflightDB(ctx context.Context, c *Config, db *storage.DB) error {
	sts, err := db.MigrationStatuses(ctx, nil)
	if err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	_ = sts
	return nil
}
