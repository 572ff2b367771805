package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
)

type adminKeysCmd struct {
	Issue  adminKeysIssueCmd  `cmd:"" help:"Issue a fresh ingest key for an environment (material is shown once)."`
	Rotate adminKeysRotateCmd `cmd:"" help:"Mark the environment's keys rotating and issue a fresh active key."`
	Revoke adminKeysRevokeCmd `cmd:"" help:"Revoke a key at once."`
}

type adminKeysIssueCmd struct {
	Env  string `arg:"" name:"slug" help:"Environment slug."`
	Out  string `help:"Write ingest.key (0600) and key-id into this directory instead of printing the material." type:"path"`
	JSON bool   `help:"Print JSON (includes the key material unless --out is given)."`
}

// Run issues a key.
func (c *adminKeysIssueCmd) Run(a *adminCmd) error {
	return issueOrRotate(a, c.Env, c.Out, c.JSON, false)
}

type adminKeysRotateCmd struct {
	Env  string `arg:"" name:"slug" help:"Environment slug."`
	Out  string `help:"Write the new ingest.key (0600) and key-id into this directory." type:"path"`
	JSON bool   `help:"Print JSON (includes the key material unless --out is given)."`
}

// Run rotates the environment's keys.
func (c *adminKeysRotateCmd) Run(a *adminCmd) error {
	return issueOrRotate(a, c.Env, c.Out, c.JSON, true)
}

func issueOrRotate(a *adminCmd, slug, out string, asJSON, rotate bool) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	// The key is active the moment the daemon answers, and its material is
	// shown only once: make sure it can be saved before asking for it, so a
	// refusal here leaves no orphan key behind.
	if out != "" {
		if err := checkKeyDir(out); err != nil {
			return &exitError{code: 1, err: fmt.Errorf("--out: %w (nothing was issued)", err)}
		}
	}
	ctx, cancel := a.ctx()
	defer cancel()
	var k adminapi.IssuedKey
	if rotate {
		k, err = cl.RotateKeys(ctx, slug)
	} else {
		k, err = cl.IssueKey(ctx, slug)
	}
	if err != nil {
		return apiFailure(err)
	}
	if out != "" {
		if err := writeKeyFiles(out, k); err != nil {
			return &exitError{code: 1, err: fmt.Errorf("key %s was issued but not saved (%v); revoke it and issue again", k.KeyID, err)}
		}
		k.KeyMaterial = "" // written to the file; never printed as well
	}
	if asJSON {
		return printJSON(k)
	}
	fmt.Printf("key id:       %s\nenvironment:  %s\n", k.KeyID, k.EnvironmentSlug)
	for _, id := range k.RotatedKeyIDs {
		fmt.Printf("now rotating: %s (revoke it once its droplets have the new key)\n", id)
	}
	if out != "" {
		fmt.Printf("wrote %s (0600) and %s\n", filepath.Join(out, "ingest.key"), filepath.Join(out, "key-id"))
	} else {
		fmt.Printf("key material: %s\n(shown once; it cannot be retrieved again)\n", k.KeyMaterial)
	}
	return nil
}

// checkKeyDir makes sure writeKeyFiles can succeed in dir before a key is
// issued: it creates dir (0700) if missing, and refuses when dir already
// holds an ingest.key or files cannot be created in it. writeKeyFiles still
// refuses to overwrite, should an ingest.key appear in between.
func checkKeyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	keyFile := filepath.Join(dir, "ingest.key")
	if _, err := os.Lstat(keyFile); err == nil {
		return fmt.Errorf("%s already exists; move it aside or choose another directory", keyFile)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check %s: %w", keyFile, err)
	}
	f, err := os.CreateTemp(dir, ".chalupa-write-check-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// writeKeyFiles writes the files the agent bootstrap copies to a droplet:
// ingest.key (the material, 0600) and key-id beside it. It refuses to
// overwrite an existing ingest.key.
func writeKeyFiles(dir string, k adminapi.IssuedKey) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "ingest.key"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create ingest.key: %w", err)
	}
	if _, err := f.WriteString(k.KeyMaterial + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write ingest.key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write ingest.key: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "key-id"), []byte(k.KeyID+"\n"), 0o644)
}

type adminKeysRevokeCmd struct {
	KeyID string `arg:"" name:"key-id" help:"Key id (env_<slug>_<16 hex>)."`
	JSON  bool   `help:"Print JSON."`
}

// Run revokes the key.
func (c *adminKeysRevokeCmd) Run(a *adminCmd) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	k, err := cl.RevokeKey(ctx, c.KeyID)
	if err != nil {
		return apiFailure(err)
	}
	if c.JSON {
		return printJSON(k)
	}
	fmt.Printf("revoked %s (%s)\n", k.KeyID, k.EnvironmentSlug)
	return nil
}

type adminFleetCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run prints the fleet.
func (c *adminFleetCmd) Run(a *adminCmd) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	f, err := cl.Fleet(ctx)
	if err != nil {
		return apiFailure(err)
	}
	if c.JSON {
		return printJSON(f)
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENVIRONMENT\tSTATUS\tKEYS a/r/x\tDEPLOYMENT\tDROPLET\tSTATE\tLAST HEARTBEAT\tIDLE DEADLINE\tSESSION EXPIRES\tCI")
	for _, e := range f.Environments {
		keys := fmt.Sprintf("%d/%d/%d", e.Keys["active"], e.Keys["rotating"], e.Keys["revoked"])
		if len(e.Deployments) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", e.Slug, e.Status, keys)
		}
		for _, d := range e.Deployments {
			drop := "-"
			if d.DropletID != 0 {
				drop = fmt.Sprint(d.DropletID)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", e.Slug, e.Status, keys, d.ID, drop, d.Status,
				ts(d.LastHeartbeatAt), ts(d.IdleDeadlineAt), ts(d.SessionExpiresAt), d.CIActive)
		}
	}
	return tw.Flush()
}
