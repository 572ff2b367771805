package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Environment operation ids.
const (
	OpCreateEnvironment = "adminCreateEnvironment"
	OpListEnvironments  = "adminListEnvironments"
	// OpSetSessionPolicy and OpClearSessionPolicy set and clear an
	// environment's session policy (docs/operations.md, "Session
	// policies").
	OpSetSessionPolicy   = "adminSetSessionPolicy"
	OpClearSessionPolicy = "adminClearSessionPolicy"
)

const (
	pathEnvironments  = "/api/admin/environments"
	pathSessionPolicy = "/api/admin/environments/:slug/session-policy"
)

var environmentOperations = []Operation{
	{ID: OpCreateEnvironment, MCP: mcpMutate, Method: methodPost, Path: pathEnvironments, Status: http.StatusCreated, Mutates: true,
		Request: typeOf[CreateEnvironmentRequest](), Response: typeOf[Environment](),
		Summary: `create an environment: {"slug","name","organization"} (organization: a customer's slug; default the platform)`},
	{ID: OpListEnvironments, MCP: mcpRead, Method: methodGet, Path: pathEnvironments, Status: http.StatusOK,
		Response: typeOf[EnvironmentList](),
		Summary:  "list environments (with their session policies and storage used against the budget)"},
	{ID: OpSetSessionPolicy, MCP: mcpMutate, Method: methodPut, Path: pathSessionPolicy, Status: http.StatusOK, Mutates: true,
		Request: typeOf[SetSessionPolicyRequest](), Response: typeOf[SessionPolicyResult](),
		Summary: `bound an environment's sessions: {"kind":"demo"|"test","maxSessionSeconds":60..2592000}; every deployment then expires by launch + the maximum, active ones at once`},
	{ID: OpClearSessionPolicy, MCP: mcpMutate, Method: methodDelete, Path: pathSessionPolicy, Status: http.StatusOK, Mutates: true,
		Request: typeOf[ClearSessionPolicyRequest](), Response: typeOf[SessionPolicyResult](),
		Summary: "remove an environment's session policy (expiries already given stay)"},
}

// Session policy kinds and bounds (docs/operations.md, "Session policies").
const (
	// SessionKindDemo and SessionKindTest are the policy kinds.
	SessionKindDemo = "demo"
	SessionKindTest = "test"
	// MinSessionSeconds and MaxSessionSeconds bound maxSessionSeconds
	// (one minute, 30 days).
	MinSessionSeconds = 60
	MaxSessionSeconds = 30 * 24 * 60 * 60
)

// SessionPolicy is an environment's session policy: Kind is demo or test,
// MaxSessionSeconds the longest a deployment may live, in seconds from its
// launch.
type SessionPolicy struct {
	Kind              string    `json:"kind"`
	MaxSessionSeconds int64     `json:"maxSessionSeconds"`
	UpdatedAt         time.Time `json:"updatedAt"`
}

// SetSessionPolicyRequest is adminSetSessionPolicy's request: the
// environment in the path, the policy in the body. The tags declare the
// kind (400 invalid_kind) and the bounds of MaxSessionSeconds, in seconds
// (400 invalid_max_session; storage's MinSessionSeconds and
// MaxSessionSeconds, docs/operations.md "OpenAPI").
type SetSessionPolicyRequest struct {
	EnvironmentSlug   string `path:"slug" json:"-" schema:"pattern=slug" refuse:"400 invalid_slug"`
	Kind              string `json:"kind" schema:"required,enum=demo|test"`
	MaxSessionSeconds int64  `json:"maxSessionSeconds" schema:"required,minimum=60,maximum=2592000"`
}

// ClearSessionPolicyRequest names the environment whose policy
// adminClearSessionPolicy removes.
type ClearSessionPolicyRequest struct {
	EnvironmentSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"400 invalid_slug"`
}

// SessionPolicyResult answers both session policy operations. Policy is
// the policy now in force (absent after a clear). Applied counts the
// active deployments whose session expiry a set gave or moved earlier;
// Cleared is true when a clear removed a policy (false: there was none).
type SessionPolicyResult struct {
	Environment string         `json:"environment"`
	Policy      *SessionPolicy `json:"policy,omitempty"`
	Applied     int            `json:"applied"`
	Cleared     bool           `json:"cleared"`
}

// SetSessionPolicy calls adminSetSessionPolicy. Errors: an *APIError with
// 400 invalid_kind or invalid_max_session (nothing written), 404
// environment_not_found.
func (c *Client) SetSessionPolicy(ctx context.Context, req SetSessionPolicyRequest) (SessionPolicyResult, error) {
	return call[SessionPolicyResult](ctx, c, OpSetSessionPolicy, req)
}

// ClearSessionPolicy calls adminClearSessionPolicy. Errors: an *APIError
// with 404 environment_not_found.
func (c *Client) ClearSessionPolicy(ctx context.Context, req ClearSessionPolicyRequest) (SessionPolicyResult, error) {
	return call[SessionPolicyResult](ctx, c, OpClearSessionPolicy, req)
}

// CreateEnvironmentRequest is the body of adminCreateEnvironment. Slug
// matches ^[a-z0-9][a-z0-9-]{1,62}$; Name defaults to the slug, at most 200
// bytes of printable UTF-8 (docs/operations.md, "Admin API").
//
// Organization is the slug of the customer organization the environment
// belongs to; empty, the platform organization (docs/operations.md,
// "Customer organizations").
type CreateEnvironmentRequest struct {
	Slug         string `json:"slug" schema:"required,pattern=slug"`
	Name         string `json:"name,omitempty" schema:"pattern=name"`
	Organization string `json:"organization,omitempty" schema:"pattern=slug"`
}

// Environment is one environment. Status is "active" or "sunk";
// Organization is its organization's slug.
type Environment struct {
	Organization string    `json:"organization"`
	Slug         string    `json:"slug"`
	Name         string    `json:"name"`
	Status       string    `json:"status"`
	CreatedAt    time.Time `json:"createdAt"`
	// SessionPolicy is the environment's session policy, absent when it
	// has none.
	SessionPolicy *SessionPolicy `json:"sessionPolicy,omitempty"`
	// StorageBytes is what the environment's runs, telemetry and producer
	// lifecycle events are charged against its storage budget (bytes;
	// docs/operations.md, "Quotas").
	StorageBytes int64 `json:"storageBytes"`
	// StorageBudgetBytes is the budget (CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES,
	// bytes); 0 is unlimited.
	StorageBudgetBytes int64 `json:"storageBudgetBytes"`
}

// EnvironmentList is the answer of adminListEnvironments.
type EnvironmentList struct {
	Environments []Environment `json:"environments"`
}

// CreateEnvironment calls adminCreateEnvironment. A duplicate slug is an
// *APIError with Status 409 (environment_exists); an unknown organization
// 404 (organization_not_found).
func (c *Client) CreateEnvironment(ctx context.Context, req CreateEnvironmentRequest) (Environment, error) {
	return call[Environment](ctx, c, OpCreateEnvironment, req)
}

// ListEnvironments calls adminListEnvironments.
func (c *Client) ListEnvironments(ctx context.Context) (EnvironmentList, error) {
	return call[EnvironmentList](ctx, c, OpListEnvironments, nil)
}
