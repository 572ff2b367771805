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
)

const pathEnvironments = "/api/admin/environments"

var environmentOperations = []Operation{
	{ID: OpCreateEnvironment, MCP: mcpMutate, Method: methodPost, Path: pathEnvironments, Status: http.StatusCreated, Mutates: true,
		Request: typeOf[CreateEnvironmentRequest](), Response: typeOf[Environment](),
		Summary: `create an environment: {"slug","name","organization"} (organization: a customer's slug; default the platform)`},
	{ID: OpListEnvironments, MCP: mcpRead, Method: methodGet, Path: pathEnvironments, Status: http.StatusOK,
		Response: typeOf[EnvironmentList](),
		Summary:  "list environments"},
}

// CreateEnvironmentRequest is the body of adminCreateEnvironment. Slug
// matches ^[a-z0-9][a-z0-9-]{1,62}$; Name defaults to the slug, at most 200
// bytes of printable UTF-8 (docs/operations.md, "Admin API").
//
// Organization is the slug of the customer organization the environment
// belongs to; empty, the platform organization (docs/operations.md,
// "Customer organizations").
type CreateEnvironmentRequest struct {
	Slug         string `json:"slug"`
	Name         string `json:"name,omitempty"`
	Organization string `json:"organization,omitempty"`
}

// Environment is one environment. Status is "active" or "sunk";
// Organization is its organization's slug.
type Environment struct {
	Organization string    `json:"organization"`
	Slug         string    `json:"slug"`
	Name         string    `json:"name"`
	Status       string    `json:"status"`
	CreatedAt    time.Time `json:"createdAt"`
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
