package protocol

import (
	"github.com/chalupa-run/chalupa/internal/apischema"
	"time"

	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// Log bounds an agent plans its chunks and spool by (docs/operations.md,
// "Logs"). The server's own limits default to these and may be set lower;
// a session's answer (LogSessionOpened.MaxChunkBytes) says the one in force.
const (
	// DefaultMaxChunkBytes bounds one chunk (compressed, bytes): 1 MiB, a
	// few seconds on a slow link, so a presigned grant always suffices and
	// a lost upload costs little to redo.
	DefaultMaxChunkBytes = 1 << 20
	// DefaultDeploymentBytes bounds the bytes one deployment may plan over
	// its life: 64 MiB. Compressed journald of a short-lived droplet is a
	// few MiB; the bound caps what a leaked ingest key can make chalupa
	// grant at cents of storage.
	DefaultDeploymentBytes = 64 << 20
)

// servicePattern is a systemd unit name (or a file label): 1–128 of
// [A-Za-z0-9@._:-], the pattern OpenV1's service tag names, so the
// OpenAPI document says the same (docs/operations.md, "OpenAPI").
var servicePattern = lazyre.New(apischema.Patterns["service"])

// ValidService reports whether s can name a log service: 1–128 characters
// of [A-Za-z0-9@._:-] (a systemd unit name or a file label).
func ValidService(s string) bool { return servicePattern.MatchString(s) }

// OpenV1 is the body of POST /api/ingest/logs/sessions.
type OpenV1 struct {
	EnvironmentSlug string `json:"environmentSlug" schema:"required,pattern=slug"`
	DeploymentID    string `json:"deploymentId" schema:"required,pattern=id"`
	// SessionID is the agent's id for the session, kept in its spool so
	// a replay opens the same session.
	SessionID string `json:"sessionId" schema:"required,pattern=id"`
	// Service is the unit (or file label) the session ships (ValidService).
	Service string `json:"service" schema:"required,pattern=service"`
}

// ChunkV1 is the body of POST /api/ingest/logs/plan and /commit: one
// chunk of one session, named by its sequence number and described by its
// compressed size and SHA-256.
type ChunkV1 struct {
	EnvironmentSlug string `json:"environmentSlug" schema:"required,pattern=slug"`
	DeploymentID    string `json:"deploymentId" schema:"required,pattern=id"`
	SessionID       string `json:"sessionId" schema:"required,pattern=id"`
	// Seq is the chunk's sequence number in its session, 0 to 2^40.
	Seq int64 `json:"seq" schema:"minimum=0,maximum=1099511627776"`
	// Size is the chunk's length in bytes, 1 to DefaultMaxChunkBytes
	// (its tag's maximum; a chunk above it is 422 chunk_too_large, the
	// refusal of a chunk above the server's own bound).
	Size int64 `json:"size" schema:"required,minimum=1,maximum=1048576"`
	// SHA256 is the chunk's SHA-256, 64 lowercase hex digits.
	SHA256 string `json:"sha256" schema:"required,pattern=sha256"`
}

// FinishV1 is the body of POST /api/ingest/logs/finish.
type FinishV1 struct {
	EnvironmentSlug string `json:"environmentSlug" schema:"required,pattern=slug"`
	DeploymentID    string `json:"deploymentId" schema:"required,pattern=id"`
	SessionID       string `json:"sessionId" schema:"required,pattern=id"`
	// Final is the session's summary as the agent saw it: stored exactly
	// once; a repeat must be identical.
	Final FinalV1 `json:"final"`
}

// FinalV1 is a session's final payload.
type FinalV1 struct {
	// Chunks and Bytes count what the agent shipped in the session
	// (chunks; bytes, compressed).
	Chunks int64 `json:"chunks" schema:"minimum=0"`
	Bytes  int64 `json:"bytes" schema:"minimum=0"`
	// Cursor is where the agent stopped reading (a journald cursor or a
	// file offset), at most 512 bytes (not a tag: a schema's maxLength
	// counts characters; docs/operations.md, "OpenAPI").
	Cursor string `json:"cursor"`
	// Reason is why the session ended (such as "shutdown", "rotated"),
	// at most 64 bytes (not a tag, as Cursor).
	Reason string `json:"reason"`
}

// LogSessionOpened is the 202 body of POST /api/ingest/logs/sessions.
type LogSessionOpened struct {
	SessionID string    `json:"sessionId"`
	ExpiresAt time.Time `json:"expiresAt"`
	// MaxChunkBytes is the chunk size bound (bytes).
	MaxChunkBytes int64 `json:"maxChunkBytes"`
	// Replayed is true when the session was open already.
	Replayed bool `json:"replayed"`
}

// LogUpload is a presigned PUT: send exactly Headers and the planned
// bytes to URL with Method before ExpiresAt.
type LogUpload struct {
	Method    string            `json:"method"`
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers"`
	ExpiresAt time.Time         `json:"expiresAt"`
}

// LogChunkPlanned is the 202 body of POST /api/ingest/logs/plan.
type LogChunkPlanned struct {
	Seq int64 `json:"seq"`
	// Renewed is true when the seq was planned before with this body: the
	// grant is for the same object.
	Renewed bool `json:"renewed"`
	// Committed is true when the chunk is committed already: Upload is
	// absent and nothing is left to do.
	Committed bool       `json:"committed"`
	Upload    *LogUpload `json:"upload,omitempty"`
}

// LogChunkCommitted is the 202 body of POST /api/ingest/logs/commit.
type LogChunkCommitted struct {
	Committed bool `json:"committed"`
	// Deduplicated is true for an exact repeat: nothing was written.
	Deduplicated bool `json:"deduplicated"`
}

// LogSessionFinished is the 202 body of POST /api/ingest/logs/finish.
type LogSessionFinished struct {
	Finished bool `json:"finished"`
	// Deduplicated is true for an exact repeat: nothing was written.
	Deduplicated bool `json:"deduplicated"`
}
