package logs

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// Refusals of the broker. Each is a documented ingest answer
// (docs/operations.md, "Logs"); nothing is written when one is returned.
var (
	// ErrUnknownDeployment: 404 deployment_not_found.
	ErrUnknownDeployment = errors.New("deployment does not exist in this environment")
	// ErrDeploymentEnded: a session cannot be opened for an ended
	// deployment. 409 deployment_ended.
	ErrDeploymentEnded = errors.New("deployment has ended")
	// ErrServiceNotAllowed: the service is not on the environment's
	// allowlist. 422 service_not_allowed.
	ErrServiceNotAllowed = errors.New("service is not on the environment's log allowlist")
	// ErrSessionConflict: the session id is open for another service.
	// 409 log_session_conflict.
	ErrSessionConflict = errors.New("log session exists for another service")
	// ErrSessionQuota: the deployment has OpenSessions open sessions.
	// 429 log_session_quota.
	// A refusal is a *SessionQuotaError, which matches it.
	ErrSessionQuota = errors.New("deployment reached its open log session quota")
	// ErrUnknownSession: 404 log_session_not_found.
	ErrUnknownSession = errors.New("log session does not exist")
	// ErrSessionFinished: no new chunk after finish. 409 log_session_finished.
	ErrSessionFinished = errors.New("log session is finished")
	// ErrSessionExpired: no new chunk after expiry. 409 log_session_expired.
	ErrSessionExpired = errors.New("log session has expired")
	// ErrChunkTooLarge: 422 chunk_too_large.
	ErrChunkTooLarge = errors.New("chunk exceeds the size bound")
	// ErrSequenceGap: the plan's seq is past the next one. 409 sequence_gap.
	ErrSequenceGap = errors.New("sequence number is not the next one")
	// ErrChunkConflict: the seq was planned with another size or sha256.
	// 409 chunk_conflict.
	ErrChunkConflict = errors.New("sequence number was planned with another body")
	// ErrChunkQuota: the deployment planned DeploymentChunks chunks.
	// 429 log_chunk_quota.
	ErrChunkQuota = errors.New("deployment reached its log chunk quota")
	// ErrByteQuota: the chunk would take the deployment past
	// DeploymentBytes. 429 log_byte_quota.
	ErrByteQuota = errors.New("deployment reached its log byte quota")
	// ErrChunkNotPlanned: commit of a seq never planned. 404 chunk_not_planned.
	ErrChunkNotPlanned = errors.New("chunk was not planned")
	// ErrObjectMissing (store.go) is 409 object_missing at commit.
	// ErrObjectMismatch: the stored object is not the planned one; it was
	// deleted. 422 object_mismatch.
	ErrObjectMismatch = errors.New("stored object does not match the plan")
	// ErrFinalConflict: the session was finished with another payload.
	// 409 final_conflict.
	ErrFinalConflict = errors.New("log session was finished with another payload")
)

// Invalid is a body of the right shape whose values break a rule: 422
// invalid_body, naming the field, never its value.
type Invalid struct{ Message string }

func (e *Invalid) Error() string { return e.Message }

func invalid(format string, a ...any) error { return &Invalid{Message: fmt.Sprintf(format, a...)} }

// ValidateOpen checks an open body's values. Errors: *Invalid.
func ValidateOpen(b *protocol.OpenV1) error {
	return checkTags(b)
}

// checkTags refuses a log body that breaks a rule of its schema tags (the
// ids, the service, the chunk's sha256), which the OpenAPI document
// carries too (docs/operations.md, "OpenAPI").
func checkTags(b any) error {
	if v := apischema.Check(b); v != nil {
		return invalid("%s", v.Message())
	}
	return nil
}

// ValidateChunk checks a chunk body's values: its schema tags, seq and
// size among them. Errors: *Invalid; ErrChunkTooLarge for a size above
// its tag's maximum (protocol.DefaultMaxChunkBytes), the answer a chunk
// above the server's bound always had.
func ValidateChunk(b *protocol.ChunkV1) error {
	if v := apischema.Check(b); v != nil {
		if v.Field == "size" && v.Rule == "maximum" {
			return ErrChunkTooLarge
		}
		return invalid("%s", v.Message())
	}
	return nil
}

// ChunkSum is b's SHA256 decoded; the zero sum for one ValidateChunk
// refuses (every broker path validates first).
func ChunkSum(b *protocol.ChunkV1) [32]byte {
	var sum [32]byte
	if raw, err := hex.DecodeString(b.SHA256); err == nil && len(raw) == len(sum) {
		copy(sum[:], raw)
	}
	return sum
}

// ValidateFinish checks a finish body's values. Errors: *Invalid.
func ValidateFinish(b *protocol.FinishV1) error {
	if err := checkTags(b); err != nil {
		return err
	}
	// final.cursor and final.reason count bytes, which a schema's
	// maxLength does not say (docs/operations.md, "OpenAPI").
	switch {
	case len(b.Final.Cursor) > 512:
		return invalid("final.cursor must be at most 512 characters")
	case len(b.Final.Reason) > 64:
		return invalid("final.reason must be at most 64 characters")
	}
	return nil
}

// CanonicalFinal is the exact payload stored for b: its final's JSON.
func CanonicalFinal(b *protocol.FinishV1) []byte {
	out, _ := json.Marshal(b.Final) // a struct of numbers and strings cannot fail
	return out
}

// Broker admits log sessions, plans and commits (docs/operations.md,
// "Logs"). Its methods taking a Querier run inside the caller's writer
// unit; the ones taking none make the store's calls outside it.
type Broker struct {
	store  Store
	loc    Location
	limits Limits
}

// NewBroker returns a broker planning into loc of store with limits (zero
// fields: the defaults).
func NewBroker(store Store, loc Location, limits Limits) *Broker {
	return &Broker{store: store, loc: loc, limits: limits.withDefaults()}
}

// Limits returns the bounds in force.
func (b *Broker) Limits() Limits { return b.limits }

// Store returns the object store.
func (b *Broker) Store() Store { return b.store }

// Services returns an environment's allowlist from its stored value.
func Services(stored string, valid bool) []string {
	if !valid {
		return DefaultServices
	}
	var out []string
	for _, s := range strings.Split(stored, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Opened is what Open did.
type Opened struct {
	Session storage.LogSession
	// Replayed is true when the session existed (nothing written).
	Replayed bool
}

// Open opens the session b names, in this order: the deployment must
// exist; an existing session of the same id is a replay (same service)
// or ErrSessionConflict; then the deployment must be active, the service
// allowed, and the open sessions below the bound. Errors: the sentinels
// above (nothing written), *Invalid never (Validate first), or a storage
// fault.
func (b *Broker) Open(ctx context.Context, q storage.Querier, env int64, o *protocol.OpenV1, now time.Time) (Opened, error) {
	dep, err := storage.LogDeploymentState(ctx, q, env, o.DeploymentID)
	if errors.Is(err, storage.ErrNotFound) {
		return Opened{}, ErrUnknownDeployment
	} else if err != nil {
		return Opened{}, err
	}
	switch s, err := storage.LogSessionByID(ctx, q, env, o.DeploymentID, o.SessionID); {
	case err == nil && s.Service == o.Service:
		return Opened{Session: s, Replayed: true}, nil
	case err == nil:
		return Opened{}, ErrSessionConflict
	case !errors.Is(err, storage.ErrNotFound):
		return Opened{}, err
	}
	if dep.Status == storage.DeploymentEnded {
		return Opened{}, ErrDeploymentEnded
	}
	allowed := false
	for _, s := range Services(dep.Services.String, dep.Services.Valid) {
		allowed = allowed || s == o.Service
	}
	if !allowed {
		return Opened{}, ErrServiceNotAllowed
	}
	open, first, err := storage.OpenLogSessions(ctx, q, env, o.DeploymentID, now)
	if err != nil {
		return Opened{}, err
	}
	if open >= b.limits.OpenSessions {
		return Opened{}, &SessionQuotaError{Frees: first.Sub(now)}
	}
	s := storage.LogSession{EnvironmentID: env, DeploymentID: o.DeploymentID, SessionID: o.SessionID, Service: o.Service,
		OpenedAt: now, ExpiresAt: now.Add(b.limits.SessionTTL)}
	if s.Row, err = storage.InsertLogSession(ctx, q, s); err != nil {
		return Opened{}, err
	}
	return Opened{Session: s}, nil
}

// SessionQuotaError is the refusal of a session beyond OpenSessions: it
// matches ErrSessionQuota and says when the oldest open session expires,
// the moment a place frees by time alone (finishing a session frees one
// sooner). The daemon answers it as the Retry-After of 429
// log_session_quota (docs/operations.md, "Logs").
type SessionQuotaError struct {
	// Frees is how long after the refusal the oldest open session expires
	// (above 0).
	Frees time.Duration
}

// Error is ErrSessionQuota's text.
func (e *SessionQuotaError) Error() string { return ErrSessionQuota.Error() }

// Unwrap returns ErrSessionQuota.
func (e *SessionQuotaError) Unwrap() error { return ErrSessionQuota }

// Planned is what Plan did: the chunk's persisted plan.
type Planned struct {
	Chunk storage.LogChunk
	// Renewed is true when the seq was planned before with this body: its
	// grant is renewed for the same key.
	Renewed bool
	// Committed is true when the chunk is already committed: no grant is
	// needed (an exact replay).
	Committed bool
}

// objectName is a chunk's key below the location's prefix: environment
// id, deployment, session and a zero-padded sequence number, so a
// session's objects list in order.
func objectName(env int64, dep, sess string, seq int64) string {
	return fmt.Sprintf("e%d/%s/%s/%010d.chunk", env, dep, sess, seq)
}

// Plan reserves ch's sequence number and persists its complete plan,
// in this order: the session must exist; a seq already planned is an
// exact repeat (renewed, or committed) or ErrChunkConflict — judged
// before any bound, so a replay is answered by its plan forever; then the
// session must be unfinished and unexpired, seq the next one, the size
// within the chunk bound, and the deployment's chunk and byte quotas must
// hold it. The grant's expiry (now + GrantTTL) is stored with the plan.
// Errors: the sentinels above (nothing written) or a storage fault.
func (b *Broker) Plan(ctx context.Context, q storage.Querier, env int64, ch *protocol.ChunkV1, now time.Time) (Planned, error) {
	s, err := storage.LogSessionByID(ctx, q, env, ch.DeploymentID, ch.SessionID)
	if errors.Is(err, storage.ErrNotFound) {
		return Planned{}, ErrUnknownSession
	} else if err != nil {
		return Planned{}, err
	}
	sum := ChunkSum(ch)
	expires := now.Add(b.limits.GrantTTL)
	switch c, err := storage.LogChunkBySeq(ctx, q, s.Row, ch.Seq); {
	case err == nil && (c.Size != ch.Size || !bytes.Equal(c.SHA256, sum[:])):
		return Planned{}, ErrChunkConflict
	case err == nil && c.State == storage.LogChunkCommitted:
		return Planned{Chunk: c, Committed: true}, nil
	case err == nil:
		if err := storage.RenewLogChunkGrant(ctx, q, s.Row, ch.Seq, expires); err != nil {
			return Planned{}, err
		}
		c.GrantExpiresAt = expires
		return Planned{Chunk: c, Renewed: true}, nil
	case !errors.Is(err, storage.ErrNotFound):
		return Planned{}, err
	}
	switch {
	case !s.FinishedAt.IsZero():
		return Planned{}, ErrSessionFinished
	case !now.Before(s.ExpiresAt):
		return Planned{}, ErrSessionExpired
	case ch.Seq != s.NextSeq:
		return Planned{}, ErrSequenceGap
	case ch.Size > b.limits.MaxChunkBytes:
		return Planned{}, ErrChunkTooLarge
	}
	dep, err := storage.LogDeploymentState(ctx, q, env, ch.DeploymentID)
	if err != nil {
		return Planned{}, err
	}
	switch {
	case dep.Chunks+1 > b.limits.DeploymentChunks:
		return Planned{}, ErrChunkQuota
	case dep.Bytes+ch.Size > b.limits.DeploymentBytes:
		return Planned{}, ErrByteQuota
	}
	c := storage.LogChunk{SessionRow: s.Row, Seq: ch.Seq, ObjectKey: b.loc.Key(objectName(env, ch.DeploymentID, ch.SessionID, ch.Seq)),
		Size: ch.Size, SHA256: sum[:], State: storage.LogChunkPlanned, PlannedAt: now, GrantExpiresAt: expires}
	if err := storage.PlanLogChunk(ctx, q, env, ch.DeploymentID, c); err != nil {
		return Planned{}, err
	}
	return Planned{Chunk: c}, nil
}

// Upload signs the PUT of a persisted plan, valid until the expiry the
// plan stored. It makes no network request.
func (b *Broker) Upload(ctx context.Context, c storage.LogChunk, now time.Time) (Signed, error) {
	var sum [32]byte
	copy(sum[:], c.SHA256)
	ttl := c.GrantExpiresAt.Sub(now)
	if ttl < time.Second {
		ttl = time.Second
	}
	return b.store.PresignPut(ctx, c.ObjectKey, c.Size, sum, ttl)
}

// Lookup reads the plan a commit names, for Verify (outside the writer).
// Errors: ErrUnknownSession, ErrChunkNotPlanned, ErrChunkConflict (the
// commit describes another body), or a storage fault.
func (b *Broker) Lookup(ctx context.Context, q storage.Querier, env int64, ch *protocol.ChunkV1) (storage.LogChunk, error) {
	s, err := storage.LogSessionByID(ctx, q, env, ch.DeploymentID, ch.SessionID)
	if errors.Is(err, storage.ErrNotFound) {
		return storage.LogChunk{}, ErrUnknownSession
	} else if err != nil {
		return storage.LogChunk{}, err
	}
	c, err := storage.LogChunkBySeq(ctx, q, s.Row, ch.Seq)
	if errors.Is(err, storage.ErrNotFound) {
		return c, ErrChunkNotPlanned
	} else if err != nil {
		return c, err
	}
	sum := ChunkSum(ch)
	if c.Size != ch.Size || !bytes.Equal(c.SHA256, sum[:]) {
		return c, ErrChunkConflict
	}
	return c, nil
}

// Verify checks the stored object against its plan: it reads the object
// back (at most the planned size plus one byte) and compares its size and
// the SHA-256 of its bytes with the plan's — chalupa hashes, because not
// every store enforces or reports the grant's checksum (docs/operations.md,
// "Logs"). A mismatching object is deleted (the plan stays, so the agent
// can upload again under a renewed grant). Errors: ErrObjectMissing,
// ErrObjectMismatch, or the store's.
func (b *Broker) Verify(ctx context.Context, c storage.LogChunk) error {
	o, err := b.store.Digest(ctx, c.ObjectKey, c.Size)
	if err != nil {
		return err
	}
	if o.Size == c.Size && bytes.Equal(o.SHA256, c.SHA256) {
		return nil
	}
	if err := b.store.Delete(ctx, c.ObjectKey); err != nil {
		return err
	}
	return ErrObjectMismatch
}

// Commit records a verified chunk as committed, re-checking its plan
// inside the writer unit. It reports whether the chunk was committed
// already (an exact repeat: nothing written). Errors: as Lookup.
func (b *Broker) Commit(ctx context.Context, q storage.Querier, env int64, ch *protocol.ChunkV1, now time.Time) (deduplicated bool, err error) {
	c, err := b.Lookup(ctx, q, env, ch)
	if err != nil {
		return false, err
	}
	if c.State == storage.LogChunkCommitted {
		return true, nil
	}
	changed, err := storage.CommitLogChunk(ctx, q, c.SessionRow, c.Seq, now)
	return !changed, err
}

// Finish stores the session's final payload once: an identical repeat is
// deduplicated (nothing written), another payload ErrFinalConflict.
// Errors: ErrUnknownSession, ErrFinalConflict, or a storage fault.
func (b *Broker) Finish(ctx context.Context, q storage.Querier, env int64, f *protocol.FinishV1, now time.Time) (deduplicated bool, err error) {
	s, err := storage.LogSessionByID(ctx, q, env, f.DeploymentID, f.SessionID)
	if errors.Is(err, storage.ErrNotFound) {
		return false, ErrUnknownSession
	} else if err != nil {
		return false, err
	}
	payload := CanonicalFinal(f)
	if !s.FinishedAt.IsZero() {
		if bytes.Equal(s.FinalPayload, payload) {
			return true, nil
		}
		return false, ErrFinalConflict
	}
	return false, storage.FinishLogSession(ctx, q, s.Row, now, payload)
}
