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
	{ID: OpListEvents, Method: methodGet, Path: "/api/admin/events", Status: http.StatusOK,
		Response: typeOf[EventList](),
		Summary:  "lifecycle events (reaper, quotas), newest first, at most 500"},
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

// EventFilter selects events by environment slug and kind ("" selects
// all).
type EventFilter struct {
	Environment string
	Kind        string
}

// ListEvents calls adminListEvents and keeps the events f selects. The
// operation takes no parameters yet (GET operations carry no body, and the
// table has no query parameters on this branch), so the filter applies to
// the newest MaxEvents events; it moves to the server with query
// parameters, without changing this method.
func (c *Client) ListEvents(ctx context.Context, f EventFilter) (EventList, error) {
	all, err := call[EventList](ctx, c, OpListEvents, nil)
	if err != nil {
		return EventList{}, err
	}
	out := EventList{Events: []Event{}}
	for _, e := range all.Events {
		if (f.Environment == "" || e.Environment == f.Environment) && (f.Kind == "" || e.Kind == f.Kind) {
			out.Events = append(out.Events, e)
		}
	}
	return out, nil
}
