package adminapi

import "time"

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
	Version       string      `json:"version"`
	StartedAt     time.Time   `json:"startedAt"`
	UptimeSeconds float64     `json:"uptimeSeconds"`
	SchemaVersion int64       `json:"schemaVersion"`
	DBSizeBytes   int64       `json:"dbSizeBytes"`
	Replication   Replication `json:"replication"`
}

// Replication mirrors storage.ReplicationHealth on the wire.
type Replication struct {
	Kind            string    `json:"kind"`
	LocalTXID       uint64    `json:"localTxid"`
	RemoteTXID      uint64    `json:"remoteTxid"`
	LastSyncAt      time.Time `json:"lastSyncAt,omitzero"`
	LagSeconds      float64   `json:"lagSeconds"`
	LastError       string    `json:"lastError,omitempty"`
	LastErrorAt     time.Time `json:"lastErrorAt,omitzero"`
	SyncErrors      int64     `json:"syncErrors"`
	Failing         bool      `json:"failing"`
	LagLimitSeconds float64   `json:"lagLimitSeconds"`
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
