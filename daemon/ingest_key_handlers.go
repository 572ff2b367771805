package daemon

import (
	"context"
	"errors"
	"net/http"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/slug"
)

// ingestKeyHandlers issue, rotate and revoke ingest keys; they hold only the
// key ring (docs/operations.md, "Ingest keys").
type ingestKeyHandlers struct {
	keys *ingest.Keyring
}

func (h *ingestKeyHandlers) register(o *operations) {
	handleOp(o, adminapi.OpIssueIngestKey, h.issue)
	handleOp(o, adminapi.OpRotateIngestKey, h.rotate)
	handleOp(o, adminapi.OpRevokeIngestKey, h.revoke)
}

func (h *ingestKeyHandlers) issue(ctx context.Context, req adminapi.IngestKeyRequest) (adminapi.IssuedKey, error) {
	return h.issueWith(ctx, req, h.keys.Issue)
}

func (h *ingestKeyHandlers) rotate(ctx context.Context, req adminapi.IngestKeyRequest) (adminapi.IssuedKey, error) {
	return h.issueWith(ctx, req, h.keys.Rotate)
}

func (h *ingestKeyHandlers) issueWith(ctx context.Context, req adminapi.IngestKeyRequest, issue func(context.Context, string) (adminapi.IssuedKey, error)) (adminapi.IssuedKey, error) {
	if req.KeyID != "" {
		return adminapi.IssuedKey{}, fail(http.StatusBadRequest, "bad_body", "keyId is only used with action revoke")
	}
	if !slug.Valid(req.EnvironmentSlug) {
		return adminapi.IssuedKey{}, fail(http.StatusBadRequest, "invalid_slug", "environmentSlug must match "+slug.Pattern)
	}
	k, err := issue(ctx, req.EnvironmentSlug)
	if errors.Is(err, ingest.ErrEnvironmentNotFound) {
		return adminapi.IssuedKey{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	}
	return k, err
}

func (h *ingestKeyHandlers) revoke(ctx context.Context, req adminapi.IngestKeyRequest) (adminapi.RevokedKey, error) {
	if req.EnvironmentSlug != "" || req.KeyID == "" {
		return adminapi.RevokedKey{}, fail(http.StatusBadRequest, "bad_body", `revoke takes {"action":"revoke","keyId":…} only`)
	}
	k, err := h.keys.Revoke(ctx, req.KeyID)
	if errors.Is(err, ingest.ErrKeyNotFound) {
		return adminapi.RevokedKey{}, fail(http.StatusNotFound, "key_not_found", "no ingest key with this id")
	}
	return k, err
}
