package ingest

import (
	"context"
	"errors"
	"math"
	"net/http"

	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// MaxLogBody bounds a log route's body (bytes): 4 KiB holds any plan,
// commit or final payload; log bytes never pass through chalupa.
const MaxLogBody = 4 << 10

// logRefusals maps the broker's refusals to their answers
// (docs/operations.md, "Logs").
var logRefusals = []struct {
	err    error
	status int
	code   string
	msg    string
	quota  string
}{
	{logs.ErrUnknownDeployment, http.StatusNotFound, "deployment_not_found", "the deployment does not exist in this environment; a heartbeat creates it", ""},
	{logs.ErrDeploymentEnded, http.StatusConflict, "deployment_ended", "the deployment has ended: no new log session", ""},
	{logs.ErrServiceNotAllowed, http.StatusUnprocessableEntity, "service_not_allowed", "the service is not on the environment's log allowlist", ""},
	{logs.ErrSessionConflict, http.StatusConflict, "log_session_conflict", "the session id is open for another service", ""},
	{logs.ErrSessionQuota, http.StatusTooManyRequests, "log_session_quota", "the deployment has the maximum number of open log sessions", QuotaLogSessions},
	{logs.ErrUnknownSession, http.StatusNotFound, "log_session_not_found", "no such log session for this deployment", ""},
	{logs.ErrSessionFinished, http.StatusConflict, "log_session_finished", "the log session is finished: open another", ""},
	{logs.ErrSessionExpired, http.StatusConflict, "log_session_expired", "the log session has expired: open another", ""},
	{logs.ErrChunkTooLarge, http.StatusUnprocessableEntity, "chunk_too_large", "the chunk exceeds the chunk size bound", ""},
	{logs.ErrSequenceGap, http.StatusConflict, "sequence_gap", "seq is not the session's next sequence number", ""},
	{logs.ErrChunkConflict, http.StatusConflict, "chunk_conflict", "this seq was planned with another size or sha256", ""},
	{logs.ErrChunkQuota, http.StatusTooManyRequests, "log_chunk_quota", "the deployment planned the maximum number of log chunks", QuotaLogChunks},
	{logs.ErrByteQuota, http.StatusTooManyRequests, "log_byte_quota", "the chunk would take the deployment past its log byte quota", QuotaLogBytes},
	{logs.ErrChunkNotPlanned, http.StatusNotFound, "chunk_not_planned", "this seq was never planned", ""},
	{logs.ErrObjectMissing, http.StatusConflict, "object_missing", "the object store holds no object for this chunk: upload it (plan again for a fresh grant)", ""},
	{logs.ErrObjectMismatch, http.StatusUnprocessableEntity, "object_mismatch", "the stored object does not match the plan and was deleted: upload it again", ""},
	{logs.ErrFinalConflict, http.StatusConflict, "final_conflict", "the session was finished with another final payload", ""},
}

// logRefusal returns the answer for a broker refusal (nil for anything
// else), noting quota refusals. log_session_quota carries Retry-After:
// until the oldest open session expires; log_chunk_quota and
// log_byte_quota carry none, as they count what the deployment planned
// over its life and nothing lowers them (docs/operations.md, "Logs").
func (s *Service) logRefusal(err error, env, dep string) *Refusal {
	var inv *logs.Invalid
	if errors.As(err, &inv) {
		return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", inv.Message)
	}
	for _, r := range logRefusals {
		if errors.Is(err, r.err) {
			rf := refuse(r.status, r.code, "%s", r.msg)
			rf.Quota = r.quota
			var sq *logs.SessionQuotaError
			if errors.As(err, &sq) {
				rf.RetryAfter = max(1, int(math.Ceil(sq.Frees.Seconds())))
			}
			s.noteQuota(rf, env, dep)
			return rf
		}
	}
	return nil
}

// Every log route's request, once its body parsed, is counted by the log
// rate quotas (per deployment and per environment, the four routes
// together) before the writer unit: a refusal is 429 rate_limited with
// Retry-After and writes nothing (docs/operations.md, "Quotas").

// logsOff is the answer of every log route without CHALUPA_LOGS_URL.
func logsOff(v Verified) Response {
	return refused(refuse(http.StatusServiceUnavailable, "logs_not_configured", "this chalupa has no log storage (CHALUPA_LOGS_URL); keep logs locally"), v.Shared())
}

// logBody parses a log route's body: strict JSON, then validate (one of
// logs.ValidateOpen, ValidateChunk, ValidateFinish). A chunk above its
// size tag's maximum is 422 chunk_too_large, as it was when only the
// broker checked it.
func logBody[T any](v *T, validate func(*T) error) func(body []byte) *Refusal {
	return func(body []byte) *Refusal {
		if rf := DecodeBody(body, v); rf != nil {
			return rf
		}
		var inv *logs.Invalid
		if err := validate(v); errors.As(err, &inv) {
			return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", inv.Message)
		} else if errors.Is(err, logs.ErrChunkTooLarge) {
			return refuse(http.StatusUnprocessableEntity, "chunk_too_large", "the chunk exceeds the chunk size bound")
		} else if err != nil {
			return refuse(http.StatusUnprocessableEntity, "invalid_body", "invalid body")
		}
		return nil
	}
}

// LogSessions handles POST /api/ingest/logs/sessions (MaxLogBody): opens
// a log session, or answers the open one for an exact replay.
func (s *Service) LogSessions(ctx context.Context, v Verified) Response {
	if s.logs == nil {
		return logsOff(v)
	}
	var b protocol.OpenV1
	admit := func() *Refusal { return s.admitRate(s.logRate, v, b.EnvironmentSlug, b.DeploymentID) }
	return s.handleAdmitted(ctx, v, logBody(&b, logs.ValidateOpen), admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		env, err := resolveEnvironment(ctx, tx, v, b.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		o, err := s.logs.Open(ctx, tx, env, &b, s.clock.Now().UTC())
		if rf := s.logRefusal(err, b.EnvironmentSlug, b.DeploymentID); rf != nil {
			return nil, rf
		} else if err != nil {
			return nil, err
		}
		body := protocol.LogSessionOpened{SessionID: b.SessionID, ExpiresAt: o.Session.ExpiresAt, MaxChunkBytes: s.logs.Limits().MaxChunkBytes, Replayed: o.Replayed}
		if o.Replayed {
			return nil, &noChange{body: body}
		}
		return body, nil
	})
}

// LogPlan handles POST /api/ingest/logs/plan (MaxLogBody): persists the
// chunk's plan in the writer unit, then — after the unit committed —
// signs its upload grant. The daemon never answers a grant whose plan is
// not durable.
func (s *Service) LogPlan(ctx context.Context, v Verified) Response {
	if s.logs == nil {
		return logsOff(v)
	}
	var b protocol.ChunkV1
	var planned logs.Planned
	admit := func() *Refusal { return s.admitRate(s.logRate, v, b.EnvironmentSlug, b.DeploymentID) }
	resp := s.handleAdmitted(ctx, v, logBody(&b, logs.ValidateChunk), admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		env, err := resolveEnvironment(ctx, tx, v, b.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		planned, err = s.logs.Plan(ctx, tx, env, &b, s.clock.Now().UTC())
		if rf := s.logRefusal(err, b.EnvironmentSlug, b.DeploymentID); rf != nil {
			return nil, rf
		} else if err != nil {
			return nil, err
		}
		if planned.Committed {
			return nil, &noChange{body: protocol.LogChunkPlanned{Seq: b.Seq, Committed: true}}
		}
		return protocol.LogChunkPlanned{Seq: b.Seq, Renewed: planned.Renewed}, nil
	})
	body, ok := resp.Body.(protocol.LogChunkPlanned)
	if resp.Refusal != nil || !ok || body.Committed {
		return resp
	}
	up, err := s.logs.Upload(ctx, planned.Chunk, s.clock.Now())
	if err != nil {
		// The plan is durable: planning again renews it.
		s.log.Error().Err(err).Msg("log grant fault")
		return fault(err)
	}
	s.logGrants.Add(1)
	body.Upload = &protocol.LogUpload{Method: up.Method, URL: up.URL, Headers: up.Headers, ExpiresAt: up.Expires.UTC()}
	resp.Body = body
	return resp
}

// LogCommit handles POST /api/ingest/logs/commit (MaxLogBody): reads the
// plan and verifies the object (read back and hashed; a mismatching
// object is deleted) before the writer unit, whose refusals are answered with
// nothing written; then records the chunk committed, re-checking the plan
// inside the unit. An exact repeat writes nothing.
func (s *Service) LogCommit(ctx context.Context, v Verified) Response {
	if s.logs == nil {
		return logsOff(v)
	}
	var b protocol.ChunkV1
	admit := func() *Refusal {
		// The rate quota first: a flood never reaches the store's HEAD.
		if rf := s.admitRate(s.logRate, v, b.EnvironmentSlug, b.DeploymentID); rf != nil {
			return rf
		}
		env, err := s.readEnvironment(ctx, v, b.EnvironmentSlug)
		if err != nil {
			var rf *Refusal
			if errors.As(err, &rf) {
				return rf
			}
			s.log.Error().Err(err).Msg("log commit read fault")
			return fault(err).Refusal
		}
		c, err := s.logs.Lookup(ctx, s.db.Read, env, &b)
		if err == nil && c.State == storage.LogChunkPlanned {
			err = s.logs.Verify(ctx, c)
		}
		if rf := s.logRefusal(err, b.EnvironmentSlug, b.DeploymentID); rf != nil {
			return rf
		} else if err != nil {
			s.log.Error().Err(err).Msg("log commit verification fault")
			return fault(err).Refusal
		}
		return nil
	}
	return s.handleAdmitted(ctx, v, logBody(&b, logs.ValidateChunk), admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		env, err := resolveEnvironment(ctx, tx, v, b.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		dedup, err := s.logs.Commit(ctx, tx, env, &b, s.clock.Now().UTC())
		if rf := s.logRefusal(err, b.EnvironmentSlug, b.DeploymentID); rf != nil {
			return nil, rf
		} else if err != nil {
			return nil, err
		}
		if dedup {
			return nil, &noChange{body: protocol.LogChunkCommitted{Committed: true, Deduplicated: true}}
		}
		return protocol.LogChunkCommitted{Committed: true}, nil
	})
}

// LogFinish handles POST /api/ingest/logs/finish (MaxLogBody): stores the
// session's one exact final payload; an identical repeat writes nothing.
func (s *Service) LogFinish(ctx context.Context, v Verified) Response {
	if s.logs == nil {
		return logsOff(v)
	}
	var b protocol.FinishV1
	admit := func() *Refusal { return s.admitRate(s.logRate, v, b.EnvironmentSlug, b.DeploymentID) }
	return s.handleAdmitted(ctx, v, logBody(&b, logs.ValidateFinish), admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		env, err := resolveEnvironment(ctx, tx, v, b.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		dedup, err := s.logs.Finish(ctx, tx, env, &b, s.clock.Now().UTC())
		if rf := s.logRefusal(err, b.EnvironmentSlug, b.DeploymentID); rf != nil {
			return nil, rf
		} else if err != nil {
			return nil, err
		}
		if dedup {
			return nil, &noChange{body: protocol.LogSessionFinished{Finished: true, Deduplicated: true}}
		}
		return protocol.LogSessionFinished{Finished: true}, nil
	})
}

// LogGrants is how many upload grants the service has signed since start.
func (s *Service) LogGrants() int64 { return s.logGrants.Load() }

// readEnvironment is resolveEnvironment on the read pool, for admission
// checks made before the writer unit.
func (s *Service) readEnvironment(ctx context.Context, v Verified, slug string) (int64, error) {
	tx, err := s.db.Read.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // read-only
	return resolveEnvironment(ctx, tx, v, slug)
}
