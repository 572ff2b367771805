package adminapi

import (
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// ErrorBody is every error response: {"error":{"code","message"}}. code is
// stable and machine-readable; message is for people and never carries SQL,
// key material, tokens, URLs or fleet data.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Status is the answer of adminGetStatus.
type Status struct {
	Version       string                    `json:"version"`
	StartedAt     time.Time                 `json:"startedAt"`
	UptimeSeconds float64                   `json:"uptimeSeconds"`
	SchemaVersion int64                     `json:"schemaVersion"`
	DBSizeBytes   int64                     `json:"dbSizeBytes"`
	Replication   storage.ReplicationHealth `json:"replication"`
}

// CreateEnvironmentRequest is the body of adminCreateEnvironment. Slug
// matches ^[a-z0-9][a-z0-9-]{1,62}$; Name defaults to the slug.
type CreateEnvironmentRequest struct {
	Slug string `json:"slug"`
	Name string `json:"name,omitempty"`
}

// Environment is one environment.
type Environment struct {
	Slug      string    `json:"slug"`
	Name      string    `json:"name"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
}

// EnvironmentList is the answer of adminListEnvironments.
type EnvironmentList struct {
	Environments []Environment `json:"environments"`
}

// IngestKeyRequest is the body of POST /api/admin/ingest-keys (seed 002,
// "Ingest key lifecycle"): {"environmentSlug"} issues;
// {"action":"rotate","environmentSlug"} rotates; {"action":"revoke","keyId"}
// revokes.
type IngestKeyRequest struct {
	Action          string `json:"action,omitempty"`
	EnvironmentSlug string `json:"environmentSlug,omitempty"`
	KeyID           string `json:"keyId,omitempty"`
}

// IssuedKey answers issue and rotate. KeyMaterial (base64url of 32 bytes)
// appears in this response and nowhere else, ever.
type IssuedKey struct {
	KeyID           string   `json:"keyId"`
	KeyMaterial     string   `json:"keyMaterial"`
	EnvironmentSlug string   `json:"environmentSlug"`
	Status          string   `json:"status"`
	RotatedKeyIDs   []string `json:"rotatedKeyIds,omitempty"`
}

// RevokedKey answers revoke.
type RevokedKey struct {
	KeyID           string `json:"keyId"`
	EnvironmentSlug string `json:"environmentSlug"`
	Status          string `json:"status"`
}

// Fleet answers adminListFleet.
type Fleet struct {
	Environments []FleetEnvironment `json:"environments"`
}

// FleetEnvironment is one environment with its deployments.
type FleetEnvironment struct {
	Slug        string            `json:"slug"`
	Name        string            `json:"name"`
	Status      string            `json:"status"`
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
