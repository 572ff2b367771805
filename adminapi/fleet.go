package adminapi

import (
	"context"
	"net/http"
	"time"
)

// OpListFleet reads environments with their deployments.
const OpListFleet = "adminListFleet"

var fleetOperations = []Operation{
	{ID: OpListFleet, MCP: mcpRead, Method: methodGet, Path: "/api/admin/fleet", Status: http.StatusOK,
		Response: typeOf[Fleet](),
		Summary:  "environments with their deployments and key counts"},
}

// Fleet answers adminListFleet.
type Fleet struct {
	Environments []FleetEnvironment `json:"environments"`
}

// FleetEnvironment is one environment with its deployments: every active
// one, and the most recent ended ones (docs/operations.md, "Admin API").
type FleetEnvironment struct {
	Slug   string `json:"slug"`
	Name   string `json:"name"`
	Status string `json:"status"`
	// Keys counts ingest keys by status (active, rotating, revoked).
	Keys        map[string]int    `json:"keys"`
	Deployments []FleetDeployment `json:"deployments"`
}

// FleetDeployment is one deployment as the fleet view shows it. Times are
// RFC 3339 UTC; absent ones are omitted.
type FleetDeployment struct {
	ID               string    `json:"id"`
	DropletID        int64     `json:"dropletId,omitempty"`
	Region           string    `json:"region,omitempty"`
	Size             string    `json:"size,omitempty"`
	Status           string    `json:"status"`
	LaunchedAt       time.Time `json:"launchedAt"`
	EndedAt          time.Time `json:"endedAt,omitzero"`
	LastHeartbeatAt  time.Time `json:"lastHeartbeatAt,omitzero"`
	IdleDeadlineAt   time.Time `json:"idleDeadlineAt,omitzero"`
	SessionExpiresAt time.Time `json:"sessionExpiresAt,omitzero"`
	CIActive         bool      `json:"ciActive"`
	AgentVersion     string    `json:"agentVersion,omitempty"`
}

// ListFleet calls adminListFleet.
func (c *Client) ListFleet(ctx context.Context) (Fleet, error) {
	return call[Fleet](ctx, c, OpListFleet, nil)
}
