package adminapi

import (
	"context"
	"net/http"
)

// Ingest key operation ids. The three share POST /api/admin/ingest-keys and
// the body's action selects (docs/operations.md, "Ingest keys").
const (
	OpIssueIngestKey  = "adminIssueIngestKey"
	OpRotateIngestKey = "adminRotateIngestKey"
	OpRevokeIngestKey = "adminRevokeIngestKey"
)

const pathIngestKeys = "/api/admin/ingest-keys"

var ingestKeyOperations = []Operation{
	{ID: OpIssueIngestKey, MCP: mcpNever("returns a fresh ingest key, a secret"), Method: methodPost, Path: pathIngestKeys, Status: http.StatusCreated, Mutates: true,
		Request: typeOf[IngestKeyRequest](), Response: typeOf[IssuedKey](),
		Summary: `issue a fresh ingest key: {"environmentSlug"}`},
	{ID: OpRotateIngestKey, MCP: mcpNever("returns a fresh ingest key, a secret"), Method: methodPost, Path: pathIngestKeys, Status: http.StatusCreated, Mutates: true, Action: "rotate",
		Request: typeOf[IngestKeyRequest](), Response: typeOf[IssuedKey](),
		Summary: `rotate: {"action":"rotate","environmentSlug"}`},
	{ID: OpRevokeIngestKey, MCP: mcpDestructive("revoke key {keyId}"), Method: methodPost, Path: pathIngestKeys, Status: http.StatusOK, Mutates: true, Action: "revoke",
		Request: typeOf[IngestKeyRequest](), Response: typeOf[RevokedKey](),
		Summary: `revoke: {"action":"revoke","keyId"}`},
}

// IngestKeyRequest is the body of POST /api/admin/ingest-keys:
// {"environmentSlug"} issues; {"action":"rotate","environmentSlug"} rotates;
// {"action":"revoke","keyId"} revokes.
type IngestKeyRequest struct {
	Action          string `json:"action,omitempty"`
	EnvironmentSlug string `json:"environmentSlug,omitempty"`
	KeyID           string `json:"keyId,omitempty"`
}

// ActionName implements Actioned.
func (r IngestKeyRequest) ActionName() string { return r.Action }

// IssuedKey answers issue and rotate. KeyMaterial (base64url of 32 bytes)
// appears in this response and nowhere else, ever. RotatedKeyIDs lists the
// keys a rotation moved to "rotating".
type IssuedKey struct {
	KeyID           string   `json:"keyId"`
	KeyMaterial     string   `json:"keyMaterial"`
	EnvironmentSlug string   `json:"environmentSlug"`
	Status          string   `json:"status"`
	RotatedKeyIDs   []string `json:"rotatedKeyIds,omitempty"`
}

// RevokedKey answers revoke.
type RevokedKey struct {
	KeyID           string `json:"keyId"`
	EnvironmentSlug string `json:"environmentSlug"`
	Status          string `json:"status"`
}

// IssueIngestKey calls adminIssueIngestKey for the environment. An unknown
// environment is an *APIError with Status 404.
func (c *Client) IssueIngestKey(ctx context.Context, environmentSlug string) (IssuedKey, error) {
	return call[IssuedKey](ctx, c, OpIssueIngestKey, IngestKeyRequest{EnvironmentSlug: environmentSlug})
}

// RotateIngestKey calls adminRotateIngestKey for the environment.
func (c *Client) RotateIngestKey(ctx context.Context, environmentSlug string) (IssuedKey, error) {
	return call[IssuedKey](ctx, c, OpRotateIngestKey, IngestKeyRequest{Action: "rotate", EnvironmentSlug: environmentSlug})
}

// RevokeIngestKey calls adminRevokeIngestKey. An unknown key is an
// *APIError with Status 404.
func (c *Client) RevokeIngestKey(ctx context.Context, keyID string) (RevokedKey, error) {
	return call[RevokedKey](ctx, c, OpRevokeIngestKey, IngestKeyRequest{Action: "revoke", KeyID: keyID})
}
