package protocol

import "time"

// MaxLimitMinutes is the longest idle limit a heartbeat may carry (minutes):
// one week. A longer limit is indistinguishable from "never reap" and is
// refused (docs/operations.md, "Heartbeats and deadlines").
const MaxLimitMinutes = 7 * 24 * 60

// HeartbeatV1 is the body of POST /api/ingest/heartbeat (RFC 3339 times;
// unknown fields are refused). Every heartbeat carries a
// reaper observation (docs/operations.md, "Heartbeats and deadlines").
type HeartbeatV1 struct {
	EnvironmentSlug  string            `json:"environmentSlug" schema:"required,pattern=slug"`
	Deployment       HeartbeatDeploy   `json:"deployment" schema:"required"`
	AgentVersion     string            `json:"agentVersion" schema:"required,pattern=version"`
	SentAt           time.Time         `json:"sentAt" schema:"required"`
	Reaper           ReaperObservation `json:"reaper" schema:"required"`
	SessionExpiresAt *time.Time        `json:"sessionExpiresAt,omitempty"`
}

// HeartbeatDeploy identifies the deployment (one droplet's life).
type HeartbeatDeploy struct {
	ID        string `json:"id" schema:"required,pattern=id"`
	DropletID int64  `json:"dropletId,omitempty" schema:"minimum=0"`
	Region    string `json:"region,omitempty" schema:"pattern=label"`
	Size      string `json:"size,omitempty" schema:"pattern=label"`
}

// ReaperObservation is the agent's idle state. The idle deadline is
// lastActivityAt + limitMinutes, persisted so it survives the agent dying.
// LimitMinutes is 1..MaxLimitMinutes; IdleChecks counts whole idle minutes.
type ReaperObservation struct {
	IdleChecks     int64     `json:"idleChecks" schema:"minimum=0"`
	LimitMinutes   int64     `json:"limitMinutes" schema:"required,minimum=1,maximum=10080"` // maximum: MaxLimitMinutes
	LastActivityAt time.Time `json:"lastActivityAt" schema:"required"`
	CIActive       bool      `json:"ciActive"`
}

// HeartbeatAccepted is the 202 body. SessionExpiresAt is the deployment's
// session expiry as stored (absent: none); SessionExpiresAtClamped is true
// when the heartbeat asked for a later one than its environment's session
// policy allows (launch + maximum), and SessionExpiresAt is then the
// applied bound (docs/operations.md, "Session policies").
type HeartbeatAccepted struct {
	Accepted                bool      `json:"accepted"`
	IdleDeadlineAt          time.Time `json:"idleDeadlineAt"`
	SessionExpiresAt        time.Time `json:"sessionExpiresAt,omitzero"`
	SessionExpiresAtClamped bool      `json:"sessionExpiresAtClamped,omitempty"`
	ServerTime              time.Time `json:"serverTime"`
}
