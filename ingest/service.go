package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/internal/strictjson"
	"github.com/chalupa-run/chalupa/internal/wake"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// Service handles the signed ingest routes. The daemon owns HTTP (routing,
// logging, metrics, writing the JSON); Service decides each answer.
type Service struct {
	// activity holds a signal after an accepted request stored a nonce.
	activity chan struct{}
	// deadlines wakes the reaper for a heartbeat whose deadline comes
	// before the reaper's own wake-up (DeadlineActivity).
	deadlines *wake.Threshold
	db        *storage.DB
	keys      *Keyring
	clock     clockwork.Clock
	sharedKey []byte
	log       zerolog.Logger
	telemetry telemetry.Limits
	// quotas are the configured ingest quotas; heartbeats, telemetryRate,
	// lifecycleRate, runRate and logRate hold each route's rate buckets,
	// and notes the quota warnings waiting for the QuotaEventWriter
	// (docs/operations.md, "Quotas").
	quotas        Quotas
	heartbeats    *rateLimiter
	telemetryRate *rateLimiter
	lifecycleRate *rateLimiter
	runRate       *rateLimiter
	logRate       *rateLimiter
	notes         *quotaNotes
	// storage holds the environments' storage counters as last read in a
	// writer unit, for the budget check before the writer.
	storage *storageHints
	// droplets looks a sunk deployment's droplet up with the read token
	// (nil without one); sunkChecks holds one slot per lookup running.
	droplets   DropletLookup
	sunkChecks chan struct{}
	// logs is the log broker (nil without CHALUPA_LOGS_URL: the log
	// routes answer 503); logGrants counts the upload grants signed.
	logs      *logs.Broker
	logGrants atomic.Int64
	// nonces records claims for the nonce pruner (NonceLedger).
	nonces *NonceLedger
	// contact hears the fleet's contact (nil: nobody listens).
	contact ContactRecorder
	// mark is the wall-clock high-water mark (nil: none kept).
	mark ClockMark
	// transits holds each deployment's recent heartbeat transits (the
	// transit rule); mono, monoStart and wallStart make the steady frame
	// arrivals are measured in for it (steadyNow).
	transits *transits
	// offsets is the clock offset's estimator (ClockOffset).
	offsets   *Offsets
	mono      clockwork.Clock
	monoStart time.Time
	wallStart time.Time
}

// Config configures a Service.
type Config struct {
	// DB is the migrated database.
	DB *storage.DB
	// Keys resolves key ids.
	Keys *Keyring
	// SharedKey is the deprecated CHALUPA_INGEST_KEY (its UTF-8 bytes are
	// the HMAC key); nil disables the shared-key path.
	SharedKey []byte
	// Clock judges X-Chalupa-Timestamp skew and stamps writes; nil means
	// the real clock.
	Clock clockwork.Clock
	// Monotonic measures how long nonces are held (NonceLedger); nil
	// means Clock. It must not follow wall-clock steps.
	Monotonic clockwork.Clock
	// Log receives internal faults (never request bodies or key material).
	Log zerolog.Logger
	// Telemetry bounds telemetry per deployment; nil means
	// telemetry.DefaultLimits with OpenSessions from Quotas.
	Telemetry *telemetry.Limits
	// Quotas are the deployment- and environment-level quotas
	// (CHALUPA_QUOTA_*); a zero field is unlimited, so the zero value
	// limits nothing (docs/operations.md, "Quotas").
	Quotas Quotas
	// Droplets looks droplets up at the provider with the read token
	// (DIGITALOCEAN_READ_TOKEN) for `sunk` events; nil leaves them to
	// inventory reconciliation (docs/operations.md, "Lifecycle events and
	// runs").
	Droplets DropletLookup
	// Logs is the log broker; nil leaves the log routes answering 503
	// logs_not_configured (docs/operations.md, "Logs").
	Logs *logs.Broker
	// Contact hears accepted heartbeats and heartbeats refused only for
	// their timestamp (the reaper's clock guard, wired by the daemon);
	// nil: nobody listens.
	Contact ContactRecorder
	// Mark is the wall-clock high-water mark (the reaper's clock guard,
	// wired by the daemon; docs/operations.md, "Signed ingest"): requests
	// signed before it minus SkewWindow are refused, accepted ones advance
	// it, and the nonce pruner deletes only nonces below it. nil keeps
	// none: the wall-clock window alone.
	Mark ClockMark
}

// ContactRecorder hears what the reaper's clock guard needs from ingest
// (docs/operations.md, "Reaper"); it must be quick and never block.
type ContactRecorder interface {
	// SkewRefused is a heartbeat of deployment in environment refused
	// only for its signed timestamp signedAt: known usable key, valid
	// signature, a valid body naming the key's environment, admitted by
	// the heartbeat rate quotas, for a deployment that exists and is
	// active in that environment (a made-up id is no one's contact).
	// Nothing of it was written.
	SkewRefused(environment, deployment string, signedAt time.Time)
	// HeartbeatAccepted is a heartbeat of environment that was stored.
	HeartbeatAccepted(environment string)
}

// HeartbeatRoute is the heartbeat's path: only its skew refusals are
// contact.
const HeartbeatRoute = "/api/ingest/heartbeat"

// NewService returns a Service.
func NewService(c Config) *Service {
	clock := c.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	mono := c.Monotonic
	if mono == nil {
		mono = clock
	}
	limits := telemetry.DefaultLimits()
	limits.OpenSessions = int64(c.Quotas.OpenSessions)
	limits.OpeningWindow = SessionOpeningWindow
	if c.Telemetry != nil {
		limits = *c.Telemetry
	}
	s := &Service{db: c.DB, keys: c.Keys, clock: clock, sharedKey: c.SharedKey, log: c.Log, activity: make(chan struct{}, 1), deadlines: wake.New(), telemetry: limits,
		quotas: c.Quotas, heartbeats: newHeartbeatLimiter(c.Quotas), telemetryRate: newRateLimiter(c.Quotas.telemetryDims()),
		lifecycleRate: newRateLimiter(c.Quotas.lifecycleDims()), runRate: newRateLimiter(c.Quotas.runDims()), logRate: newRateLimiter(c.Quotas.logDims()),
		notes: newQuotaNotes(), storage: newStorageHints(),
		droplets: c.Droplets, sunkChecks: make(chan struct{}, 1), logs: c.Logs, nonces: NewNonceLedger(mono), contact: c.Contact, mark: c.Mark,
		transits: newTransits(maxTransitDeployments), offsets: newOffsets(maxOffsetDeployments), mono: mono, monoStart: mono.Now(), wallStart: clock.Now()}
	s.nonces.mark = c.Mark
	return s
}

// steadyNow is the wall time the process started at plus the monotonic
// time elapsed since: it moves with real time whatever the wall clock does
// while the process runs, so a transit measured in it is not moved by a
// wall-clock step (the transit rule).
func (s *Service) steadyNow() time.Time {
	return s.wallStart.Add(s.mono.Since(s.monoStart))
}

// NonceLedger is the record of claimed nonces the nonce pruner must hold
// (NoncePruner.Ledger).
func (s *Service) NonceLedger() *NonceLedger { return s.nonces }

// Quotas returns the quotas the service enforces.
func (s *Service) Quotas() Quotas { return s.quotas }

// NonceActivity signals (coalesced) after an accepted request stored a
// nonce: the nonce pruner waits on it instead of a timer while the nonces
// table is empty, so an empty fleet costs no wake-ups.
func (s *Service) NonceActivity() <-chan struct{} { return s.activity }

// DeadlineActivity is the reaper's wake-up: after a heartbeat committed, it
// is notified with the earliest deadline the heartbeat stored (idle
// deadline, or session expiry when sent), and signals only when that comes
// before the time the reaper already wakes at — a new deployment, a
// shortened limit, a CI report ending past the deadline. The usual
// heartbeat, which moves a deadline later, costs one atomic load
// (docs/operations.md, "Reaper").
func (s *Service) DeadlineActivity() *wake.Threshold { return s.deadlines }

// Response is the answer to one ingest request.
type Response struct {
	// Status is the HTTP status.
	Status int
	// Body is the JSON body: the success document, or nil with Refusal set.
	Body any
	// Refusal is set when the request was refused (Status is its status).
	Refusal *Refusal
	// Shared is true when the request used the deprecated shared key: the
	// daemon adds the Deprecation header and counts it.
	Shared bool
}

// Result is the metrics label of r: "accepted" or the refusal code.
func (r Response) Result() string {
	if r.Refusal != nil {
		return r.Refusal.Code
	}
	return "accepted"
}

func refused(rf *Refusal, shared bool) Response {
	return Response{Status: rf.Status, Refusal: rf, Shared: shared}
}

// StorageRetryAfter is the Retry-After of a 503 storage_unavailable, in
// seconds: the storage-health loop probes every 10 s while commits fail and
// any commit that succeeds clears the state, so writes recover within
// seconds of space returning (docs/operations.md, "Storage and the
// writer").
const StorageRetryAfter = 5

// fault is the answer to a fault that is not the request's: 503
// storage_unavailable with Retry-After when err is a storage fault (disk
// full, I/O error, read-only file system: storage.FaultKind), else a
// redacted 500 internal. Nothing of the request was kept in either case.
func fault(err error) Response {
	if storage.IsStorageFault(err) {
		return refused(&Refusal{Status: http.StatusServiceUnavailable, Code: "storage_unavailable",
			Message: "the server cannot store writes right now; retry later", RetryAfter: StorageRetryAfter}, false)
	}
	return refused(&Refusal{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}, false)
}

// DecodeBody decodes b, one JSON object, strictly into v (a pointer to a
// struct; internal/strictjson's rules) and classifies a failure: malformed
// JSON or trailing data is 400 malformed_json; well-formed JSON of the wrong
// shape (unknown field, wrong type, a key that matches a field only
// case-insensitively, a key repeated within one object) is 422
// invalid_body. Messages name at most a field, never a value.
func DecodeBody(b []byte, v any) *Refusal {
	if err := strictjson.Decode(b, v); err != nil {
		return decodeRefusal(err)
	}
	return nil
}

// decodeRefusal classifies a strictjson.Decode error (apart from DecodeBody
// so that its success path allocates nothing for errors.As).
func decodeRefusal(err error) *Refusal {
	var se *strictjson.SyntaxError
	if errors.As(err, &se) {
		return refuse(http.StatusBadRequest, "malformed_json", "%s", err.Error())
	}
	return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", err.Error())
}

// Shared reports whether the request used the deprecated shared key: the
// daemon adds the Deprecation header and counts it.
func (v Verified) Shared() bool { return v.storedKeyID == sharedKeyID }

// Authenticate is the ingest route group's authentication: the protocol-v1
// checks up to the signature (headers, body within maxBody bytes, key,
// timestamp window, signature; docs/operations.md, "Signed ingest"). It
// returns the verified request, or the refusal to send (nothing written).
// The nonce is claimed later, in the same transaction as the handler's write.
func (s *Service) Authenticate(r *http.Request, maxBody int64) (Verified, *Response) {
	v, rf, err := s.verify(r.Context(), r, maxBody)
	if err != nil {
		s.log.Error().Err(err).Msg("ingest verification fault")
		resp := fault(err)
		return v, &resp
	}
	if rf != nil {
		if v.skewSigned && r.URL.Path == HeartbeatRoute {
			s.skewContact(r.Context(), v)
		}
		resp := refused(rf, v.Shared())
		return v, &resp
	}
	return v, nil
}

// skewContact tells the contact recorder about a heartbeat refused only
// for its timestamp: its signature verified (Verified.skewSigned), its
// body is a valid heartbeat naming the key's environment, the heartbeat
// rate quotas admit it, and its deployment exists and is active in that
// environment (one read on the pool), so a made-up id holds nothing
// (docs/operations.md, "Reaper"). It writes nothing; the answer stays 401
// timestamp_skew (docs/operations.md, "Heartbeats and deadlines").
func (s *Service) skewContact(ctx context.Context, v Verified) {
	if s.contact == nil || v.key == nil {
		return
	}
	var hb protocol.HeartbeatV1
	if DecodeBody(v.body, &hb) != nil || validateHeartbeat(&hb) != nil || hb.EnvironmentSlug != v.key.EnvironmentSlug {
		return
	}
	if s.heartbeats.allow(s.clock.Now(), hb.EnvironmentSlug, hb.Deployment.ID) != nil {
		return
	}
	st, err := storage.DeploymentStatus(ctx, s.db.Read, v.key.EnvironmentID, hb.Deployment.ID)
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			s.log.Error().Err(err).Msg("reading a skew-refused heartbeat's deployment failed")
		}
		return
	}
	if st != storage.DeploymentActive {
		return
	}
	s.contact.SkewRefused(hb.EnvironmentSlug, hb.Deployment.ID, v.signedAt)
}

// handleAdmitted runs parse on the verified body (outside the writer, so
// JSON decoding never occupies the single write connection); when parse
// accepted the body, admit (if not nil: the route's rate quotas) runs before
// the writer unit, and its refusal is answered at once, with nothing
// written, not even the nonce, and without waiting for the single writer
// (docs/operations.md, "Signed ingest" and "Quotas"). Then one writer unit
// claims the nonce and either returns parse's refusal (so a replay is 409
// before any 400/422, the order in docs/operations.md) or calls write.
// write returns the success body or an error (a *Refusal, or an internal
// fault). Nothing is written unless write succeeds.
func (s *Service) handleAdmitted(ctx context.Context, v Verified, parse func(body []byte) *Refusal, admit func() *Refusal, write func(ctx context.Context, tx storage.Tx, v Verified) (any, error)) Response {
	shared := v.Shared()
	bodyRefusal := parse(v.body)
	if bodyRefusal == nil && admit != nil {
		if rf := admit(); rf != nil {
			return refused(rf, shared)
		}
	}
	var body any
	var rf *Refusal
	var mark time.Time
	var markDue bool
	err := s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		if err := s.claim(ctx, tx, v); err != nil {
			return err
		}
		if s.mark != nil {
			// The mark rides along with a unit committed anyway, at most
			// every clockguard.MarkPersistEvery (docs/operations.md,
			// "Signed ingest").
			m, overridden, ok := s.mark.MarkDue(false)
			if ok {
				if err := writeMark(ctx, tx, m, overridden); err != nil {
					return err
				}
				mark, markDue = m, true
			}
		}
		if bodyRefusal != nil {
			return bodyRefusal
		}
		var err error
		body, err = write(ctx, tx, v)
		return err
	})
	if errors.As(err, &rf) {
		return refused(rf, shared)
	}
	var nc *noChange
	if errors.As(err, &nc) {
		s.accepted(v)
		return Response{Status: http.StatusAccepted, Body: nc.body, Shared: shared}
	}
	if err != nil {
		// A storage fault is logged once, by the storage-health loop, not
		// per request: a full disk refuses every write.
		if ctx.Err() == nil && !storage.IsStorageFault(err) {
			s.log.Error().Err(err).Msg("ingest write fault")
		}
		resp := fault(err)
		resp.Shared = shared
		return resp
	}
	if markDue {
		s.mark.MarkPersisted(mark)
	}
	s.accepted(v)
	select {
	case s.activity <- struct{}{}:
	default:
	}
	return Response{Status: http.StatusAccepted, Body: body, Shared: shared}
}

// accepted advances the high-water mark with an accepted request's signed
// time.
func (s *Service) accepted(v Verified) {
	if s.mark != nil {
		s.mark.MarkAccepted(v.signedAt)
	}
}

// noChange is returned by a write that accepts the request without
// changing anything (an exact telemetry retry): the unit is rolled back —
// its nonce claim included — and the request is answered 202 with body. An
// accepted request that writes nothing costs the control plane no replicated
// bytes, so such retries cannot be used to grow the database past the
// quotas; replaying one is harmless for the same reason (docs/operations.md,
// "Telemetry").
type noChange struct{ body any }

func (*noChange) Error() string { return "accepted without change" }

// resolveEnvironment returns the environment the request may write to: the
// key's binding, which the body's environmentSlug must equal (403 naming both
// slugs); on the shared-key path, the environment the body names, which must
// exist (the shared key cannot bind one it does not name).
func resolveEnvironment(ctx context.Context, tx storage.Querier, v Verified, slug string) (int64, error) {
	if v.key != nil {
		if slug != v.key.EnvironmentSlug {
			return 0, refuse(http.StatusForbidden, "environment_mismatch",
				"key is bound to environment %q but the body names %q", v.key.EnvironmentSlug, slug)
		}
		return v.key.EnvironmentID, nil
	}
	environment, err := storage.EnvironmentBySlug(ctx, tx, slug)
	if errors.Is(err, storage.ErrNotFound) {
		return 0, refuse(http.StatusForbidden, "environment_mismatch", "environment %q does not exist", slug)
	}
	if err != nil {
		return 0, fmt.Errorf("resolve environment: %w", err)
	}
	return environment.ID, nil
}

// admitRate is the rate quota check of a signed write route (the admit of
// handleAdmitted): it spends cost from lim for the deployment and
// environment the parsed body names, or answers the refusal, noted as a
// quota warning. A body naming another environment than the key's is not
// counted: the writer unit refuses it 403 (docs/operations.md, "Quotas").
func (s *Service) admitRate(lim *rateLimiter, v Verified, env, dep string, cost ...int) *Refusal {
	if v.key != nil && env != v.key.EnvironmentSlug {
		return nil
	}
	rf := lim.allowN(s.clock.Now(), env, dep, cost...)
	s.noteQuota(rf, env, dep)
	return rf
}
