package cli

import (
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// A daemon older than this CLI — the previous release after a rollback
// (docs/operations.md, "Rollback") — refuses a body field it does not know
// and leaves out of its answers every field added since. So the CLI sends a
// field only when the operator set it (createBoxBody), and decodes each
// answer it prints from such a field into a type here that shadows the
// field with a pointer: the text says unknown where the daemon said
// nothing, never the zero value ("agent off", "0 bytes free"), and --json
// prints null for it. A field added to an answer the CLI prints gets a
// shadow here.

// unknownText is what the CLI prints for a field the daemon did not answer.
const unknownText = "unknown (the daemon did not say: it is older than this chalupa)"

// olderDaemonHint follows a refusal of a field or parameter the daemon
// does not know: the CLI sent it because the operator set it.
const olderDaemonHint = " (the daemon may be older than this chalupa and not know it: compare `chalupa version` with the version `chalupa admin status` shows; leave the flag out, or use the daemon's release of the CLI)"

// createBoxBody is adminCreateBox's body as the CLI sends it: agent,
// agentIdleMinutes and agentSessionMinutes, added with the box's agent,
// only when the operator set them (absent is the daemon's default: the
// agent on, 30 minutes idle, no session limit; docs/operations.md,
// "Boxes").
type createBoxBody struct {
	adminapi.CreateBoxRequest
	AgentIdleMinutes    *int64 `json:"agentIdleMinutes,omitempty"`
	AgentSessionMinutes *int64 `json:"agentSessionMinutes,omitempty"`
}

// revokedKeyAnswer is a revocation with the producers still signing with
// the key told apart from none.
type revokedKeyAnswer struct {
	adminapi.RevokedKey
	StillSigning *[]adminapi.SigningProducer `json:"stillSigning"`
}

// boxAnswer is a box with the fields added with the agent, and the
// configuration's own change time, told apart from their zero values.
type boxAnswer struct {
	adminapi.Box
	Agent               *bool      `json:"agent"`
	AgentIdleMinutes    *int64     `json:"agentIdleMinutes"`
	AgentSessionMinutes *int64     `json:"agentSessionMinutes"`
	ConfigUpdatedAt     *time.Time `json:"configUpdatedAt"`
}

// reaperStatusAnswer is the reaper's status with the mode, the clock guard
// and the destroy pace told apart from their zero values.
type reaperStatusAnswer struct {
	adminapi.ReaperStatus
	Mode                *string              `json:"mode"`
	Clock               *adminapi.ClockGuard `json:"clock"`
	MaxDestroyPerMinute *int                 `json:"maxDestroyPerMinute"`
}

// statusAnswer is the daemon's status with the storage health and the
// reaper and cost modes told apart from their zero values.
type statusAnswer struct {
	adminapi.Status
	Storage    *adminapi.StorageHealth `json:"storage"`
	ReaperMode *string                 `json:"reaperMode"`
	Costs      *string                 `json:"costs"`
	// AlertSinks is nil when the daemon predates alert sinks in status.
	AlertSinks *[]adminapi.AlertSinkState `json:"alertSinks"`
}

// environmentListAnswer is adminListEnvironments with each environment's
// organization and storage told apart from their zero values.
type environmentListAnswer struct {
	Environments []environmentAnswer `json:"environments"`
}

// environmentAnswer is one environment of environmentListAnswer.
type environmentAnswer struct {
	adminapi.Environment
	Organization       *string `json:"organization"`
	StorageBytes       *int64  `json:"storageBytes"`
	StorageBudgetBytes *int64  `json:"storageBudgetBytes"`
}

// orUnknown is *p, or unknownText when the daemon did not answer it.
func orUnknown(p *string) string {
	if p == nil {
		return unknownText
	}
	return *p
}

// plural is one when n is 1, else many: "1 batch", "2 batches", "0 points".
func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
