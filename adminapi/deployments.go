package adminapi

import (
	"context"
	"net/http"
	"time"
)

// OpEndDeployment ends one deployment's record (docs/operations.md,
// "Ending a deployment").
const OpEndDeployment = "adminEndDeployment"

var deploymentOperations = []Operation{
	{ID: OpEndDeployment, MCP: mcpDestructive("end deployment {id}"), Method: methodPost, Path: "/api/admin/environments/:slug/deployments/:id/end", Status: http.StatusOK, Mutates: true,
		Request: typeOf[EndDeploymentRequest](), Response: typeOf[EndedDeployment](),
		Summary: "end a deployment's record (and its open telemetry sessions); the droplet is not touched"},
}

// EndDeploymentRequest names the deployment adminEndDeployment ends.
type EndDeploymentRequest struct {
	EnvironmentSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 environment_not_found"`
	DeploymentID    string `path:"id" json:"-" schema:"pattern=id" refuse:"404 deployment_not_found"`
}

// EndedDeployment answers adminEndDeployment.
type EndedDeployment struct {
	EnvironmentSlug string `json:"environmentSlug"`
	DeploymentID    string `json:"deploymentId"`
	// EndedAt is when the deployment ended (now, or its earlier end).
	EndedAt time.Time `json:"endedAt"`
	// AlreadyEnded is true when it had ended before this call (nothing
	// was changed).
	AlreadyEnded bool `json:"alreadyEnded"`
	// EnvironmentSunk is true when this call left the environment with no
	// active deployment, so it was marked sunk.
	EnvironmentSunk bool `json:"environmentSunk"`
}

// EndDeployment calls adminEndDeployment. Errors: an *APIError with 404
// environment_not_found or deployment_not_found.
func (c *Client) EndDeployment(ctx context.Context, slug, deploymentID string) (EndedDeployment, error) {
	return call[EndedDeployment](ctx, c, OpEndDeployment, EndDeploymentRequest{EnvironmentSlug: slug, DeploymentID: deploymentID})
}
