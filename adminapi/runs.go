package adminapi

import (
	"context"
	"net/http"
	"time"
)

// OpListRuns lists an environment's CI suite runs with their artifacts
// (docs/operations.md, "Lifecycle events and runs").
const OpListRuns = "adminListRuns"

// MaxRuns is how many runs adminListRuns answers at most: the most
// recently started.
const MaxRuns = 200

var runOperations = []Operation{
	{ID: OpListRuns, MCP: mcpRead, Method: methodGet, Path: "/api/admin/environments/:slug/runs", Status: http.StatusOK,
		Request: typeOf[ListRunsRequest](), Response: typeOf[RunList](),
		Summary: "an environment's CI suite runs with their artifacts, most recently started first, at most 200"},
}

// ListRunsRequest names the environment adminListRuns lists.
type ListRunsRequest struct {
	EnvironmentSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 environment_not_found"`
}

// RunList answers adminListRuns.
type RunList struct {
	EnvironmentSlug string `json:"environmentSlug"`
	Runs            []Run  `json:"runs"`
}

// Run is one CI suite run as reported (POST /api/ingest/runs). Status is
// passed, failed, cancelled or errored; Fingerprint is the hex SHA-256 of
// the normalized report.
type Run struct {
	RunID       string     `json:"runId"`
	Deployment  string     `json:"deployment"`
	Suite       string     `json:"suite"`
	Status      string     `json:"status"`
	Commit      string     `json:"commit,omitempty"`
	StartedAt   time.Time  `json:"startedAt"`
	FinishedAt  time.Time  `json:"finishedAt"`
	ReceivedAt  time.Time  `json:"receivedAt"`
	Fingerprint string     `json:"fingerprint"`
	Artifacts   []Artifact `json:"artifacts"`
}

// Artifact is one ArtifactRefV1 of a run.
type Artifact struct {
	V         int     `json:"v"`
	Name      string  `json:"name"`
	MediaType string  `json:"mediaType"`
	SizeBytes int64   `json:"sizeBytes"`
	SHA256    string  `json:"sha256"`
	Locator   Locator `json:"locator"`
}

// Locator is an artifact's locator: kind https with URL, or kind local
// with ID.
type Locator struct {
	Kind string `json:"kind"`
	URL  string `json:"url,omitempty"`
	ID   string `json:"id,omitempty"`
}

// ListRuns calls adminListRuns. Errors: an *APIError with 404
// environment_not_found.
func (c *Client) ListRuns(ctx context.Context, slug string) (RunList, error) {
	return call[RunList](ctx, c, OpListRuns, ListRunsRequest{EnvironmentSlug: slug})
}
