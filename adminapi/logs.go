package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Log operation ids (docs/operations.md, "Logs").
const (
	OpListLogs       = "adminListLogs"
	OpGetLogDownload = "adminGetLogDownload"
	OpGetLogChunk    = "adminGetLogChunk"
	OpEraseLogs      = "adminEraseLogs"
	OpSetLogServices = "adminSetLogServices"
)

// MaxLogServices bounds an environment's log service allowlist: a droplet
// ships a few units and files, and every name costs a check at each open.
const MaxLogServices = 32

const eraseLogsPhrasePrefix = "erase logs "

var logOperations = []Operation{
	{ID: OpListLogs, MCP: mcpRead, Method: methodGet, Path: "/api/admin/environments/:slug/deployments/:id/logs", Status: http.StatusOK,
		Request: typeOf[ListLogsRequest](), Response: typeOf[LogListing](),
		Summary: "one deployment's log sessions with their chunks (?service=&session=)"},
	{ID: OpGetLogChunk, MCP: mcpRead, Method: methodGet, Path: "/api/admin/environments/:slug/deployments/:id/logs/:session/chunks/:seq/metadata", Status: http.StatusOK,
		Request: typeOf[LogChunkRequest](), Response: typeOf[LogChunkInfo](),
		Summary: "one log chunk's metadata (state, size, SHA-256, times) without a URL; the operator fetches the bytes with `chalupa admin logs get`"},
	{ID: OpGetLogDownload, MCP: mcpNever("answers a presigned GET URL: whoever holds it reads the chunk for 5 minutes, a credential"), Method: methodGet, Path: "/api/admin/environments/:slug/deployments/:id/logs/:session/chunks/:seq", Status: http.StatusOK,
		Request: typeOf[LogDownloadRequest](), Response: typeOf[LogDownload](),
		Summary: "a short-lived presigned GET of one committed log chunk; the bytes never pass through chalupa"},
	{ID: OpEraseLogs, MCP: MCPPolicy{Access: MCPDestructive, Confirm: "erase logs {environmentSlug}", ConfirmBody: "confirmation"}, Method: methodPost, Path: "/api/admin/logs/erase", Status: http.StatusOK, Mutates: true,
		Request: typeOf[EraseLogsRequest](), Response: typeOf[LogErasure](),
		Summary: `erase one environment's logs, objects and rows: {"environmentSlug","confirmation":"erase logs <slug>"}`},
	{ID: OpSetLogServices, MCP: mcpMutate, Method: methodPut, Path: "/api/admin/environments/:slug/log-services", Status: http.StatusOK, Mutates: true,
		Request: typeOf[SetLogServicesRequest](), Response: typeOf[LogServices](),
		Summary: `replace an environment's log service allowlist: {"services":[…]} or {"reset":true} for the default list`},
}

// EraseLogsPhrase is the confirmation adminEraseLogs requires for the
// environment slug, exactly: "erase logs <slug>".
func EraseLogsPhrase(slug string) string { return eraseLogsPhrasePrefix + slug }

// ListLogsRequest holds adminListLogs's parameters; Service and Session
// ("" for any) narrow the sessions.
type ListLogsRequest struct {
	EnvironmentSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 environment_not_found"`
	DeploymentID    string `path:"id" json:"-" schema:"pattern=id" refuse:"404 deployment_not_found"`
	Service         string `query:"service" json:"-" schema:"pattern=service"`
	Session         string `query:"session" json:"-" schema:"pattern=id"`
}

// LogListing answers adminListLogs.
type LogListing struct {
	EnvironmentSlug string `json:"environmentSlug"`
	DeploymentID    string `json:"deploymentId"`
	// ChunksPlanned and BytesPlanned are the deployment's quota counters
	// (bounds: MaxChunks and MaxBytes).
	ChunksPlanned int64        `json:"chunksPlanned"`
	BytesPlanned  int64        `json:"bytesPlanned"`
	MaxChunks     int64        `json:"maxChunks"`
	MaxBytes      int64        `json:"maxBytes"`
	Sessions      []LogSession `json:"sessions"`
}

// LogSession is one log session with its chunks in sequence order.
type LogSession struct {
	SessionID string    `json:"sessionId"`
	Service   string    `json:"service"`
	OpenedAt  time.Time `json:"openedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// FinishedAt is absent while unfinished; Final is the exact final
	// payload (JSON) finish stored.
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Final      string     `json:"final,omitempty"`
	Chunks     []LogChunk `json:"chunks"`
}

// LogChunk is one planned or committed chunk; SizeBytes of compressed
// bytes, SHA256 in hex.
type LogChunk struct {
	Seq         int64      `json:"seq"`
	State       string     `json:"state"`
	SizeBytes   int64      `json:"sizeBytes"`
	SHA256      string     `json:"sha256"`
	PlannedAt   time.Time  `json:"plannedAt"`
	CommittedAt *time.Time `json:"committedAt,omitempty"`
}

// LogDownloadRequest names one chunk. Seq is its sequence number in
// decimal ("0" is the first: a path parameter cannot be a zero value).
type LogDownloadRequest struct {
	EnvironmentSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 environment_not_found"`
	DeploymentID    string `path:"id" json:"-" schema:"pattern=id" refuse:"404 deployment_not_found"`
	Session         string `path:"session" json:"-" schema:"pattern=id" refuse:"404 log_chunk_not_found"`
	Seq             string `path:"seq" json:"-" decimal:"true" schema:"pattern=decimal" refuse:"404 log_chunk_not_found"`
}

// LogChunkRequest names one chunk for adminGetLogChunk. Seq is its
// sequence number in decimal ("0" is the first).
type LogChunkRequest struct {
	EnvironmentSlug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 environment_not_found"`
	DeploymentID    string `path:"id" json:"-" schema:"pattern=id" refuse:"404 deployment_not_found"`
	Session         string `path:"session" json:"-" schema:"pattern=id" refuse:"404 log_chunk_not_found"`
	Seq             string `path:"seq" json:"-" decimal:"true" schema:"pattern=decimal" refuse:"404 log_chunk_not_found"`
}

// LogChunkInfo answers adminGetLogChunk: a planned or committed chunk as
// the database holds it, with its session's service and state. It holds
// no URL and no credential, so MCP may read it (docs/operations.md, "MCP
// server").
type LogChunkInfo struct {
	EnvironmentSlug string `json:"environmentSlug"`
	DeploymentID    string `json:"deploymentId"`
	SessionID       string `json:"sessionId"`
	Service         string `json:"service"`
	// SessionFinished is true once the session's final payload is stored.
	SessionFinished bool `json:"sessionFinished"`
	LogChunk
}

// LogDownload answers adminGetLogDownload: GET URL before ExpiresAt (at
// most 5 minutes away) for the chunk's SizeBytes of compressed bytes with
// SHA-256 SHA256.
type LogDownload struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
	SizeBytes int64     `json:"sizeBytes"`
	SHA256    string    `json:"sha256"`
}

// EraseLogsRequest is the body of adminEraseLogs; Confirmation must equal
// EraseLogsPhrase(EnvironmentSlug).
type EraseLogsRequest struct {
	EnvironmentSlug string `json:"environmentSlug" schema:"required,pattern=slug"`
	Confirmation    string `json:"confirmation"`
}

// LogErasure is the receipt of adminEraseLogs: counts only.
type LogErasure struct {
	EnvironmentSlug string    `json:"environmentSlug"`
	ErasureID       string    `json:"erasureId"`
	StartedAt       time.Time `json:"startedAt"`
	FinishedAt      time.Time `json:"finishedAt"`
	// Resumed is true when this call finished an erasure an interrupted
	// call began; the counts cover both.
	Resumed bool `json:"resumed"`
	// SessionsRemoved and ChunksRemoved count rows; every removed chunk's
	// object was deleted before its row.
	SessionsRemoved int64 `json:"sessionsRemoved"`
	ChunksRemoved   int64 `json:"chunksRemoved"`
	// RemainingSessions and RemainingChunks: zero unless agents wrote
	// during the erase.
	RemainingSessions int64 `json:"remainingSessions"`
	RemainingChunks   int64 `json:"remainingChunks"`
}

// SetLogServicesRequest is adminSetLogServices's request: the environment
// in the path; Services (1..MaxLogServices distinct names of 1-128
// [A-Za-z0-9@._:-]) replace its allowlist, or Reset (with no Services)
// restores the default list. The tag declares each name's pattern (400
// invalid_services); the count, repeats and services-or-reset are the
// handler's (docs/operations.md, "OpenAPI").
type SetLogServicesRequest struct {
	EnvironmentSlug string   `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 environment_not_found"`
	Services        []string `json:"services,omitempty" schema:"pattern=service"`
	Reset           bool     `json:"reset,omitempty"`
}

// LogServices answers adminSetLogServices: the allowlist now in force, in
// the order given; Default is true when it is the built-in list.
type LogServices struct {
	EnvironmentSlug string   `json:"environmentSlug"`
	Services        []string `json:"services"`
	Default         bool     `json:"default"`
}

// ListLogs calls adminListLogs.
func (c *Client) ListLogs(ctx context.Context, req ListLogsRequest) (LogListing, error) {
	return call[LogListing](ctx, c, OpListLogs, req)
}

// GetLogDownload calls adminGetLogDownload. An uncommitted or unknown
// chunk is 404 log_chunk_not_found; without CHALUPA_LOGS_URL 503
// logs_not_configured.
func (c *Client) GetLogDownload(ctx context.Context, req LogDownloadRequest) (LogDownload, error) {
	return call[LogDownload](ctx, c, OpGetLogDownload, req)
}

// GetLogChunk calls adminGetLogChunk. An unknown chunk is 404
// log_chunk_not_found; it needs no log storage.
func (c *Client) GetLogChunk(ctx context.Context, req LogChunkRequest) (LogChunkInfo, error) {
	return call[LogChunkInfo](ctx, c, OpGetLogChunk, req)
}

// EraseLogs calls adminEraseLogs. A wrong phrase is 422
// confirmation_mismatch; an unknown environment 404 environment_not_found.
func (c *Client) EraseLogs(ctx context.Context, req EraseLogsRequest) (LogErasure, error) {
	return call[LogErasure](ctx, c, OpEraseLogs, req)
}

// SetLogServices calls adminSetLogServices. Errors: *APIError 404
// environment_not_found, 400 invalid_services (a bad, repeated or missing
// name, too many, or names given with reset).
func (c *Client) SetLogServices(ctx context.Context, req SetLogServicesRequest) (LogServices, error) {
	return call[LogServices](ctx, c, OpSetLogServices, req)
}
