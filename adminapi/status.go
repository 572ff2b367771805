package adminapi

import (
	"context"
	"net/http"
	"time"
)

// OpGetStatus reads the daemon's own state.
const OpGetStatus = "adminGetStatus"

// OpCheckTokens checks every DigitalOcean token the daemon holds now, with
// a read-only call each (`chalupa admin status --check-tokens`;
// docs/operations.md, "Alerts").
const OpCheckTokens = "adminCheckTokens"

var statusOperations = []Operation{
	{ID: OpGetStatus, MCP: mcpRead, Method: methodGet, Path: "/api/admin/status", Status: http.StatusOK,
		Response: typeOf[Status](),
		Summary:  "version, uptime, schema version, database size, replication and storage health"},
	// It writes at DigitalOcean nothing (GET /v2/account per token); its
	// only write is the do-token-refused alert it raises or lifts.
	{ID: OpCheckTokens, MCP: mcpMutate, Method: methodPost, Path: "/api/admin/status/check-tokens", Status: http.StatusOK, Mutates: true,
		Response: typeOf[TokenChecks](),
		Summary:  "check each DigitalOcean token now with a read-only call: works, refused or unreachable per variable, never the value"},
}

// TokenChecks is the answer of adminCheckTokens, and the tokens part of
// adminGetStatus (docs/operations.md, "Alerts").
type TokenChecks struct {
	// Tokens are the DigitalOcean tokens the daemon holds, one per
	// variable, in a fixed order (read, write, provision); empty when it
	// holds none.
	Tokens []TokenCheck `json:"tokens"`
}

// TokenCheck is one token's latest check.
type TokenCheck struct {
	// Variable is the token's environment variable, e.g.
	// DIGITALOCEAN_READ_TOKEN; never the token's value.
	Variable string `json:"variable"`
	// State is "works" (DigitalOcean answered 200, or 403 for a token
	// without account:read), "refused" (401: the do-token-refused alert
	// is open), "unreachable" (no answer about the token: network error,
	// timeout, 5xx or 429; the alert stays as it was) or "unchecked".
	State string `json:"state"`
	// Detail says why a token is refused or unreachable (status and kind
	// of error, never the token); empty when it works.
	Detail string `json:"detail,omitempty"`
	// CheckedAt is when the check ran (absent when unchecked).
	CheckedAt *time.Time `json:"checkedAt,omitempty"`
}

// Status is the answer of adminGetStatus.
type Status struct {
	// Version is the build's version ("dev" for an unreleased build).
	Version string `json:"version"`
	// Origin is the daemon's public origin (CHALUPA_ORIGIN): the one the
	// console accepts forms from, so `chalupa smoke` can name a --url
	// that differs from it (docs/operations.md, "Smoke test").
	Origin string `json:"origin"`
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
	// Storage is whether writes reach the disk and how much room is left
	// (docs/operations.md, "Storage and the writer").
	Storage StorageHealth `json:"storage"`
	// ReaperClock is the reaper's clock guard (docs/operations.md,
	// "Reaper").
	ReaperClock ClockGuard `json:"reaperClock"`
	// ClockOffset is the fleet's clock offset as measured from signed
	// heartbeats (docs/operations.md, "Heartbeats and deadlines"): shown,
	// it holds nothing.
	ClockOffset ClockOffset `json:"clockOffset"`
	// ReaperMode is the reaper's mode: live, dry-run or off
	// (CHALUPA_REAPER; docs/operations.md, "Configuration").
	ReaperMode string `json:"reaperMode"`
	// Costs is on or off (CHALUPA_COSTS).
	Costs string `json:"costs"`
	// ModeNotes say, in words, that the reaper or costs are not fully on
	// (none when the reaper is live and costs on).
	ModeNotes []string `json:"modeNotes"`
	// Tokens are the latest checks of the DigitalOcean tokens the daemon
	// holds (at start and hourly; docs/operations.md, "Alerts"), one per
	// variable; absent from a daemon that does not check them.
	Tokens []TokenCheck `json:"tokens,omitempty"`
	// AlertSinks are the configured alert sinks' delivery states: last
	// delivery, pending messages, failing since (docs/operations.md,
	// "Alerts"); none when no sink is configured.
	AlertSinks []AlertSinkState `json:"alertSinks"`
}

// ClockOffset is the median of receivedAt − sentAt over the latest
// accepted heartbeat of each deployment heard in the last 10 minutes
// (docs/operations.md, "Heartbeats and deadlines"): positive when the
// server's clock is ahead of the agents'.
type ClockOffset struct {
	// Measured is true when at least 5 distinct deployments were heard in
	// the window; the other fields are zero while it is false.
	Measured bool `json:"measured"`
	// Seconds is the fleet's offset, in seconds (millisecond resolution).
	Seconds float64 `json:"seconds"`
	// Deployments is how many deployments it is the median of.
	Deployments int `json:"deployments"`
	// Off is true while |Seconds| is more than 30: a clock-offset event
	// was recorded when it began.
	Off bool `json:"off"`
	// Environments are the environments with at least 5 deployments in
	// the window, at most 16, the most deployments first.
	Environments []EnvironmentOffset `json:"environments"`
}

// EnvironmentOffset is one environment's offset.
type EnvironmentOffset struct {
	// Environment is its slug.
	Environment string `json:"environment"`
	// Seconds is its offset, in seconds; Deployments how many it is the
	// median of.
	Seconds     float64 `json:"seconds"`
	Deployments int     `json:"deployments"`
}

// StorageHealth is the writer's storage health and the free-space guard
// (docs/operations.md, "Storage and the writer" and "Quotas"). No path
// appears.
type StorageHealth struct {
	// Failing is true while commits fail for storage reasons; writes are
	// answered 503 storage_unavailable and /api/ready 503 then.
	Failing bool `json:"failing"`
	// FailingSince is when the current run of faults began.
	FailingSince time.Time `json:"failingSince,omitzero"`
	// LastFault is the kind of the last storage fault ("disk full", "i/o
	// error", "read-only"), and LastFaultAt its time.
	LastFault   string    `json:"lastFault,omitempty"`
	LastFaultAt time.Time `json:"lastFaultAt,omitzero"`
	// Faults counts writer batches that met a storage fault since start.
	Faults int64 `json:"faults"`
	// FreeBytes and TotalBytes measure the data directory's filesystem,
	// in bytes.
	FreeBytes  uint64 `json:"freeBytes"`
	TotalBytes uint64 `json:"totalBytes"`
	// MinFreeBytes is the free-space floor in force (CHALUPA_MIN_FREE_BYTES),
	// in bytes; 0 is off.
	MinFreeBytes uint64 `json:"minFreeBytes"`
	// DiskLow is true from FreeBytes falling below MinFreeBytes until it
	// is back to MinFreeBytes plus its margin (storage.LiftMarginFor):
	// signed ingest other than heartbeats is refused 503 disk_low.
	// DiskLowSince is when it began.
	DiskLow      bool      `json:"diskLow"`
	DiskLowSince time.Time `json:"diskLowSince,omitzero"`
	// DiskError is why free space could not be measured ("" when it
	// was); the guard refuses nothing then.
	DiskError string `json:"diskError,omitempty"`
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
	// Refused is set while the replica path holds another database's
	// history: why, and the cure. Nothing is written to it then and Failing
	// is true (docs/operations.md, "Replication").
	Refused string `json:"refused,omitempty"`
	// Reseeds counts re-seedings since start: the replica held no
	// restorable history and got a fresh snapshot.
	Reseeds int64 `json:"reseeds,omitempty"`
}

// CheckTokens calls adminCheckTokens.
func (c *Client) CheckTokens(ctx context.Context) (TokenChecks, error) {
	return call[TokenChecks](ctx, c, OpCheckTokens, nil)
}

// GetStatus calls adminGetStatus.
func (c *Client) GetStatus(ctx context.Context) (Status, error) {
	return call[Status](ctx, c, OpGetStatus, nil)
}
