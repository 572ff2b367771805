package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Reaper operation ids (docs/operations.md, "Reaper").
const (
	OpRunReaperTick    = "adminRunReaperTick"
	OpGetReaperStatus  = "adminGetReaperStatus"
	pathReaper         = "/api/admin/reaper"
	pathReaperTick     = "/api/admin/reaper/tick"
	reaperTickSummary  = "run one reaper tick now and return what it did"
	reaperStatusSumary = "the reaper's next wake-up, due deployments, last tick, dry-run flag and whether the write token is configured"
)

var reaperOperations = []Operation{
	{ID: OpRunReaperTick, MCP: MCPPolicy{Access: MCPMutate, Destroys: true}, Method: methodPost, Path: pathReaperTick, Status: http.StatusOK, Mutates: true,
		Request: typeOf[RunReaperTickRequest](), Response: typeOf[ReaperTick](), Summary: reaperTickSummary},
	{ID: OpGetReaperStatus, MCP: mcpRead, Method: methodGet, Path: pathReaper, Status: http.StatusOK,
		Response: typeOf[ReaperStatus](), Summary: reaperStatusSumary},
}

// RunReaperTickRequest is the body of adminRunReaperTick: {} (nothing to
// choose; a tick handles what is due, as the loop would).
type RunReaperTickRequest struct{}

// ReaperTick is what one reaper tick did.
type ReaperTick struct {
	// At is when the tick started (UTC).
	At time.Time `json:"at"`
	// DryRun is true when nothing was destroyed by design.
	DryRun bool `json:"dryRun"`
	// Outcomes lists each deployment handled, in order.
	Outcomes []ReaperOutcome `json:"outcomes"`
	// More is true when more deployments were due than one tick handles
	// (20, or 30 s of provider work).
	More bool `json:"more"`
	// RateLimitedUntil is set when the write token is held back.
	RateLimitedUntil time.Time `json:"rateLimitedUntil,omitzero"`
	// CustomerOrgs lists the customer organizations swept, in sweep order
	// (at most 5; docs/operations.md, "Customer organizations").
	CustomerOrgs []string `json:"customerOrgs,omitempty"`
	// CustomerBudgetSpent is true when the customer sweep stopped at its
	// 22 s provider budget.
	CustomerBudgetSpent bool `json:"customerBudgetSpent,omitempty"`
}

// ReaperOutcome is one deployment a tick handled. Action is destroyed,
// already-gone, would-destroy, warned, failed, rate-limited, lost-claim,
// not-due, skipped or token-invalid; Reason is idle or session-expired; Detail says why
// for warned, failed and rate-limited (never a token or URL).
type ReaperOutcome struct {
	// Organization is the customer organization swept with its own token
	// ("" for the platform token's deployments).
	Organization string `json:"organization,omitempty"`
	Environment  string `json:"environment"`
	Deployment   string `json:"deployment"`
	DropletID    int64  `json:"dropletId,omitempty"`
	Action       string `json:"action"`
	Reason       string `json:"reason"`
	Detail       string `json:"detail,omitempty"`
}

// ReaperStatus answers adminGetReaperStatus.
type ReaperStatus struct {
	// Mode is the reaper mode: live, dry-run or off (CHALUPA_REAPER;
	// docs/operations.md, "Configuration").
	Mode string `json:"mode"`
	// TokenConfigured is whether the platform write token is set,
	// whatever the mode; false means the reaper does not run. With Mode
	// off it is set but unused.
	TokenConfigured bool `json:"tokenConfigured"`
	// DryRun is Mode == "dry-run" (kept for clients of the previous release).
	DryRun bool `json:"dryRun"`
	// CIFreshnessSeconds is how long a CI report counts as live, in
	// seconds (CHALUPA_REAPER_CI_FRESHNESS).
	CIFreshnessSeconds float64 `json:"ciFreshnessSeconds"`
	// NextWakeAt is when the loop wakes on its own; absent while it waits
	// without a timer (no active deployment).
	NextWakeAt time.Time `json:"nextWakeAt,omitzero"`
	// RateLimitedUntil is set while the write token is held back.
	RateLimitedUntil time.Time `json:"rateLimitedUntil,omitzero"`
	// ActiveDeployments counts active deployments (every organization).
	ActiveDeployments int `json:"activeDeployments"`
	// Due lists the deployments due now (at most 50), the earliest first.
	Due []ReaperDue `json:"due"`
	// LastTick is the last tick's result; absent before the first.
	LastTick *ReaperTick `json:"lastTick,omitempty"`
	// Clock is the clock guard's judgement (docs/operations.md, "Reaper").
	Clock ClockGuard `json:"clock"`
	// GraceUntil is when the start-up or clock-step grace ends for
	// deployments without a heartbeat since; absent once it is over.
	GraceUntil time.Time `json:"graceUntil,omitzero"`
	// StorageHeldUntil is set while a storage fault holds idle
	// destruction.
	StorageHeldUntil time.Time `json:"storageHeldUntil,omitzero"`
	// MaxDestroyPerMinute is the destroy pace (CHALUPA_REAPER_MAX_DESTROY).
	MaxDestroyPerMinute int `json:"maxDestroyPerMinute"`
	// Held lists every active deployment under a reaper hold (at most
	// 500), the earliest end first; HeldTotal counts them all
	// (docs/operations.md, "Reaper", holds that end).
	Held      []ReaperHeld `json:"held"`
	HeldTotal int          `json:"heldTotal"`
}

// ReaperHeld is one held deployment: its hold's reason, evidence, end and
// maximum.
type ReaperHeld struct {
	Environment string `json:"environment"`
	Deployment  string `json:"deployment"`
	DropletID   int64  `json:"dropletId,omitempty"`
	// Reason is the hold: clock-suspect, grace, storage, contact, guard,
	// dry-run, backoff, rate-limited, or upgrading (an agent upgrade's,
	// which holds the idle deadline alone) ("" for a hold stored by a
	// release before holds carried their reason).
	Reason string `json:"reason"`
	// Evidence says what the hold rests on (never a secret).
	Evidence string `json:"evidence,omitempty"`
	// Until is when the hold ends (UTC).
	Until time.Time `json:"until"`
	// MaxSeconds is the hold's own maximum, in seconds: an end further
	// ahead than that is re-anchored to now + maximum, with a
	// reaper-hold-reanchored event.
	MaxSeconds float64 `json:"maxSeconds"`
}

// ClockGuard is the reaper's clock guard: while Suspect, the reaper
// destroys nothing anywhere (docs/operations.md, "Reaper").
type ClockGuard struct {
	// Suspect is set while the whole fleet is held; Hold says why.
	Suspect bool       `json:"suspect"`
	Hold    *ClockHold `json:"hold,omitempty"`
}

// ClockHold is the clock guard's hold of the fleet.
type ClockHold struct {
	// Reason is clock-step, clock-behind-mark or fleet-skew.
	Reason string `json:"reason"`
	// Since is when the hold began.
	Since time.Time `json:"since"`
	// OffsetSeconds is the server clock minus the fleet's, in seconds.
	OffsetSeconds float64 `json:"offsetSeconds"`
	// Agreed is set once the fleet agrees with the clock again; the hold
	// lifts when every active deployment heartbeated since, or 30 min
	// after.
	Agreed bool `json:"agreed"`
	// SessionsHeld is false once the session-expiry cap (1 h) passed:
	// expired sessions are destroyed again.
	SessionsHeld bool `json:"sessionsHeld"`
}

// ReaperDue is one due deployment: its decision time and deadlines.
type ReaperDue struct {
	Environment      string    `json:"environment"`
	Deployment       string    `json:"deployment"`
	DropletID        int64     `json:"dropletId,omitempty"`
	DecideAt         time.Time `json:"decideAt"`
	IdleDeadlineAt   time.Time `json:"idleDeadlineAt,omitzero"`
	SessionExpiresAt time.Time `json:"sessionExpiresAt,omitzero"`
	CIActive         bool      `json:"ciActive"`
}

// RunReaperTick calls adminRunReaperTick.
func (c *Client) RunReaperTick(ctx context.Context) (ReaperTick, error) {
	return call[ReaperTick](ctx, c, OpRunReaperTick, RunReaperTickRequest{})
}

// GetReaperStatus calls adminGetReaperStatus.
func (c *Client) GetReaperStatus(ctx context.Context) (ReaperStatus, error) {
	return call[ReaperStatus](ctx, c, OpGetReaperStatus, nil)
}
