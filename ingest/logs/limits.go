package logs

import (
	"time"

	"github.com/chalupa-run/chalupa/protocol"
)

// Broker defaults (docs/operations.md, "Logs").
const (
	// DefaultRetention is how long committed chunks are kept: 14 days,
	// past the longest life of a short-lived droplet plus a week to read
	// its logs after it was reaped.
	DefaultRetention = 14 * 24 * time.Hour
	// MaxRetention bounds CHALUPA_LOGS_RETENTION: a year.
	MaxRetention = 365 * 24 * time.Hour
	// DefaultSessionTTL is how long a log session accepts chunks: 24 h,
	// a day of a droplet's life per session; the agent opens another.
	DefaultSessionTTL = 24 * time.Hour
	// DefaultOpenSessions bounds the unfinished, unexpired sessions of one
	// deployment: 8, a few services plus restarts.
	DefaultOpenSessions = 8
	// DefaultDeploymentChunks bounds the chunks one deployment may plan
	// over its life: 256.
	DefaultDeploymentChunks = 256
	// MaxFinalPayload bounds a session's final payload (bytes): 4 KiB, a
	// summary (counts, last cursor), never log lines.
	MaxFinalPayload = 4 << 10
)

// DefaultServices is the allowlist of an environment that has none of its
// own: the agent's unit and cloud-init's, the logs that explain a droplet
// that never reported.
var DefaultServices = []string{"chalupa-agent.service", "cloud-init.service", "cloud-final.service"}

// Limits are the broker's bounds; the zero value of a field means its
// default.
type Limits struct {
	SessionTTL       time.Duration
	MaxChunkBytes    int64
	OpenSessions     int64
	DeploymentChunks int64
	DeploymentBytes  int64
	// GrantTTL is how long a presigned URL lives, at most MaxGrantTTL.
	GrantTTL time.Duration
}

// withDefaults fills zero fields with the defaults.
func (l Limits) withDefaults() Limits {
	if l.SessionTTL <= 0 {
		l.SessionTTL = DefaultSessionTTL
	}
	if l.MaxChunkBytes <= 0 {
		l.MaxChunkBytes = protocol.DefaultMaxChunkBytes
	}
	if l.OpenSessions <= 0 {
		l.OpenSessions = DefaultOpenSessions
	}
	if l.DeploymentChunks <= 0 {
		l.DeploymentChunks = DefaultDeploymentChunks
	}
	if l.DeploymentBytes <= 0 {
		l.DeploymentBytes = protocol.DefaultDeploymentBytes
	}
	if l.GrantTTL <= 0 || l.GrantTTL > MaxGrantTTL {
		l.GrantTTL = DefaultGrantTTL
	}
	return l
}
