package adminapi

import (
	"context"
	"net/http"
	"time"
)

// OpGetStatus reads the daemon's own state.
const OpGetStatus = "adminGetStatus"

var statusOperations = []Operation{
	{ID: OpGetStatus, MCP: mcpRead, Method: methodGet, Path: "/api/admin/status", Status: http.StatusOK,
		Response: typeOf[Status](),
		Summary:  "version, uptime, schema version, database size, replication health"},
}

// Status is the answer of adminGetStatus.
type Status struct {
	// Version is the build's version ("dev" for an unreleased build).
	Version string `json:"version"`
	// StartedAt is when the daemon started (UTC).
	StartedAt time.Time `json:"startedAt"`
	// UptimeSeconds is seconds since StartedAt.
	UptimeSeconds float64 `json:"uptimeSeconds"`
	// SchemaVersion is the newest applied migration.
	SchemaVersion int64 `json:"schemaVersion"`
	// DBSizeBytes is the SQLite file plus its WAL, in bytes.
	DBSizeBytes int64 `json:"dbSizeBytes"`
	// Replication is the replica's health.
	Replication ReplicationHealth `json:"replication"`
	// Loops are the switchable background loops, paused or running
	// (docs/operations.md, "Loop switches").
	Loops []LoopSwitch `json:"loops"`
	// ReaperClock is the reaper's clock guard (docs/operations.md,
	// "Reaper").
	ReaperClock ClockGuard `json:"reaperClock"`
}

// ReplicationHealth is what the daemon knows of its replica
// (docs/operations.md, "Replication"). Errors are reduced to their kind; no
// URL, bucket or credential ever appears.
type ReplicationHealth struct {
	// Kind is "s3" or "file".
	Kind string `json:"kind"`
	// Generation is the replica generation after a rollback: replication
	// goes to the replica URL with "/<generation>" appended (absent: the
	// replica URL itself; docs/operations.md, "Rollback").
	Generation string `json:"generation,omitempty"`
	// LocalTXID is the newest local transaction; RemoteTXID the newest in
	// the replica.
	LocalTXID  uint64 `json:"localTxid"`
	RemoteTXID uint64 `json:"remoteTxid"`
	// LastSyncAt is the last successful replica write or check.
	LastSyncAt time.Time `json:"lastSyncAt,omitzero"`
	// LagSeconds is the age of the oldest acknowledged commit not yet
	// confirmed in the replica (0 when caught up), in seconds.
	LagSeconds float64 `json:"lagSeconds"`
	// LastError is the kind of the last replica failure, and LastErrorAt
	// its time.
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// SyncErrors counts failed sync attempts since start.
	SyncErrors int64 `json:"syncErrors"`
	// FailingSince is when the current run of failed attempts began;
	// absent while the last attempt succeeded.
	FailingSince time.Time `json:"failingSince,omitzero"`
	// Failing is true while lag or errors have lasted longer than the lag
	// limit; /api/ready answers 503 then.
	Failing bool `json:"failing"`
	// LagLimitSeconds is that limit, in seconds.
	LagLimitSeconds float64 `json:"lagLimitSeconds"`
}

// GetStatus calls adminGetStatus.
func (c *Client) GetStatus(ctx context.Context) (Status, error) {
	return call[Status](ctx, c, OpGetStatus, nil)
}
