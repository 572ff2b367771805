package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Loop switch operation ids (docs/operations.md, "Loop switches").
const (
	OpListLoops   = "adminListLoops"
	OpPauseLoop   = "adminPauseLoop"
	OpResumeLoop  = "adminResumeLoop"
	pathLoops     = "/api/admin/loops"
	pathLoopPause = "/api/admin/loops/:name/pause"
	pathLoopStart = "/api/admin/loops/:name/resume"
)

var loopOperations = []Operation{
	{ID: OpListLoops, MCP: mcpRead, Method: methodGet, Path: pathLoops, Status: http.StatusOK,
		Response: typeOf[LoopList](),
		Summary:  "the switchable background loops (reaper, retention, costs, jobs): paused or running"},
	{ID: OpPauseLoop, MCP: mcpMutate, Method: methodPost, Path: pathLoopPause, Status: http.StatusOK, Mutates: true,
		Request: typeOf[LoopRequest](), Response: typeOf[LoopSwitch](),
		Summary: "pause a background loop (persisted until resumed; ingest is never paused)"},
	{ID: OpResumeLoop, MCP: mcpMutate, Method: methodPost, Path: pathLoopStart, Status: http.StatusOK, Mutates: true,
		Request: typeOf[LoopRequest](), Response: typeOf[LoopSwitch](),
		Summary: "resume a paused background loop"},
}

// LoopRequest names a switchable loop: reaper, retention, costs or jobs.
type LoopRequest struct {
	Name string `path:"name" json:"-" schema:"enum=reaper|retention|costs|jobs" refuse:"404 unknown_loop"`
}

// LoopSwitch is one switchable loop's state.
type LoopSwitch struct {
	// Name is reaper, retention, costs or jobs.
	Name string `json:"name"`
	// Paused is true while the operator has it paused (it then does no
	// work until resumed, across restarts).
	Paused bool `json:"paused"`
	// ChangedAt is when it was last paused or resumed; absent if never.
	ChangedAt time.Time `json:"changedAt,omitzero"`
	// Configured is false when this daemon does not run the loop at all
	// (the reaper without the platform write token, costs without the
	// read token, jobs without a converge executor).
	Configured bool `json:"configured"`
	// Changed, in a pause or resume answer, is false when the loop already
	// was in the asked state (nothing was written).
	Changed bool `json:"changed,omitempty"`
}

// LoopList answers adminListLoops: every switchable loop, by name.
type LoopList struct {
	Loops []LoopSwitch `json:"loops"`
}

// ListLoops calls adminListLoops.
func (c *Client) ListLoops(ctx context.Context) (LoopList, error) {
	return call[LoopList](ctx, c, OpListLoops, nil)
}

// PauseLoop calls adminPauseLoop.
func (c *Client) PauseLoop(ctx context.Context, name string) (LoopSwitch, error) {
	return call[LoopSwitch](ctx, c, OpPauseLoop, LoopRequest{Name: name})
}

// ResumeLoop calls adminResumeLoop.
func (c *Client) ResumeLoop(ctx context.Context, name string) (LoopSwitch, error) {
	return call[LoopSwitch](ctx, c, OpResumeLoop, LoopRequest{Name: name})
}
