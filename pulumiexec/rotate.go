package pulumiexec

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// DefaultConfirmWait bounds a rotation's wait for the first heartbeat
// signed with the new key (docs/operations.md, "Ingest keys"). The
// restarted agent heartbeats at once, after its predecessor's shutdown
// (at most 10 s) and its start; a lost or refused first heartbeat is
// followed by one every 30 s, so 90 s covers the first and two more. A
// rotation not confirmed by then completes when the heartbeat comes.
const DefaultConfirmWait = 90 * time.Second

// Rotate gives the box's running droplet a fresh ingest key of its own over
// SSH and waits for the first heartbeat signed with it (docs/operations.md,
// "Ingest keys"): it issues a key of the box's environment and records it
// for the droplet as awaiting that heartbeat, writes the pair and restarts
// the agent (sshdeliver.RotateKey), marks the droplet's earlier keys
// rotating, then waits up to ConfirmWait. The heartbeat itself, in its
// writer unit, revokes the earlier keys (ingest's confirmation), so a
// rotation that outlives the wait, the call or the daemon completes when
// it comes. A rotation that wrote nothing revokes the key it issued and
// leaves the earlier keys as they were. The box must have a running
// droplet at box.Launch.IPv4 (the caller's check); a box without the agent
// is answered no-agent without contacting it. The answer's reasons carry
// no address and no key material.
func (k *KeyDelivery) Rotate(ctx context.Context, box storage.Box) adminapi.BoxKeyRotation {
	dropletID := box.Resources.DropletID
	out := adminapi.BoxKeyRotation{Box: box.Name, DropletID: dropletID}
	if !box.Config.Agent {
		out.Outcome, out.Reason = adminapi.RotationNoAgent, "the box does not carry the agent (--agent=false): its key was left as it was"
		return out
	}
	failed := func(err error, what string) adminapi.BoxKeyRotation {
		k.Log.Error().Err(err).Str("box", box.Name).Int64("droplet", dropletID).Msg("key rotation: " + what)
		out.Outcome, out.Reason = adminapi.RotationFailed, what+"; the old key was left as it was"
		return out
	}
	if _, err := sshdeliver.EnsureIdentity(ctx, k.DB, k.Sealer, k.Clock.Now()); err != nil {
		return failed(err, "chalupa's SSH identity could not be read")
	}
	issued, err := k.Keys.Issue(ctx, box.EnvironmentSlug)
	if err != nil {
		return failed(err, "issuing the new key failed")
	}
	if err := k.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.RecordRotationKeyIssued(ctx, tx, issued.KeyID, box.ID, dropletID, k.Clock.Now())
	}); err != nil {
		k.revoke(ctx, dropletID, issued.KeyID, "revoking the unrecorded ingest key failed")
		return failed(err, "recording the new key failed")
	}
	confirmed := k.Keys.AwaitConfirmation(issued.KeyID)
	defer k.Keys.StopAwaiting(issued.KeyID)
	addr := net.JoinHostPort(box.Launch.IPv4, strconv.Itoa(k.Port))
	res, rerr := k.sshd().RotateKey(ctx, addr, dropletID, sshdeliver.Files{KeyID: issued.KeyID, Key: []byte(issued.KeyMaterial)})
	// Whatever the caller does now, the droplet's files changed or not.
	dctx := context.WithoutCancel(ctx)
	if !res.Written {
		if res.Uncertain {
			// The connection ended during the write, or a rename failed:
			// the droplet may hold the new key. Keep it, awaiting its
			// heartbeat, and leave the old one verifying.
			out.Outcome, out.KeyID = rotationOutcome(rerr), issued.KeyID
			out.Reason = rerr.Error() + "; the droplet may hold the new key, which stays valid and replaces the old one at its first heartbeat"
			return out
		}
		k.revoke(dctx, dropletID, issued.KeyID, "revoking the undelivered ingest key failed")
		out.Outcome, out.Reason = rotationOutcome(rerr), rerr.Error()+"; the old key was left as it was"
		return out
	}
	out.KeyID = issued.KeyID
	var earlier []string
	if err := k.DB.Writer.Do(dctx, func(tx storage.Tx) error {
		var err error
		earlier, err = storage.MarkRotationKeyWritten(dctx, tx, issued.KeyID, k.Clock.Now())
		return err
	}); err != nil {
		k.Log.Error().Err(err).Str("box", box.Name).Int64("droplet", dropletID).Msg("key rotation: recording the written key failed")
	}
	k.Keys.MarkRotating(earlier)
	if rerr != nil {
		out.Outcome, out.PendingKeyIDs = adminapi.RotationNotConfirmed, earlier
		out.Reason = rerr.Error() + "; the agent takes the new key up at its next start, and the old key verifies until then"
		return out
	}
	wait := k.ConfirmWait
	if wait <= 0 {
		wait = DefaultConfirmWait
	}
	select {
	case revoked := <-confirmed:
		out.Outcome, out.RevokedKeyIDs = adminapi.RotationRotated, revoked
		k.Log.Info().Str("box", box.Name).Int64("droplet", dropletID).Int("revoked", len(revoked)).Msg("key rotation confirmed by a heartbeat signed with the new key")
	case <-ctx.Done():
		out.Outcome, out.PendingKeyIDs = adminapi.RotationNotConfirmed, earlier
		out.Reason = "the call ended before a heartbeat signed with the new key arrived; the old key is revoked when one does"
	case <-k.Clock.After(wait):
		out.Outcome, out.PendingKeyIDs = adminapi.RotationNotConfirmed, earlier
		out.Reason = "no heartbeat signed with the new key within " + wait.String() + "; the old key verifies until one arrives, which revokes it"
	}
	return out
}

// rotationOutcome is the outcome of a rotation that wrote nothing.
func rotationOutcome(err error) string {
	switch {
	case errors.Is(err, sshdeliver.ErrUnreachable):
		return adminapi.RotationUnreachable
	case errors.Is(err, sshdeliver.ErrRotateNoAgent):
		return adminapi.RotationNoAgent
	}
	return adminapi.RotationFailed
}
