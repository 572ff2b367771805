package daemon

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/storage"
)

// ingestKeyHandlers issue, rotate and revoke ingest keys, and rotate a
// box's key over SSH; they hold the key ring, the database (which boxes
// run, which deployments sign with a key) and the key delivery (chalupa's
// SSH identity; no DigitalOcean token) (docs/operations.md, "Ingest
// keys").
type ingestKeyHandlers struct {
	keys     *ingest.Keyring
	db       *storage.DB
	delivery *pulumiexec.KeyDelivery
}

func (h *ingestKeyHandlers) register(o *operations) {
	handleOp(o, adminapi.OpIssueIngestKey, h.issue)
	handleOp(o, adminapi.OpRotateIngestKey, h.rotate)
	handleOp(o, adminapi.OpRevokeIngestKey, h.revoke)
	handleOp(o, adminapi.OpDeliverBoxKey, h.deliverBoxKey)
}

// rotationMargin is kept from adminapi.RotateKeysCallBound for the answer:
// the rotations run on a context detached from the caller's (a client
// that gives up must not leave a droplet half-written) and end this much
// before the client's bound.
const rotationMargin = 10 * time.Second

func (h *ingestKeyHandlers) issue(ctx context.Context, req adminapi.IssueIngestKeyRequest) (adminapi.IssuedKey, error) {
	if err := checkShape(req); err != nil {
		return adminapi.IssuedKey{}, err
	}
	k, err := h.keys.Issue(ctx, req.EnvironmentSlug)
	if errors.Is(err, ingest.ErrEnvironmentNotFound) {
		return adminapi.IssuedKey{}, errEnvironmentNotFound
	}
	return k, err
}

var errEnvironmentNotFound = fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")

// rotate rotates the environment's keys (docs/operations.md, "Ingest
// keys"): every running box gets a fresh key of its own over SSH, all at
// once, each reported with its outcome; the other producers' active keys
// become rotating, with a fresh key issued for them unless every active
// key is a running box's.
func (h *ingestKeyHandlers) rotate(ctx context.Context, req adminapi.RotateIngestKeyRequest) (adminapi.IssuedKey, error) {
	if err := checkShape(req); err != nil {
		return adminapi.IssuedKey{}, err
	}
	if _, err := storage.EnvironmentBySlug(ctx, h.db.Read, req.EnvironmentSlug); errors.Is(err, storage.ErrNotFound) {
		return adminapi.IssuedKey{}, errEnvironmentNotFound
	} else if err != nil {
		return adminapi.IssuedKey{}, err
	}
	boxes, err := storage.ListBoxes(ctx, h.db.Read, req.EnvironmentSlug)
	if err != nil {
		return adminapi.IssuedKey{}, err
	}
	var running []storage.Box
	var boxKeys []string
	for _, b := range boxes {
		ok, err := boxRunning(ctx, h.db.Read, b)
		if err != nil {
			return adminapi.IssuedKey{}, err
		}
		if !ok {
			continue
		}
		running = append(running, b)
		keys, err := storage.DropletKeys(ctx, h.db.Read, b.ID, b.Resources.DropletID)
		if err != nil {
			return adminapi.IssuedKey{}, err
		}
		boxKeys = append(boxKeys, keys...)
	}
	k, err := h.keys.RotateExcept(ctx, req.EnvironmentSlug, boxKeys, len(running) > 0)
	if errors.Is(err, ingest.ErrEnvironmentNotFound) {
		return adminapi.IssuedKey{}, errEnvironmentNotFound
	}
	if err != nil {
		return adminapi.IssuedKey{}, err
	}
	rctx, cancel := rotationContext(ctx)
	defer cancel()
	out := make([]adminapi.BoxKeyRotation, len(running))
	var wg sync.WaitGroup
	for i, b := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = h.delivery.Rotate(rctx, b)
		}()
	}
	wg.Wait()
	k.Boxes = &out
	return k, nil
}

// rotationContext is the context rotations run on: detached from the
// caller's, ending rotationMargin before the call's bound.
func rotationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), adminapi.RotateKeysCallBound-rotationMargin)
}

// boxRunning reports whether the box has a running droplet a rotation can
// reach: a droplet recorded with its launch address whose deployment
// (droplet-<id>) is active.
func boxRunning(ctx context.Context, q storage.Querier, b storage.Box) (bool, error) {
	id := b.Resources.DropletID
	if id == 0 || b.Launch.DropletID != id || b.Launch.IPv4 == "" {
		return false, nil
	}
	st, err := storage.DeploymentStatus(ctx, q, b.EnvironmentID, pulumiexec.DeploymentID(id))
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	return st == storage.DeploymentActive, err
}

// deliverBoxKey rotates one box's key (adminDeliverBoxKey): 404 for an
// unknown box, 409 agent_off when it does not carry the agent, 409
// no_droplet when it has no running droplet with a known address; every
// attempt answers 200 with its outcome.
func (h *ingestKeyHandlers) deliverBoxKey(ctx context.Context, req adminapi.DeliverBoxKeyRequest) (adminapi.BoxKeyRotation, error) {
	box, err := storage.BoxByRef(ctx, h.db.Read, req.Box)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.BoxKeyRotation{}, errBoxNotFound
	}
	if err != nil {
		return adminapi.BoxKeyRotation{}, err
	}
	if !box.Config.Agent {
		return adminapi.BoxKeyRotation{}, fail(http.StatusConflict, "agent_off", "the box does not carry the agent (--agent=false): no agent reads a delivered key")
	}
	ok, err := boxRunning(ctx, h.db.Read, box)
	if err != nil {
		return adminapi.BoxKeyRotation{}, err
	}
	if !ok {
		return adminapi.BoxKeyRotation{}, fail(http.StatusConflict, "no_droplet", "the box has no running droplet with a known address: run converge up first")
	}
	rctx, cancel := rotationContext(ctx)
	defer cancel()
	return h.delivery.Rotate(rctx, box), nil
}

// revoke revokes a key at once and names the running deployments whose
// newest heartbeat was signed with it: they go silent (docs/operations.md,
// "Ingest keys").
func (h *ingestKeyHandlers) revoke(ctx context.Context, req adminapi.RevokeIngestKeyRequest) (adminapi.RevokedKey, error) {
	if err := checkShape(req); err != nil {
		return adminapi.RevokedKey{}, err
	}
	signing, err := storage.DeploymentsSigningWith(ctx, h.db.Read, req.KeyID)
	if err != nil {
		return adminapi.RevokedKey{}, err
	}
	k, err := h.keys.Revoke(ctx, req.KeyID)
	if errors.Is(err, ingest.ErrKeyNotFound) {
		return adminapi.RevokedKey{}, fail(http.StatusNotFound, "key_not_found", "no ingest key with this id")
	}
	k.StillSigning = []adminapi.SigningProducer{}
	for _, s := range signing {
		k.StillSigning = append(k.StillSigning, adminapi.SigningProducer{Deployment: s.DeploymentID, DropletID: s.DropletID, Box: s.Box})
	}
	return k, err
}
