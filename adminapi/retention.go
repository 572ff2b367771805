package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Retention operation ids.
const (
	OpRunRetention        = "adminRunRetention"
	OpListRetentionRuns   = "adminListRetentionRuns"
	pathRetentionRun      = "/api/admin/retention/run"
	pathRetentionRunsList = "/api/admin/retention/runs"
)

var retentionOperations = []Operation{
	{ID: OpRunRetention, MCP: mcpMutate, Method: methodPost, Path: pathRetentionRun, Status: http.StatusOK, Mutates: true,
		Response: typeOf[RetentionRun](),
		Summary:  "run one retention pass now (fold, finalize, prune) and return its report"},
	{ID: OpListRetentionRuns, MCP: mcpRead, Method: methodGet, Path: pathRetentionRunsList, Status: http.StatusOK,
		Response: typeOf[RetentionRunList](),
		Summary:  "recent retention passes, newest first"},
}

// RetentionRun is one retention pass's report (docs/operations.md,
// "Retention").
type RetentionRun struct {
	ID int64 `json:"id"`
	// Trigger is "schedule" (the hourly loop) or "admin".
	Trigger   string    `json:"trigger"`
	StartedAt time.Time `json:"startedAt"`
	// DurationMs is the pass's wall time in milliseconds.
	DurationMs int64 `json:"durationMs"`
	// TelemetryMinuteRollups is the exact number of source windows folded
	// into hourly rollups and removed.
	TelemetryMinuteRollups int64 `json:"telemetryMinuteRollups"`
	// TelemetryHourlyRollups counts hourly rollup inserts and updates.
	TelemetryHourlyRollups int64 `json:"telemetryHourlyRollups"`
	// TelemetryBatches counts the fold batches committed.
	TelemetryBatches int64 `json:"telemetryBatches"`
	// TelemetryBacklogPending is true when detail older than the fold
	// cutoff was left: an incomplete pass (the next one continues).
	TelemetryBacklogPending bool `json:"telemetryBacklogPending"`
	// TelemetryDrainStopReason is "drained", "deadline" or "batch-limit".
	TelemetryDrainStopReason string `json:"telemetryDrainStopReason"`
	// HeartbeatsPruned counts raw heartbeats deleted.
	HeartbeatsPruned int64 `json:"heartbeatsPruned"`
	// SessionsFinalized counts terminal summaries written.
	SessionsFinalized int64 `json:"sessionsFinalized"`
	// StackStatesPruned counts converge checkpoints deleted: all but each
	// stack's newest 10, and every one of a box destroyed more than 30 days
	// ago.
	StackStatesPruned int64 `json:"stackStatesPruned"`
	// Error names the step that failed; absent for a complete pass.
	Error string `json:"error,omitempty"`
}

// RetentionRunList answers adminListRetentionRuns: the most recent passes
// (at most 48, two days of hourly runs), newest first.
type RetentionRunList struct {
	Runs []RetentionRun `json:"runs"`
}

// RunRetention calls adminRunRetention. It waits for a pass already
// running to end, then runs its own.
func (c *Client) RunRetention(ctx context.Context) (RetentionRun, error) {
	return call[RetentionRun](ctx, c, OpRunRetention, nil)
}

// ListRetentionRuns calls adminListRetentionRuns.
func (c *Client) ListRetentionRuns(ctx context.Context) (RetentionRunList, error) {
	return call[RetentionRunList](ctx, c, OpListRetentionRuns, nil)
}
