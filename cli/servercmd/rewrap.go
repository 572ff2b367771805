package servercmd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/daemon"
)

type rewrapCmd struct{}

// Run re-encrypts every envelope from CHALUPA_INGEST_MASTER_KEY to
// CHALUPA_INGEST_MASTER_KEY_NEW with the daemon stopped.
func (rewrapCmd) Run(env *cli.Env) error {
	cfg, err := daemon.LoadConfig(env.LookupEnv)
	if err != nil {
		return cli.Exit(1, err)
	}
	newKey := strings.TrimSpace(env.Getenv("CHALUPA_INGEST_MASTER_KEY_NEW"))
	if newKey == "" {
		return cli.Exit(1, errors.New("CHALUPA_INGEST_MASTER_KEY_NEW is required (the new master key, base64 of 32 bytes)"))
	}
	rep, err := daemon.RunRewrap(context.Background(), cfg, newKey, nil)
	if err != nil {
		return cli.Exit(1, err)
	}
	if rep.AlreadyDone {
		fmt.Fprintf(env.Stdout, "the database is already sealed under the new key (master key version %d): an earlier rewrap committed before it was stopped\n", rep.ToVersion)
	} else {
		fmt.Fprintf(env.Stdout, "rewrapped %d ingest key, %d provider token and %d SSH identity envelopes: master key version %d -> %d (replicated)\n", rep.Keys, rep.ProviderTokens, rep.SSHIdentities, rep.FromVersion, rep.ToVersion)
	}
	if rep.SecretsFileUpdated {
		fmt.Fprintf(env.Stdout, "the new key is now in %s\n", rep.SecretsFile)
	} else {
		fmt.Fprintln(env.Stdout, "set CHALUPA_INGEST_MASTER_KEY to the value of CHALUPA_INGEST_MASTER_KEY_NEW before the next serve")
	}
	return nil
}
