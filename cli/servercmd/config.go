package servercmd

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/chalupa-run/chalupa/cli"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/chalupa-run/chalupa/daemon"
)

type configCmd struct {
	Check configCheckCmd `cmd:"" help:"Print the effective configuration (secrets redacted); exit 1 if serve would refuse it."`
}

type configCheckCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run prints the redacted configuration or the problems that stop serve.
func (c *configCheckCmd) Run(env *cli.Env) error {
	cfg, err := daemon.LoadConfig(env.LookupEnv)
	if err != nil {
		return cli.Exit(1, err)
	}
	if err := daemon.Preflight(context.Background(), cfg); err != nil {
		return cli.Exit(1, err)
	}
	rows := cfg.Redacted()
	// The embedded default's file replica lives on the data disk
	// (docs/operations.md, "Replication").
	note := ""
	if cfg.ReplicaSharesDataDisk() {
		note = replicaSharesDiskNote
	}
	// The reaper's and costs' modes and any deprecated variable, every
	// time (docs/operations.md, "Configuration").
	notes := append(cfg.ModeNotes(), cfg.Warnings...)
	if c.JSON {
		m := map[string]string{}
		for _, r := range rows {
			m[r[0]] = r[1]
		}
		if note != "" {
			m["note"] = note
		}
		if len(notes) > 0 {
			m["warnings"] = strings.Join(notes, "; ")
		}
		return json.NewEncoder(os.Stdout).Encode(m)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if note != "" {
		fmt.Fprintf(tw, "note\t%s\n", note)
	}
	for _, w := range notes {
		fmt.Fprintf(tw, "warning\t%s\n", w)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println("configuration ok")
	return nil
}

// replicaSharesDiskNote is what `config check` says when the replica is a
// file:// replica on the data directory's filesystem.
const replicaSharesDiskNote = "CHALUPA_REPLICA_URL is a file:// replica on the data directory's filesystem: it takes space from the same disk (counted by CHALUPA_MIN_FREE_BYTES) and is lost with it; set an s3:// replica to survive the disk"
