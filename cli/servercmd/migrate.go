package servercmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/storage"
)

type migrateCmd struct {
	Status        migrateStatusCmd        `cmd:"" help:"List applied and pending migrations of the database in CHALUPA_DATA_DIR."`
	RestorePoints migrateRestorePointsCmd `cmd:"" name:"restore-points" help:"List the restore points taken before migrations, newest first, each integrity-checked."`
	Rollback      migrateRollbackCmd      `cmd:"" help:"Replace the database with a restore point (daemon stopped): says what is lost, asks for a typed confirmation, moves the current database aside."`
}

type migrateStatusCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run lists migrations. It opens the database read-only and applies nothing.
func (m *migrateStatusCmd) Run(env *cli.Env) error {
	cfg, err := daemon.LoadConfig(env.LookupEnv)
	if err != nil {
		return cli.Exit(1, err)
	}
	ctx := context.Background()
	var sts []storage.MigrationStatus
	db, err := storage.OpenReadOnly(ctx, cfg.DatabasePath())
	switch {
	case errors.Is(err, os.ErrNotExist):
		// No database yet: everything is pending.
		tmp, terr := os.MkdirTemp("", "chalupa-migrate-status-")
		if terr != nil {
			return terr
		}
		defer os.RemoveAll(tmp)
		empty, oerr := storage.Open(ctx, tmp+"/empty.db")
		if oerr != nil {
			return oerr
		}
		defer empty.Close()
		sts, err = empty.MigrationStatuses(ctx, nil)
	case err != nil:
		return err
	default:
		defer db.Close()
		sts, err = db.MigrationStatuses(ctx, nil)
	}
	if err != nil {
		return err
	}
	// After the listing, fail as serve would: an applied file edited since,
	// or a schema newer than this binary.
	var refused error
	if db != nil {
		refused = db.CheckApplied(ctx, nil)
	}
	if refused != nil {
		refused = cli.Exit(1, fmt.Errorf("serve would refuse this database: %w", refused))
	}
	if m.JSON {
		if err := json.NewEncoder(env.Stdout).Encode(sts); err != nil {
			return err
		}
		return refused
	}
	tw := table(env.Stdout)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
	for _, s := range sts {
		state, at := "pending", ""
		if s.Applied {
			state, at = "applied", s.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return refused
}
