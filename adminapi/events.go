package adminapi

import (
	"context"
	"net/http"
	"time"
)

// OpListEvents lists lifecycle events.
const OpListEvents = "adminListEvents"

// MaxEvents is how many events adminListEvents answers at most: the newest.
const MaxEvents = 500

var eventOperations = []Operation{
	{ID: OpListEvents, MCP: mcpRead, Method: methodGet, Path: "/api/admin/events", Status: http.StatusOK,
		Request: typeOf[ListEventsRequest](), Response: typeOf[EventList](),
		Summary: "lifecycle events (reaper, quotas), newest first, at most 500 (?environment=SLUG&kind=KIND)"},
}

// ListEventsRequest holds adminListEvents' query parameters; "" selects
// all.
type ListEventsRequest struct {
	// Environment is an environment slug.
	Environment string `query:"environment" json:"-" schema:"pattern=slug"`
	// Kind is an event kind (reaper-destroyed, reaper-warning, …).
	Kind string `query:"kind" json:"-"`
}

// EventList answers adminListEvents.
type EventList struct {
	Events []Event `json:"events"`
}

// Event is one lifecycle event. Reason is "", idle, session-expired,
// provider or manual.
type Event struct {
	ID          string    `json:"id"`
	Environment string    `json:"environment,omitempty"`
	Deployment  string    `json:"deployment,omitempty"`
	Kind        string    `json:"kind"`
	Reason      string    `json:"reason,omitempty"`
	Message     string    `json:"message,omitempty"`
	OccurredAt  time.Time `json:"occurredAt"`
}

// ListEvents calls adminListEvents: the newest MaxEvents events req
// selects.
func (c *Client) ListEvents(ctx context.Context, req ListEventsRequest) (EventList, error) {
	return call[EventList](ctx, c, OpListEvents, req)
}
