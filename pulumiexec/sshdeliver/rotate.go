package sshdeliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Key rotation over SSH (docs/operations.md, "Ingest keys" and "SSH key
// delivery").
const (
	// RotateTimeout bounds the remote rotation (write the pair, restart
	// the unit): systemctl restart waits for the agent's stop, which
	// delivers its spool for at most 10 s (the agent's ShutdownDeadline),
	// and for its start.
	RotateTimeout = time.Minute
)

// Errors of RotateKey besides Deliver's (ErrUnreachable, ErrHostKeyChanged,
// ErrAuth); none carries the address, the key id or the key.
var (
	// ErrRotateNoAgent: the droplet has no agent binary; nothing was
	// written.
	ErrRotateNoAgent = errors.New("the droplet has no agent installed; nothing was written")
	// ErrRotateRestart: the new key files are in place but restarting
	// the agent's unit failed: the agent takes the key up at its next
	// start.
	ErrRotateRestart = errors.New("the new key is in place but restarting chalupa-agent.service failed")
)

// RotateResult says how far a rotation got on the droplet.
type RotateResult struct {
	// Written is true once the droplet's key files hold the new key (the
	// remote script said so, or exited past that point).
	Written bool
	// Uncertain is true when the connection ended while the script ran
	// without saying whether it wrote: the droplet may hold the new key.
	Uncertain bool
	// HostKeyFingerprint is the droplet's pinned host key (SHA256 form).
	HostKeyFingerprint string
}

// RotateKey writes a new key pair to the running droplet at addr over SSH
// and restarts its agent, which reads its key files at start
// (docs/operations.md, "Ingest keys"): one remote command (RotateScript)
// checks that the agent is installed, writes key-id and ingest.key to
// temporary files (mode 0600, the agent's user's), renames both into
// place, and restarts AgentUnit. The pair travels on stdin. It waits up
// to UpgradeWait for SSH, as an upgrade does: a running droplet answers at
// once. Errors: ErrBadFiles; ErrUnreachable, ErrHostKeyChanged, ErrAuth
// (nothing written); ErrRotateNoAgent; ErrWrite (nothing renamed);
// ErrRotateRestart (Written); a lost connection (Uncertain unless the
// script said it wrote).
func (d *Deliverer) RotateKey(ctx context.Context, addr string, dropletID int64, f Files) (RotateResult, error) {
	var res RotateResult
	if f.KeyID == "" || len(f.Key) == 0 || !safeName.MatchString(f.KeyID) || bytes.ContainsAny(f.Key, "\n\r") {
		return res, ErrBadFiles
	}
	for _, s := range []string{d.User, d.Dir, d.Owner} {
		if !safeName.MatchString(s) {
			return res, fmt.Errorf("sshdeliver: user, directory and owner must match %s", safeName)
		}
	}
	signer, err := Signer(ctx, d.db.Read, d.sealer)
	if err != nil {
		return res, err
	}
	wait := d.UpgradeWait
	if wait == 0 {
		wait = UpgradeWait
	}
	deadline := d.clock.Now().Add(wait)
	var dr Result
	for {
		dr.Attempts++
		client, _, err := d.connect(ctx, addr, dropletID, signer, &dr)
		if err == nil {
			defer client.Close()
			res.HostKeyFingerprint = dr.HostKeyFingerprint
			return d.runRotate(ctx, client, dropletID, f, res)
		}
		if retryable(err) && ctx.Err() != nil {
			return res, fmt.Errorf("%w on droplet %d: %w while waiting for SSH (%s)", ErrUnreachable, dropletID, ctx.Err(), errKind(err))
		}
		if !retryable(err) {
			return res, err
		}
		if !d.clock.Now().Before(deadline) {
			return res, fmt.Errorf("%w within %s on droplet %d (%d attempts; last: %v)", ErrUnreachable, wait, dropletID, dr.Attempts, errKind(err))
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-d.clock.After(d.Retry):
		}
	}
}

// Exit codes of RotateScript.
const (
	rotateExitWrite   = 17
	rotateExitRename  = 18
	rotateExitRestart = 15
	rotateExitNoAgent = 16
)

// rotateWritten is the line RotateScript prints once both files are in
// place.
const rotateWritten = "written"

func (d *Deliverer) runRotate(ctx context.Context, client *ssh.Client, dropletID int64, f Files, res RotateResult) (RotateResult, error) {
	sess, err := client.NewSession()
	if err != nil {
		return res, fmt.Errorf("%w (droplet %d): %v", ErrWrite, dropletID, errKind(err))
	}
	defer sess.Close()
	sess.Stdin = strings.NewReader(f.KeyID + "\n" + string(f.Key) + "\n")
	var stdout, stderr bytes.Buffer
	sess.Stdout, sess.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	go func() { done <- sess.Run(RotateScript(d.Dir, d.Owner)) }()
	rctx, cancel := context.WithTimeout(ctx, RotateTimeout)
	defer cancel()
	select {
	case err = <-done:
	case <-rctx.Done():
		client.Close()
		err = rctx.Err()
	}
	res.Written = strings.Contains(stdout.String(), rotateWritten+"\n")
	if err == nil {
		res.Written = true
		return res, nil
	}
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		// No exit status: the connection ended (or timed out) while the
		// script ran.
		res.Uncertain = !res.Written
		return res, fmt.Errorf("%w (droplet %d): the connection ended during the rotation (%s)", ErrUnreachable, dropletID, errKind(err))
	}
	msg := bytes.TrimSpace(stderr.Bytes())
	if len(msg) > maxStderr {
		msg = msg[:maxStderr]
	}
	switch ee.ExitStatus() {
	case rotateExitNoAgent:
		return res, fmt.Errorf("%w (droplet %d)", ErrRotateNoAgent, dropletID)
	case rotateExitRestart:
		res.Written = true
		return res, fmt.Errorf("%w (droplet %d): %s", ErrRotateRestart, dropletID, msg)
	case rotateExitRename:
		// One of the two renames may have happened: the droplet may hold
		// either key.
		res.Uncertain = true
		return res, fmt.Errorf("%w (droplet %d): renaming the key files into place: %s", ErrWrite, dropletID, msg)
	}
	return res, fmt.Errorf("%w (droplet %d): exit status %d: %s", ErrWrite, dropletID, ee.ExitStatus(), msg)
}

// RotateScript is the remote command of a key rotation
// (docs/operations.md, "SSH key delivery"): exit 16 when AgentBinary is
// not there (nothing written); read the key id and the key from stdin
// (two lines; the shell's own read and printf, so the key never appears
// in a command line), write both to temporary files under umask 077 in
// dir (0700), mode 0600, owned by owner when that user exists (exit 17:
// nothing renamed); rename ingest.key then key-id into place (exit 18);
// print "written"; restart AgentUnit (exit 15). dir and owner must match
// safeName.
func RotateScript(dir, owner string) string {
	key, id := dir+"/.ingest.key.tmp", dir+"/.key-id.tmp"
	return strings.Join([]string{
		"set -u",
		"umask 077",
		"[ -x " + AgentBinary + " ] || exit 16",
		"install -d -m 0700 " + dir + " || exit 17",
		"IFS= read -r kid || exit 17",
		"IFS= read -r key || exit 17",
		"printf '%s\\n' \"$kid\" > " + id + " || exit 17",
		"printf '%s\\n' \"$key\" > " + key + " || exit 17",
		"chmod 0600 " + id + " " + key + " || exit 17",
		"if id " + owner + " >/dev/null 2>&1; then chown " + owner + ": " + id + " " + key + " || exit 17; fi",
		"mv -f " + key + " " + dir + "/ingest.key || exit 18",
		"mv -f " + id + " " + dir + "/key-id || exit 18",
		"echo " + rotateWritten,
		"systemctl restart " + AgentUnit + " || exit 15",
	}, "\n")
}
