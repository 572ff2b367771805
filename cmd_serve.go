package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/storage"
)

type serveCmd struct {
	LagLimit time.Duration `help:"How long replication may lag or fail before /api/ready answers 503." default:"2m"`
}

// Run starts the daemon. The first SIGTERM/SIGINT starts a graceful shutdown;
// a second one exits at once with status 1.
func (s *serveCmd) Run() error {
	// daemon.RunOptions reads zero as "the default"; a 0s or negative limit
	// typed here is a mistake, not a request for 2m.
	if s.LagLimit < time.Second {
		return &exitError{code: exitUsage, err: errors.New("--lag-limit must be positive and at least 1s (lag is measured in seconds)")}
	}
	cfg, err := daemon.LoadConfig(os.LookupEnv)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "chalupa: second signal, exiting now")
		os.Exit(1)
	}()
	return daemon.Run(ctx, cfg, daemon.RunOptions{LagLimit: s.LagLimit})
}

type migrateCmd struct {
	Status migrateStatusCmd `cmd:"" help:"List applied and pending migrations of the database in CHALUPA_DATA_DIR."`
}

type migrateStatusCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run lists migrations. It opens the database read-only and applies nothing.
func (m *migrateStatusCmd) Run() error {
	cfg, err := daemon.LoadConfig(os.LookupEnv)
	if err != nil {
		return &exitError{code: 1, err: err}
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
		refused = &exitError{code: 1, err: fmt.Errorf("serve would refuse this database: %w", refused)}
	}
	if m.JSON {
		if err := json.NewEncoder(os.Stdout).Encode(sts); err != nil {
			return err
		}
		return refused
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
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

type configCmd struct {
	Check configCheckCmd `cmd:"" help:"Print the effective configuration (secrets redacted); exit 1 if serve would refuse it."`
}

type configCheckCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run prints the redacted configuration or the problems that stop serve.
func (c *configCheckCmd) Run() error {
	cfg, err := daemon.LoadConfig(os.LookupEnv)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if err := daemon.Preflight(context.Background(), cfg); err != nil {
		return &exitError{code: 1, err: err}
	}
	rows := cfg.Redacted()
	if c.JSON {
		m := map[string]string{}
		for _, r := range rows {
			m[r[0]] = r[1]
		}
		return json.NewEncoder(os.Stdout).Encode(m)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println("configuration ok")
	return nil
}

type versionCmd struct{}

// Run prints the version.
func (versionCmd) Run() error {
	fmt.Printf("chalupa %s (%s, litestream %s)\n", daemon.Version, runtime.Version(), storage.LitestreamVersion)
	return nil
}
