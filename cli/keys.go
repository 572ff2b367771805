package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/chalupa-run/chalupa/adminapi"
)

type adminKeysCmd struct {
	Issue  adminKeysIssueCmd  `cmd:"" help:"Issue a fresh ingest key for an environment (material is shown once)."`
	Rotate adminKeysRotateCmd `cmd:"" help:"Give each running box a fresh key over SSH (its old key revoked once it heartbeats with the new one); mark other producers' keys rotating and issue them a fresh key."`
	Revoke adminKeysRevokeCmd `cmd:"" help:"Revoke a key at once (its producers go silent; retire a key with rotate)."`
}

type adminKeysIssueCmd struct {
	Env  string `arg:"" name:"slug" help:"Environment slug."`
	Out  string `help:"Write ingest.key (0600) and key-id into this directory instead of printing the material." type:"path"`
	JSON bool   `help:"Print JSON (includes the key material unless --out is given)."`
}

func (*adminKeysIssueCmd) operation() string { return adminapi.OpIssueIngestKey }

// Run issues a key.
func (c *adminKeysIssueCmd) Run(a *adminCmd) error {
	return issueOrRotate(a, c.Out, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.IssuedKey, error) {
		return cl.IssueIngestKey(ctx, c.Env)
	}, false)
}

type adminKeysRotateCmd struct {
	Env  string `arg:"" name:"slug" help:"Environment slug."`
	Out  string `help:"Write the other producers' new ingest.key (0600) and key-id into this directory (boxes get theirs over SSH)." type:"path"`
	JSON bool   `help:"Print JSON (includes the key material unless --out is given)."`
}

func (*adminKeysRotateCmd) operation() string { return adminapi.OpRotateIngestKey }

// Run rotates the environment's keys (docs/operations.md, "Ingest keys").
// The call gets at least adminapi.RotateKeysCallBound, whatever --timeout
// says: a shorter bound gives up before the daemon answers. It exits 1,
// after printing every box, when a running box was not rotated.
func (c *adminKeysRotateCmd) Run(a *adminCmd) error {
	a.Timeout = max(a.Timeout, adminapi.RotateKeysCallBound)
	var boxes []adminapi.BoxKeyRotation
	err := issueOrRotate(a, c.Out, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.IssuedKey, error) {
		k, err := cl.RotateIngestKey(ctx, c.Env)
		if k.Boxes != nil {
			boxes = *k.Boxes
		}
		return k, err
	}, true)
	if err != nil {
		return err
	}
	return notRotated(boxes)
}

// notRotated is exit 1 naming how many boxes a rotation did not complete.
func notRotated(boxes []adminapi.BoxKeyRotation) error {
	n := 0
	for _, b := range boxes {
		if b.Outcome != adminapi.RotationRotated {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return &exitError{code: 1, err: fmt.Errorf("%d of %d running boxes not rotated (see each box's line)", n, len(boxes))}
}

// outcomeWords are the outcomes as the text output says them.
var outcomeWords = map[string]string{adminapi.RotationRotated: "rotated", adminapi.RotationUnreachable: "unreachable",
	adminapi.RotationNoAgent: "no agent", adminapi.RotationNotConfirmed: "not confirmed", adminapi.RotationFailed: "failed"}

// printBoxRotation prints one box's part of a rotation on one line.
func printBoxRotation(w io.Writer, b adminapi.BoxKeyRotation) {
	word := outcomeWords[b.Outcome]
	if word == "" {
		word = b.Outcome
	}
	fmt.Fprintf(w, "box %s (droplet %d): %s", b.Box, b.DropletID, word)
	if b.KeyID != "" {
		fmt.Fprintf(w, "; its key: %s", b.KeyID)
	}
	if len(b.RevokedKeyIDs) > 0 {
		fmt.Fprintf(w, "; revoked: %s", strings.Join(b.RevokedKeyIDs, ", "))
	}
	if len(b.PendingKeyIDs) > 0 {
		fmt.Fprintf(w, "; revoked at its first heartbeat with the new key: %s", strings.Join(b.PendingKeyIDs, ", "))
	}
	if b.Reason != "" {
		fmt.Fprintf(w, " — %s", b.Reason)
	}
	fmt.Fprintln(w)
}

// issueOrRotate runs issue (an issue, or a rotation when rotation is set)
// and saves or prints the key material, which the daemon shows only once,
// and a rotation's boxes.
func issueOrRotate(a *adminCmd, out string, asJSON bool, issue func(*adminapi.Client, context.Context) (adminapi.IssuedKey, error), rotation bool) error {
	// The key is active the moment the daemon answers, and its material is
	// shown only once: make sure it can be saved before asking for it, so a
	// refusal here leaves no orphan key behind.
	if out != "" {
		if err := checkKeyDir(out); err != nil {
			return &exitError{code: 1, err: fmt.Errorf("--out: %w (nothing was issued)", err)}
		}
	}
	return runOp(a, asJSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.IssuedKey, error) {
		k, err := issue(cl, ctx)
		if err != nil || out == "" || k.KeyID == "" {
			return k, err
		}
		if err := writeKeyFiles(out, k); err != nil {
			return k, &exitError{code: 1, err: fmt.Errorf("key %s was issued but not saved (%v); revoke it and issue again", k.KeyID, err)}
		}
		k.KeyMaterial = "" // written to the file; never printed as well
		return k, nil
	}, func(w io.Writer, k adminapi.IssuedKey) error {
		switch {
		case k.Boxes != nil:
			for _, b := range *k.Boxes {
				printBoxRotation(w, b)
			}
		case rotation:
			// A daemon older than rotations over SSH marked every key
			// rotating, the boxes' too.
			fmt.Fprintf(w, "running boxes: %s; its rotation gives no box a key over SSH\n", unknownText)
		}
		if k.KeyID == "" {
			// A rotation whose environment's active keys are all running
			// boxes': no key for other producers (docs/operations.md,
			// "Ingest keys").
			fmt.Fprintf(w, "no key issued for other producers: every active key of %s is a running box's\n", k.EnvironmentSlug)
			return nil
		}
		fmt.Fprintf(w, "key id:       %s\nenvironment:  %s\n", k.KeyID, k.EnvironmentSlug)
		for _, id := range k.RotatedKeyIDs {
			fmt.Fprintf(w, "now rotating: %s (revoke it once its producers have the new key)\n", id)
		}
		if out != "" {
			fmt.Fprintf(w, "wrote %s (0600) and %s\n", filepath.Join(out, "ingest.key"), filepath.Join(out, "key-id"))
		} else {
			fmt.Fprintf(w, "key material: %s\n(shown once; it cannot be retrieved again)\n", k.KeyMaterial)
		}
		return nil
	})
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

func (*adminKeysRevokeCmd) operation() string { return adminapi.OpRevokeIngestKey }

// Run revokes the key.
func (c *adminKeysRevokeCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (revokedKeyAnswer, error) {
		return adminapi.CallAs[revokedKeyAnswer](ctx, cl, adminapi.OpRevokeIngestKey, adminapi.RevokeIngestKeyRequest{Action: "revoke", KeyID: c.KeyID})
	}, func(w io.Writer, k revokedKeyAnswer) error {
		fmt.Fprintf(w, "revoked %s (%s)\n", k.KeyID, k.EnvironmentSlug)
		if k.StillSigning == nil {
			fmt.Fprintf(w, "producers still signing with it: %s\n", unknownText)
			return nil
		}
		for _, s := range *k.StillSigning {
			who := "deployment " + s.Deployment
			if s.Box != "" {
				who = "box " + s.Box + " (" + s.Deployment + ")"
			}
			fmt.Fprintf(w, "silenced: %s still signed with it and goes silent; the reaper ends it at its idle deadline\n", who)
		}
		if len(*k.StillSigning) > 0 {
			fmt.Fprintf(w, "to retire a key without silencing anyone: chalupa admin keys rotate %s (or admin box deliver-key BOX)\n", k.EnvironmentSlug)
		}
		return nil
	})
}
