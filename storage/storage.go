// Package storage is chalupa's durable state: one SQLite file (modernc.org/sqlite,
// pure Go, the same driver Litestream uses in-process), its migrations, the single
// writer every write goes through, the embedded Litestream replication, and the
// typed queries of each table group (*_query.go).
//
// storage imports none of chalupa's other packages; daemon, ingest, reaper and
// pulumiexec depend on it (docs/architecture.md, "Dependency direction").
package storage

import "errors"

// Sentinel errors returned by queries. Callers map them to HTTP statuses; the
// messages never carry SQL text.
var (
	// ErrNotFound is returned when a row addressed by its key does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when a write would violate a uniqueness rule
	// (a duplicate slug, a replayed nonce).
	ErrConflict = errors.New("conflict")
	// ErrClosed is returned by the writer after Close.
	ErrClosed = errors.New("storage closed")
	// ErrDeploymentEnded is returned by ApplyHeartbeat for a heartbeat whose
	// deployment has ended; nothing was written.
	ErrDeploymentEnded = errors.New("deployment has ended")
	// ErrDropletMismatch is returned for a heartbeat naming another droplet
	// than the one its deployment already has: a deployment's droplet id,
	// once known, never changes; nothing was written.
	ErrDropletMismatch = errors.New("deployment belongs to another droplet")
	// ErrDeploymentQuota is returned by ApplyHeartbeatWithin for a first
	// heartbeat that would create more active deployments in its
	// environment than allowed; nothing was written.
	ErrDeploymentQuota = errors.New("active deployment quota reached")
	// ErrRunQuota is returned by RecordRun for a new run of a deployment
	// that holds the maximum number of runs; nothing was written.
	ErrRunQuota = errors.New("run quota reached")
	// ErrEventQuota is returned by RecordProducerEvent for a new event of
	// a deployment that holds the maximum number of producer events;
	// nothing was written.
	ErrEventQuota = errors.New("lifecycle event quota reached")
)
