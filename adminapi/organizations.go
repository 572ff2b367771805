package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Organization operation ids (docs/operations.md, "Customer
// organizations").
const (
	OpCreateOrganization  = "adminCreateOrganization"
	OpListOrganizations   = "adminListOrganizations"
	OpSetProviderToken    = "adminSetProviderToken"
	OpRevokeProviderToken = "adminRevokeProviderToken"
)

const (
	pathOrganizations = "/api/admin/organizations"
	pathProviderToken = "/api/admin/organizations/:slug/provider-token"
)

var organizationOperations = []Operation{
	{ID: OpCreateOrganization, MCP: mcpMutate, Method: methodPost, Path: pathOrganizations, Status: http.StatusCreated, Mutates: true,
		Request: typeOf[CreateOrganizationRequest](), Response: typeOf[Organization](),
		Summary: `create a customer organization: {"slug","name"}`},
	{ID: OpListOrganizations, MCP: mcpRead, Method: methodGet, Path: pathOrganizations, Status: http.StatusOK,
		Response: typeOf[OrganizationList](),
		Summary:  "list organizations with their provider token's status (never the token)"},
	{ID: OpSetProviderToken, MCP: mcpNever("sets a DigitalOcean token, a secret"), Method: methodPut, Path: pathProviderToken, Status: http.StatusOK, Mutates: true,
		Request: typeOf[SetProviderTokenRequest](), Response: typeOf[ProviderTokenStatus](),
		Summary: `store or rotate a customer organization's DigitalOcean token (droplet:read + droplet:delete): {"token"}; never returned`},
	{ID: OpRevokeProviderToken, MCP: mcpNever("provider tokens are managed by the operator only"), Method: methodDelete, Path: pathProviderToken, Status: http.StatusOK, Mutates: true,
		Request: typeOf[RevokeProviderTokenRequest](), Response: typeOf[ProviderTokenStatus](),
		Summary: "revoke a customer organization's stored DigitalOcean token"},
}

// CreateOrganizationRequest is the body of adminCreateOrganization: a
// customer organization. Slug matches ^[a-z0-9][a-z0-9-]{1,62}$; Name
// defaults to the slug, at most 200 bytes of printable UTF-8.
type CreateOrganizationRequest struct {
	Slug string `json:"slug" schema:"required,pattern=slug"`
	Name string `json:"name,omitempty" schema:"pattern=name"`
}

// Organization is one organization. Kind is "platform" or "customer".
// ProviderToken is absent for the platform organization (its credential
// is the platform write token) and for a customer that never stored one.
type Organization struct {
	Slug          string               `json:"slug"`
	Name          string               `json:"name"`
	Kind          string               `json:"kind"`
	ProviderToken *ProviderTokenStatus `json:"providerToken,omitempty"`
}

// OrganizationList answers adminListOrganizations.
type OrganizationList struct {
	Organizations []Organization `json:"organizations"`
}

// SetProviderTokenRequest is adminSetProviderToken's request: the
// organization in the path and the token in the body. The token is
// stored as an envelope under the master key and never returned.
type SetProviderTokenRequest struct {
	OrganizationSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 organization_not_found"`
	// Token is the DigitalOcean token: 1-512 printable ASCII characters
	// without spaces (400 invalid_token; the refusal never holds it).
	Token string `json:"token" schema:"required,pattern=providerToken"`
}

// RevokeProviderTokenRequest names the organization whose token
// adminRevokeProviderToken revokes.
type RevokeProviderTokenRequest struct {
	OrganizationSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 organization_not_found"`
}

// ProviderTokenStatus is what the API says of a stored token: never the
// token. Status is active, invalid (DigitalOcean refused it: 401/403) or
// revoked; Generation counts the tokens stored (a rotation adds one).
type ProviderTokenStatus struct {
	Organization string    `json:"organization"`
	Status       string    `json:"status"`
	Generation   int64     `json:"generation"`
	RotatedAt    time.Time `json:"rotatedAt"`
	RevokedAt    time.Time `json:"revokedAt,omitzero"`
}

// CreateOrganization calls adminCreateOrganization. A duplicate slug is an
// *APIError with Status 409 (organization_exists).
func (c *Client) CreateOrganization(ctx context.Context, req CreateOrganizationRequest) (Organization, error) {
	return call[Organization](ctx, c, OpCreateOrganization, req)
}

// ListOrganizations calls adminListOrganizations.
func (c *Client) ListOrganizations(ctx context.Context) (OrganizationList, error) {
	return call[OrganizationList](ctx, c, OpListOrganizations, nil)
}

// SetProviderToken calls adminSetProviderToken. Errors: *APIError 404
// organization_not_found, 409 not_customer (the platform organization),
// 400 invalid_token.
func (c *Client) SetProviderToken(ctx context.Context, organizationSlug, token string) (ProviderTokenStatus, error) {
	return call[ProviderTokenStatus](ctx, c, OpSetProviderToken, SetProviderTokenRequest{OrganizationSlug: organizationSlug, Token: token})
}

// RevokeProviderToken calls adminRevokeProviderToken. Errors: *APIError
// 404 organization_not_found or no_provider_token, 409 not_customer.
func (c *Client) RevokeProviderToken(ctx context.Context, organizationSlug string) (ProviderTokenStatus, error) {
	return call[ProviderTokenStatus](ctx, c, OpRevokeProviderToken, RevokeProviderTokenRequest{OrganizationSlug: organizationSlug})
}
