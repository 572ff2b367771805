package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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
