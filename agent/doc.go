// Package agent is `chalupa agent run`, the fleet agent on every droplet
// (docs/operations.md, "Agent"): it watches the droplet for a person's
// activity and a running CI job and reports both in a heartbeat every 30 s
// (the reaper observation), samples the machine every 5 s into one-minute
// Monitor windows (protocol.WindowV1), and delivers those windows through a
// durable on-disk spool that survives the control plane being unreachable
// and the agent's own shutdown.
//
// Everything a test needs to steer is injected: the clock (clockwork), the
// roots the agent reads (/proc, /dev, /run, the filesystem it measures), the
// metadata service's URL and the nvidia-smi executable.
package agent

import (
	"errors"
	"time"

	"github.com/chalupa-run/chalupa/protocol"
)

// Cadences and bounds (docs/operations.md, "Agent").
const (
	// HeartbeatInterval is the heartbeat cadence: the reaper's idle limit is
	// counted in minutes, so two heartbeats a minute keep the stored
	// deadline at most half a minute behind the droplet's real state.
	HeartbeatInterval = 30 * time.Second
	// SampleInterval is the Monitor's sampling cadence, aligned to
	// multiples of 5 s of the wall clock: 12 samples per minute window.
	SampleInterval = 5 * time.Second
	// WindowLength is one telemetry window (protocol.WindowSeconds).
	WindowLength = protocol.WindowSeconds * time.Second
	// ShutdownDeadline bounds how long a stopping agent spends sending the
	// final window and whatever else the spool holds: systemd's default
	// stop timeout is 90 s, and a control plane that does not answer within
	// 10 s will not answer before the droplet is gone; what is not
	// acknowledged stays in the spool for the next start.
	ShutdownDeadline = 10 * time.Second
	// ReplayRate is the most spooled records the agent sends a second
	// (burst 1), so a replay after a long outage respects the control
	// plane's quotas instead of arriving as one burst.
	ReplayRate = 5
	// RetryMin and RetryMax bound the back-off after a 5xx, 429 or
	// transport error: doubled from 1 s to 5 min, reset by a success. A
	// Retry-After answer is honoured when longer (up to RetryAfterMax).
	RetryMin = time.Second
	// RetryMax: see RetryMin.
	RetryMax = 5 * time.Minute
	// RetryAfterMax caps a server's Retry-After, so a bogus header cannot
	// park the spool for days.
	RetryAfterMax = time.Hour
	// MaxReportAge is how long a spooled run report is kept while the
	// control plane cannot take it: after that it is dropped, counted and
	// logged (reason too-old). A report refused as deployment_not_found is
	// retried (a deployment's first heartbeat, within 30 s of the agent's
	// start, creates it), but a deployment id that no heartbeat ever
	// created would otherwise hold the ordered report spool, and every
	// report behind it, forever.
	MaxReportAge = 2 * time.Hour
	// KeyPollInterval is how often a starting agent looks for its key
	// files: they arrive over SSH minutes after boot, so a slow poll costs
	// nothing and never fails the unit.
	KeyPollInterval = 10 * time.Second
	// KeySettleTime is how long a starting agent keeps waiting on key
	// files that exist but are not usable yet — unreadable (copied as
	// root, then chowned) or not a whole key (a copy in progress, an
	// empty key-id) — before it gives up: long enough for any copy step of
	// the install template, short enough that a key that is really broken
	// fails the unit where systemd shows it.
	KeySettleTime = 2 * time.Minute
	// MetadataTimeout bounds one request to the metadata service (a
	// link-local address that answers in milliseconds or not at all).
	MetadataTimeout = 2 * time.Second
	// NvidiaSMITimeout bounds one nvidia-smi run: a wedged driver must not
	// stall sampling.
	NvidiaSMITimeout = 4 * time.Second
	// RequestTimeout bounds one signed request.
	RequestTimeout = 30 * time.Second
)

// Defaults of the configuration (docs/operations.md, "Agent").
const (
	// DefaultStateDir holds the spool and the state file.
	DefaultStateDir = "/var/lib/chalupa-agent"
	// DefaultMetadataURL is DigitalOcean's droplet metadata service.
	DefaultMetadataURL = "http://169.254.169.254/metadata/v1"
	// DefaultLimitMinutes is the idle limit sent when none is configured.
	DefaultLimitMinutes = 30
	// CIMarker is the file, under the run root, whose existence means a CI
	// job is running (a runner's pre-job hook creates it, its post-job hook
	// removes it).
	CIMarker = "chalupa/ci-active"
)

// Routes the agent posts to.
const (
	// HeartbeatRoute is POST /api/ingest/heartbeat.
	HeartbeatRoute = "/api/ingest/heartbeat"
	// TelemetryRoute is POST /api/ingest/telemetry.
	TelemetryRoute = "/api/ingest/telemetry"
	// LifecycleRoute is POST /api/ingest/lifecycle.
	LifecycleRoute = "/api/ingest/lifecycle"
	// RunsRoute is POST /api/ingest/runs.
	RunsRoute = "/api/ingest/runs"
)

// Errors.
var (
	// ErrKeyExposed: the key file is readable by group or others; the agent
	// refuses to use a key that may have leaked.
	ErrKeyExposed = errors.New("key file is readable by group or others (chmod 600)")
	// ErrNoIdentity: neither flags nor the metadata service gave the
	// droplet's identity.
	ErrNoIdentity = errors.New("no deployment identity")
	// ErrBadConfig: a configuration value breaks its rule.
	ErrBadConfig = errors.New("invalid agent configuration")
)
