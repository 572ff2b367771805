package servercmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/daemon"
)

type configCmd struct {
	Check     configCheckCmd     `cmd:"" help:"Print the effective configuration (secrets redacted); exit 1 if serve would refuse it."`
	CloudInit configCloudInitCmd `cmd:"" name:"cloud-init" help:"Print the agent install user data for a hand-made droplet, rendered from the configured agent release."`
}

// configCloudInitCmd renders the one cloud-init template converge uses
// (docs/operations.md, "Agent install") for a droplet no box describes:
// the release from CHALUPA_AGENT_VERSION, CHALUPA_AGENT_RELEASE_URL and
// both digests, the control plane from CHALUPA_ORIGIN unless --url.
type configCloudInitCmd struct {
	Env            string `name:"env" required:"" help:"Environment slug the droplet's key will be bound to."`
	URL            string `name:"url" env:"CHALUPA_ORIGIN" required:"" help:"The control plane's origin the agent reports to (https unless loopback)."`
	Size           string `help:"The droplet's size slug, reported with its heartbeats (the metadata service has none)."`
	IdleMinutes    int64  `name:"idle-minutes" default:"30" help:"The agent's idle limit in minutes, 1-10080."`
	SessionMinutes int64  `name:"session-minutes" help:"The agent's session limit in minutes from its install, 0-43200 (0: none)."`
}

// Run prints the rendered user data. A release that fails its checks is
// exit 1 naming the variables (never their values); settings the agent
// would refuse are exit 2.
func (c *configCloudInitCmd) Run(env *cli.Env) error {
	if c.IdleMinutes < 1 {
		return cli.Exit(cli.ExitUsage, errors.New("--idle-minutes must be 1-10080"))
	}
	out, err := agentrelease.RenderCloudInit(agentrelease.FromEnv(env.Getenv), agentrelease.Params{URL: c.URL, Environment: c.Env,
		Size: c.Size, IdleLimitMinutes: c.IdleMinutes, SessionLimitMinutes: c.SessionMinutes})
	switch {
	case errors.Is(err, agentrelease.ErrRelease):
		return cli.Exit(1, err)
	case err != nil:
		return cli.Exit(cli.ExitUsage, err)
	}
	_, err = fmt.Fprint(env.Stdout, out)
	return err
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
	// Checked anyway beside a running daemon (docs/operations.md, "Exit
	// codes"): the next start would see this configuration.
	if cfg.DataDirInUse() {
		notes = append(notes, daemonRunningNote)
	}
	// Each alert sink, checked and previewed (docs/operations.md,
	// "Alerts", under Sinks): URLs as scheme and host, secrets as set.
	sinks := cfg.AlertSinkPreviews()
	if len(sinks) == 0 {
		sinks = []string{noAlertSinksNote}
	}
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
		m["alertSinks"] = strings.Join(sinks, "; ")
		return json.NewEncoder(env.Stdout).Encode(m)
	}
	tw := table(env.Stdout)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if note != "" {
		fmt.Fprintf(tw, "note\t%s\n", note)
	}
	for _, s := range sinks {
		fmt.Fprintf(tw, "alert sink\t%s\n", s)
	}
	for _, w := range notes {
		fmt.Fprintf(tw, "warning\t%s\n", w)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(env.Stdout, "configuration ok")
	return err
}

// replicaSharesDiskNote is what `config check` says when the replica is a
// file:// replica on the data directory's filesystem.
const replicaSharesDiskNote = "CHALUPA_REPLICA_URL is a file:// replica on the data directory's filesystem: it takes space from the same disk (counted by CHALUPA_MIN_FREE_BYTES) and is lost with it; set an s3:// replica to survive the disk"

// noAlertSinksNote is `config check`'s alert sink line when none is
// configured: not a problem, but nobody is told of a fault.
const noAlertSinksNote = "none: no alert reaches a person (set CHALUPA_ALERT_SMTP_URL or CHALUPA_ALERT_WEBHOOK_URL; docs/operations.md, \"Alerts\")"

// daemonRunningNote is what `config check` adds when a daemon holds the
// data dir: the configuration was checked all the same.
const daemonRunningNote = "a chalupa daemon is running on CHALUPA_DATA_DIR: this configuration was checked against its database (read only); a second serve would refuse to start beside it"
