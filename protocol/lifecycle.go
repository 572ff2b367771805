package protocol

import "time"

// Lifecycle event kinds a producer reports (docs/operations.md,
// "Lifecycle events and runs").
const (
	EventLaunched   = "launched"
	EventBooted     = "booted"
	EventCIStarted  = "ci-started"
	EventCIFinished = "ci-finished"
	EventShutdown   = "shutdown"
	EventSunk       = "sunk"
)

// LifecycleEventV1 is the body of POST /api/ingest/lifecycle (RFC 3339
// times; unknown fields refused). ID is chosen by the producer and stable
// across retries (docs/operations.md, "Lifecycle events and runs").
type LifecycleEventV1 struct {
	EnvironmentSlug string          `json:"environmentSlug" schema:"required,pattern=slug"`
	ID              string          `json:"id" schema:"required,pattern=id"`
	Kind            string          `json:"kind" schema:"required,enum=launched|booted|ci-started|ci-finished|shutdown|sunk"`
	OccurredAt      time.Time       `json:"occurredAt" schema:"required"`
	Deployment      LifecycleDeploy `json:"deployment" schema:"required"`
}

// LifecycleDeploy is the deployment a lifecycle event is about. Managed
// applies to `launched` only (a deployment the managed worker created).
type LifecycleDeploy struct {
	ID        string `json:"id" schema:"required,pattern=id"`
	DropletID int64  `json:"dropletId,omitempty" schema:"minimum=0"`
	Region    string `json:"region,omitempty" schema:"pattern=label"`
	Size      string `json:"size,omitempty" schema:"pattern=label"`
	Managed   bool   `json:"managed,omitempty"`
}
