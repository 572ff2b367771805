package adminapi

import (
	"context"
	"net/http"
	"time"
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
		Request: typeOf[IssueIngestKeyRequest](), Response: typeOf[IssuedKey](),
		Summary: `issue a fresh ingest key: {"environmentSlug"}`},
	{ID: OpRotateIngestKey, MCP: mcpNever("returns a fresh ingest key, a secret"), Method: methodPost, Path: pathIngestKeys, Status: http.StatusCreated, Mutates: true, Action: "rotate",
		Bound:   RotateKeysCallBound,
		Request: typeOf[RotateIngestKeyRequest](), Response: typeOf[IssuedKey](),
		Summary: `rotate: {"action":"rotate","environmentSlug"}`},
	{ID: OpRevokeIngestKey, MCP: mcpDestructive("revoke key {keyId}"), Method: methodPost, Path: pathIngestKeys, Status: http.StatusOK, Mutates: true, Action: "revoke",
		Request: typeOf[RevokeIngestKeyRequest](), Response: typeOf[RevokedKey](),
		Summary: `revoke: {"action":"revoke","keyId"}`},
}

// The bodies of POST /api/admin/ingest-keys, one type per action: the
// daemon reads the action, then decodes the body strictly as that
// action's type and checks its tags, and the document's request schema is
// anyOf the three, which exclude each other by action (docs/operations.md,
// "OpenAPI"), so what each action requires is declared once. A key
// another action takes is an unknown key (400 bad_body).

// IssueIngestKeyRequest issues a key: {"environmentSlug"}, the action
// absent or "issue". A missing or malformed slug is 400 invalid_slug.
type IssueIngestKeyRequest struct {
	Action          string `json:"action,omitempty" schema:"enum=issue"`
	EnvironmentSlug string `json:"environmentSlug" schema:"required,pattern=slug"`
}

// ActionName implements Actioned.
func (r IssueIngestKeyRequest) ActionName() string { return r.Action }

// RotateIngestKeyRequest rotates an environment's keys:
// {"action":"rotate","environmentSlug"}. A missing or malformed slug is
// 400 invalid_slug.
type RotateIngestKeyRequest struct {
	Action          string `json:"action" schema:"required,enum=rotate"`
	EnvironmentSlug string `json:"environmentSlug" schema:"required,pattern=slug"`
}

// ActionName implements Actioned.
func (r RotateIngestKeyRequest) ActionName() string { return r.Action }

// RevokeIngestKeyRequest revokes one key: {"action":"revoke","keyId"}.
// A missing keyId is 400 bad_body.
type RevokeIngestKeyRequest struct {
	Action string `json:"action" schema:"required,enum=revoke"`
	KeyID  string `json:"keyId" schema:"required"`
}

// ActionName implements Actioned.
func (r RevokeIngestKeyRequest) ActionName() string { return r.Action }

// IssuedKey answers issue and rotate. KeyMaterial (base64url of 32 bytes)
// appears in this response and nowhere else, ever. RotatedKeyIDs lists the
// keys a rotation moved to "rotating". A rotation also reports each running
// box of the environment in Boxes, always present in its answer (an empty
// list when none runs) and absent from an issue's, so a client tells a
// daemon that reached no box from one older than rotations over SSH; when
// every active key of the environment is a running box's, it issues no key
// for other producers and KeyID, KeyMaterial and Status are empty
// (docs/operations.md, "Ingest keys").
type IssuedKey struct {
	KeyID           string            `json:"keyId"`
	KeyMaterial     string            `json:"keyMaterial"`
	EnvironmentSlug string            `json:"environmentSlug"`
	Status          string            `json:"status"`
	RotatedKeyIDs   []string          `json:"rotatedKeyIds,omitempty"`
	Boxes           *[]BoxKeyRotation `json:"boxes,omitempty"`
}

// Outcomes of a box's key rotation (BoxKeyRotation.Outcome;
// docs/operations.md, "Ingest keys").
const (
	// RotationRotated: the droplet holds a fresh key of its own, its agent
	// heartbeated with it, and its earlier keys are revoked.
	RotationRotated = "rotated"
	// RotationUnreachable: the droplet's SSH did not answer (or the
	// connection ended); its old key is untouched.
	RotationUnreachable = "unreachable"
	// RotationNoAgent: the box does not carry the agent, or its droplet
	// has none installed; nothing was written and its key is untouched.
	RotationNoAgent = "no-agent"
	// RotationNotConfirmed: the new key is on the droplet, but no
	// heartbeat signed with it arrived within the wait: the old key keeps
	// verifying, and the first such heartbeat revokes it, after the call
	// and across a restart of the daemon.
	RotationNotConfirmed = "not-confirmed"
	// RotationFailed: the rotation failed otherwise (the host key
	// changed, chalupa's identity was refused, the write failed); the old
	// key is untouched.
	RotationFailed = "failed"
)

// BoxKeyRotation is one box's part of a key rotation (adminRotateIngestKey
// and adminDeliverBoxKey).
type BoxKeyRotation struct {
	Box       string `json:"box"`
	DropletID int64  `json:"dropletId"`
	// Outcome is one of the Rotation* constants.
	Outcome string `json:"outcome"`
	// Reason says why a rotation did not complete (never an address or
	// key material).
	Reason string `json:"reason,omitempty"`
	// KeyID is the key now on the droplet (rotated, not-confirmed).
	KeyID string `json:"keyId,omitempty"`
	// RevokedKeyIDs are the droplet's earlier keys the confirming
	// heartbeat revoked (rotated).
	RevokedKeyIDs []string `json:"revokedKeyIds,omitempty"`
	// PendingKeyIDs are the droplet's earlier keys still verifying until
	// the first heartbeat signed with KeyID revokes them (not-confirmed).
	PendingKeyIDs []string `json:"pendingKeyIds,omitempty"`
}

// RevokedKey answers revoke. StillSigning names the running deployments
// whose newest heartbeat was signed with the key: they go silent now, and
// the reaper destroys their droplets at their idle deadlines
// (docs/operations.md, "Ingest keys": retire a key with a rotation). It is
// always present (an empty list when none), so a client tells "nobody"
// from a daemon older than it.
type RevokedKey struct {
	KeyID           string            `json:"keyId"`
	EnvironmentSlug string            `json:"environmentSlug"`
	Status          string            `json:"status"`
	StillSigning    []SigningProducer `json:"stillSigning"`
}

// SigningProducer is a running deployment that signs with a key, and the
// box whose droplet it is ("" for a producer that is no box).
type SigningProducer struct {
	Deployment string `json:"deployment"`
	DropletID  int64  `json:"dropletId,omitempty"`
	Box        string `json:"box,omitempty"`
}

// RotateKeysCallBound is the least time a client gives one
// adminRotateIngestKey or adminDeliverBoxKey call (docs/operations.md,
// "Ingest keys"): the daemon reaches every running box at once, each
// waiting up to 1 min for SSH (its last attempt may take 20 s more), up to
// 1 min for the remote write and restart, then up to 90 s for the first
// heartbeat signed with the new key: 3 min 50 s.
const RotateKeysCallBound = 5 * time.Minute

// IssueIngestKey calls adminIssueIngestKey for the environment. An unknown
// environment is an *APIError with Status 404.
func (c *Client) IssueIngestKey(ctx context.Context, environmentSlug string) (IssuedKey, error) {
	return call[IssuedKey](ctx, c, OpIssueIngestKey, IssueIngestKeyRequest{EnvironmentSlug: environmentSlug})
}

// RotateIngestKey calls adminRotateIngestKey for the environment.
func (c *Client) RotateIngestKey(ctx context.Context, environmentSlug string) (IssuedKey, error) {
	return call[IssuedKey](ctx, c, OpRotateIngestKey, RotateIngestKeyRequest{Action: "rotate", EnvironmentSlug: environmentSlug})
}

// RevokeIngestKey calls adminRevokeIngestKey. An unknown key is an
// *APIError with Status 404.
func (c *Client) RevokeIngestKey(ctx context.Context, keyID string) (RevokedKey, error) {
	return call[RevokedKey](ctx, c, OpRevokeIngestKey, RevokeIngestKeyRequest{Action: "revoke", KeyID: keyID})
}
