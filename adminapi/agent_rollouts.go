package adminapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Agent rollout operation ids (docs/operations.md, "Agent install", under
// Upgrade).
const (
	OpStartAgentRollout = "adminStartAgentRollout"
	OpGetAgentRollout   = "adminGetAgentRollout"
	pathAgentRollouts   = "/api/admin/agent-rollouts"
	pathAgentRollout    = "/api/admin/agent-rollouts/:id"
)

// Rollout batch bounds: after the first box, the boxes upgraded at once.
const (
	// DefaultRolloutBatch is --batch's default.
	DefaultRolloutBatch = 5
	// MaxRolloutBatch bounds it: each box of a batch holds an SSH session
	// for minutes.
	MaxRolloutBatch = 50
)

var agentRolloutOperations = []Operation{
	{ID: OpStartAgentRollout, Method: methodPost, Path: pathAgentRollouts, Status: http.StatusAccepted, Mutates: true,
		Request: typeOf[StartAgentRolloutRequest](), Response: typeOf[AgentRollout](),
		// It replaces the agent on every running box of its scope, one
		// box first and then in batches: a call names its scope.
		MCP:     mcpDestructive("roll out the agent to {environment}"),
		Summary: `start a rollout of CHALUPA_AGENT_VERSION to the running boxes of {"environment"} (or {"all":true}) in the daemon: one box first, then batches of {"batch"} (default 5), stopping at the first box whose agent does not report`},
	{ID: OpGetAgentRollout, MCP: mcpRead, Method: methodGet, Path: pathAgentRollout, Status: http.StatusOK,
		Request: typeOf[GetAgentRolloutRequest](), Response: typeOf[AgentRollout](),
		Summary: "one agent rollout: its status and its account so far (upgraded, skipped, failed, not tried)"},
}

// StartAgentRolloutRequest is adminStartAgentRollout's: one environment
// or all, and the batch size (0: DefaultRolloutBatch; 1–MaxRolloutBatch).
// The tags declare the slug and the batch's range (422 invalid_rollout);
// "environment or all, not both" is the handler's (docs/operations.md,
// "OpenAPI").
type StartAgentRolloutRequest struct {
	Environment string `json:"environment,omitempty" schema:"pattern=slug"`
	All         bool   `json:"all,omitempty"`
	Batch       int    `json:"batch,omitempty" schema:"minimum=0,maximum=50"`
}

// GetAgentRolloutRequest names a rollout.
type GetAgentRolloutRequest struct {
	ID string `path:"id" json:"-"`
}

// AgentUpgradeOutcome is what one box's agent upgrade came to
// (docs/operations.md, "Agent install", under Upgrade).
type AgentUpgradeOutcome struct {
	Box       string `json:"box"`
	DropletID int64  `json:"dropletId,omitempty"`
	// Status is upgraded, skipped or failed.
	Status string `json:"status"`
	// Reason is why it was skipped, or which failure it was: "never
	// reported", "crashed", "wrong version" or "upgrade failed".
	Reason string `json:"reason,omitempty"`
	// Restore is, for a failure, what became of the previous agent: "not
	// needed" (nothing was replaced), "reported", "silent" or "not run".
	Restore string `json:"restore,omitempty"`
	// Arch is the droplet's architecture, when the upgrade reached it.
	Arch string `json:"arch,omitempty"`
	// Before and After are the agent's `version` lines before and after.
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// Detail is the whole account in words.
	Detail string `json:"detail,omitempty"`
}

// AgentRolloutSummary is a rollout's account: each box of its scope in one
// list.
type AgentRolloutSummary struct {
	Upgraded []AgentUpgradeOutcome `json:"upgraded"`
	Skipped  []AgentUpgradeOutcome `json:"skipped"`
	Failed   []AgentUpgradeOutcome `json:"failed"`
	// Running are the boxes being upgraded now; NotTried the boxes a
	// failure stopped the rollout before (left on their version).
	Running  []string `json:"running"`
	NotTried []string `json:"notTried"`
}

// AgentRollout is one agent rollout. Status is running, succeeded or
// failed (a box failed, or the daemon stopped: Error says which).
type AgentRollout struct {
	ID          string              `json:"id"`
	Environment string              `json:"environment"`
	Version     string              `json:"version"`
	Batch       int                 `json:"batch"`
	Status      string              `json:"status"`
	Error       string              `json:"error,omitempty"`
	Summary     AgentRolloutSummary `json:"summary"`
	CreatedAt   time.Time           `json:"createdAt"`
	FinishedAt  *time.Time          `json:"finishedAt,omitempty"`
}

// DecodeRolloutSummary decodes a stored summary (an empty one for
// malformed JSON, which no rollout writes).
func DecodeRolloutSummary(b []byte) AgentRolloutSummary {
	var s AgentRolloutSummary
	_ = json.Unmarshal(b, &s)
	return s
}

// StartAgentRollout calls adminStartAgentRollout. Errors: an *APIError
// with 422 agent_release_invalid, invalid_rollout (scope or batch), 404
// environment_not_found, 409 rollout_in_progress.
func (c *Client) StartAgentRollout(ctx context.Context, req StartAgentRolloutRequest) (AgentRollout, error) {
	return call[AgentRollout](ctx, c, OpStartAgentRollout, req)
}

// GetAgentRollout calls adminGetAgentRollout. Errors: an *APIError with
// 404 not_found.
func (c *Client) GetAgentRollout(ctx context.Context, id string) (AgentRollout, error) {
	return call[AgentRollout](ctx, c, OpGetAgentRollout, GetAgentRolloutRequest{ID: id})
}
