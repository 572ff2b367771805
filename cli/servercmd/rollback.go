package servercmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/cli"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/storage"
)

// migrateRestorePointsCmd is `chalupa migrate restore-points`
// (docs/operations.md, "Rollback").
type migrateRestorePointsCmd struct {
	JSON bool `help:"Print JSON."`
}

// restorePointJSON is one restore point in `--json` output.
type restorePointJSON struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	TakenAt       time.Time `json:"takenAt"`
	SchemaVersion int64     `json:"schemaVersion"`
	SizeBytes     int64     `json:"sizeBytes"`
	Verified      bool      `json:"verified"`
	Check         string    `json:"check"`
}

// Run lists the restore points; it reads only.
func (c *migrateRestorePointsCmd) Run(env *cli.Env) error {
	cfg, err := daemon.LoadConfig(env.LookupEnv)
	if err != nil {
		return cli.Exit(1, err)
	}
	pts, err := storage.ListRestorePoints(context.Background(), filepath.Join(cfg.DataDir, storage.RestorePointDirName))
	if err != nil {
		return cli.Exit(1, err)
	}
	if c.JSON {
		out := []restorePointJSON{}
		for _, p := range pts {
			out = append(out, restorePointJSON{Name: p.Name, Path: p.Path, TakenAt: p.TakenAt, SchemaVersion: p.SchemaVersion,
				SizeBytes: p.SizeBytes, Verified: p.Verified(), Check: p.Check})
		}
		return json.NewEncoder(env.Stdout).Encode(out)
	}
	if len(pts) == 0 {
		fmt.Fprintln(env.Stdout, "no restore points (one is taken before each migration of a database that holds a schema)")
		return nil
	}
	tw := table(env.Stdout)
	fmt.Fprintln(tw, "NAME\tTAKEN AT\tSCHEMA\tSIZE\tCHECK")
	for _, p := range pts {
		fmt.Fprintf(tw, "%s\t%s\tv%d\t%d bytes\t%s\n", p.Name, p.TakenAt.Format(time.RFC3339), p.SchemaVersion, p.SizeBytes, p.Check)
	}
	return tw.Flush()
}

// migrateRollbackCmd is `chalupa migrate rollback --to FILE`
// (docs/operations.md, "Rollback").
type migrateRollbackCmd struct {
	To           string `required:"" placeholder:"FILE" help:"The restore point: a name listed by 'chalupa migrate restore-points', or its path."`
	Confirmation string `placeholder:"PHRASE" help:"The typed confirmation, 'roll back to <restore point name>'; without it the phrase is read from standard input."`
}

// rollbackPhrase is the confirmation rolling back to the point named name
// needs.
func rollbackPhrase(name string) string { return "roll back to " + name }

// Run plans the rollback, prints what is lost, asks for the typed
// confirmation, then rolls back. A refusal changes nothing.
func (c *migrateRollbackCmd) Run(env *cli.Env) error {
	cfg, err := daemon.LoadConfig(env.LookupEnv)
	if err != nil {
		return cli.Exit(1, err)
	}
	unlock, err := storage.LockDataDir(cfg.DataDir)
	if errors.Is(err, storage.ErrLocked) {
		return cli.Exit(1, fmt.Errorf("the database is in use by %s (chalupa serve or another command holding CHALUPA_DATA_DIR): stop it first, nothing changed", lockHolder(err)))
	}
	if err != nil {
		return cli.Exit(1, err)
	}
	defer unlock()
	point := c.To
	if !strings.ContainsRune(point, filepath.Separator) {
		point = filepath.Join(cfg.DataDir, storage.RestorePointDirName, point)
	}
	if _, err := os.Stat(cfg.DatabasePath()); err != nil {
		return cli.Exit(1, daemon.ErrNoDatabase)
	}
	ctx := context.Background()
	plan, err := storage.PlanRollback(ctx, cfg.DatabasePath(), point)
	if err != nil {
		return cli.Exit(1, fmt.Errorf("nothing changed: %w", err))
	}
	printRollbackPlan(env.Stdout, cfg.DatabasePath(), plan)
	phrase := rollbackPhrase(plan.Point.Name)
	typed := c.Confirmation
	if typed == "" {
		fmt.Fprintf(env.Stderr, "type %q to roll back: ", phrase)
		line, err := cli.PromptLine(env.Stdin, 4096)
		if cli.IsInterrupted(err) {
			return err // Ctrl-C: 130, nothing changed
		}
		typed = strings.TrimSpace(line)
		if err != nil && typed == "" {
			return cli.Exit(1, fmt.Errorf("standard input ended before the confirmation phrase (type it, or pass --confirmation %q): nothing changed", phrase))
		}
	}
	if typed != phrase {
		return cli.Exit(1, fmt.Errorf("confirmation does not match %q: nothing changed", phrase))
	}
	res, err := storage.Rollback(ctx, cfg.DatabasePath(), point, time.Now())
	if err != nil {
		return cli.Exit(1, err)
	}
	fmt.Fprintf(env.Stdout, "rolled back to %s\n", plan.Point.Name)
	fmt.Fprintf(env.Stdout, "previous database moved to %s\n", res.MovedTo)
	fmt.Fprintf(env.Stdout, "replica generation %s: replication starts a fresh history at the replica URL with /%s appended;\n", res.Generation, res.Generation)
	fmt.Fprintln(env.Stdout, "  restore from that URL from now on (chalupa admin status shows the generation). A chalupa built before")
	fmt.Fprintln(env.Stdout, "  replica generations ignores it: before starting one, set CHALUPA_REPLICA_URL to that URL yourself.")
	fmt.Fprintln(env.Stdout, "next: chalupa serve --pause-loops reaper,retention,costs,jobs; verify health, login and ingest; then chalupa admin loops resume NAME")
	return nil
}

// printRollbackPlan says exactly what rolling back loses.
func printRollbackPlan(w io.Writer, db string, p storage.RollbackPlan) {
	fmt.Fprintf(w, "database      %s (schema v%d)\n", db, p.CurrentSchema)
	fmt.Fprintf(w, "restore point %s (schema v%d, taken %s, integrity %s)\n", p.Point.Name, p.Point.SchemaVersion, p.Point.TakenAt.Format(time.RFC3339), p.Point.Check)
	span := "-"
	if p.LastWriteAt.After(p.Point.TakenAt) {
		span = p.LastWriteAt.Sub(p.Point.TakenAt).Round(time.Second).String()
	}
	fmt.Fprintf(w, "LOST: every write from %s to %s (last write to the database; %s)\n", p.Point.TakenAt.Format(time.RFC3339), p.LastWriteAt.Format(time.RFC3339), span)
	if len(p.Tables) == 0 {
		fmt.Fprintln(w, "row counts: the same in every table (updates made since are still lost)")
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "TABLE\tROWS NOW\tROWS IN POINT\tDIFFERENCE")
	for _, t := range p.Tables {
		in := fmt.Sprint(t.InPoint)
		if t.MissingInPoint {
			in = "(no table)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%+d\n", t.Table, t.Now, in, t.InPoint-t.Now)
	}
	tw.Flush()
	fmt.Fprintln(w, "(updates and deletes that left a count unchanged are lost too)")
}

// lockHolder names the process holding the data dir's lock in a refusal:
// its pid as the lock file records it (storage.LockedError, written by the
// holder since it took the lock, as serve's refusal says it;
// docs/operations.md, "Rollback"), or says none was recorded for a holder from a
// release that did not record its pid.
func lockHolder(err error) string {
	var le *storage.LockedError
	if errors.As(err, &le) && le.PID > 0 {
		return fmt.Sprintf("pid %d", le.PID)
	}
	return "a process that recorded no pid"
}
