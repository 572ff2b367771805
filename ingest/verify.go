package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// SkewWindow is the largest accepted |server time − X-Chalupa-Timestamp|
// (docs/operations.md, "Signed ingest": 300 s).
const SkewWindow = 300 * time.Second

// codeTimestampSkew is the refusal code of check 8.
const codeTimestampSkew = "timestamp_skew"

// sharedKeyID is what the deprecated shared key's requests are stored under
// in nonces.key_id and heartbeats.key_id (their nonces are kept apart from
// every key's own).
// Per-environment key ids always start with "env_", so it cannot collide.
const sharedKeyID = "shared"

// Refusal is a request refused by verification or by the write: an HTTP
// status, a stable code and a message safe to show the client (no SQL, key
// material, URLs or fleet data).
type Refusal struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, when above 0, is the Retry-After header to send (whole
	// seconds): a rate limit's time until its next token.
	RetryAfter int
	// Quota names the quota that refused the request (QuotaNames), or is
	// empty; the daemon counts it in chalupa_ingest_quota_refused_total.
	Quota string
}

// Error is "code: message".
func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

func refuse(status int, code, format string, a ...any) *Refusal {
	return &Refusal{Status: status, Code: code, Message: fmt.Sprintf(format, a...)}
}

// Verified is a request that passed authentication (Authenticate): its key,
// nonce, signed time and body. Only Authenticate makes one; the handlers take
// it, so an ingest handler cannot run on an unauthenticated request.
type Verified struct {
	key         *Key   // nil on the shared-key path
	storedKeyID string // what nonces.key_id and heartbeats.key_id hold: the key id, or "shared"
	nonce       string
	signedAt    time.Time
	body        []byte
	// receivedAt is the server's wall time when the request arrived
	// (before its body was read), and steadyAt the same moment in the
	// steady frame (Service.steadyNow): the heartbeat's activity is placed
	// and its transit measured from them, not from when the writer got to
	// it (docs/operations.md, "Heartbeats and deadlines").
	receivedAt time.Time
	steadyAt   time.Time
	// skewSigned is set on a request refused timestamp_skew whose
	// signature is valid: the agent that signed it is alive.
	skewSigned bool
}

// verify runs the protocol-v1 checks in the order of docs/operations.md, "Signed ingest": headers present,
// body within maxBody, key known and usable, timestamp within SkewWindow
// and not before the high-water mark minus SkewWindow (Config.Mark),
// signature. The nonce, JSON and environment checks happen in the write
// (claimNonce and the handlers), so a refusal at any step writes nothing.
// A nil *Refusal and a nil error mean the request is authentic; a non-nil
// error is an internal fault (it may hold details; log it, never send it).
func (s *Service) verify(ctx context.Context, r *http.Request, maxBody int64) (Verified, *Refusal, error) {
	v := Verified{receivedAt: s.clock.Now(), steadyAt: s.steadyNow()}
	h := r.Header
	// A repeated protocol header is ambiguous: this server reads the first
	// value, a proxy or auditor might read the last and see another request.
	for _, name := range []string{protocol.HeaderKeyID, protocol.HeaderTimestamp, protocol.HeaderNonce, protocol.HeaderSignature} {
		if len(h.Values(name)) > 1 {
			return v, refuse(http.StatusUnauthorized, "duplicate_header", "%s appears more than once", name), nil
		}
	}
	keyID := h.Get(protocol.HeaderKeyID)
	ts, nonce, sig := h.Get(protocol.HeaderTimestamp), h.Get(protocol.HeaderNonce), h.Get(protocol.HeaderSignature)
	if ts == "" || nonce == "" || sig == "" {
		return v, refuse(http.StatusUnauthorized, "missing_headers",
			"%s, %s and %s are required", protocol.HeaderTimestamp, protocol.HeaderNonce, protocol.HeaderSignature), nil
	}
	if keyID == "" && s.sharedKey == nil {
		return v, refuse(http.StatusUnauthorized, "missing_headers", "%s is required", protocol.HeaderKeyID), nil
	}
	if !protocol.ValidNonce(nonce) {
		return v, refuse(http.StatusUnauthorized, "bad_nonce", "%s", protocol.ErrBadNonce.Error()), nil
	}

	if r.ContentLength > maxBody {
		return v, refuse(http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds %d bytes", maxBody), nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return v, refuse(http.StatusBadRequest, "unreadable_body", "could not read body"), nil
	}
	if int64(len(body)) > maxBody {
		return v, refuse(http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds %d bytes", maxBody), nil
	}
	v.body = body

	var hmacKey []byte
	if keyID == "" {
		hmacKey, v.storedKeyID = s.sharedKey, sharedKeyID
	} else {
		key, err := s.keys.Lookup(ctx, keyID)
		switch {
		case errors.Is(err, ErrKeyNotFound):
			return v, refuse(http.StatusUnauthorized, "unknown_key", "unknown key id"), nil
		case err != nil:
			return v, nil, err
		case key.Status == storage.KeyRevoked:
			return v, refuse(http.StatusUnauthorized, "key_revoked", "key has been revoked"), nil
		}
		v.key, hmacKey, v.storedKeyID = key, key.material, key.ID
	}

	sec, err := protocol.ParseTimestamp(ts)
	if err != nil {
		return v, refuse(http.StatusUnauthorized, "bad_timestamp", "%s", err.Error()), nil
	}
	now := s.clock.Now()
	v.signedAt = time.Unix(sec, 0)
	if d := now.Unix() - sec; d > int64(SkewWindow/time.Second) || d < -int64(SkewWindow/time.Second) {
		// Still refused for its timestamp whatever the signature says; a
		// valid one makes it contact (Authenticate; docs/operations.md,
		// "Heartbeats and deadlines").
		ok, err := protocol.Verify(hmacKey, sig, ts, nonce, r.Method, r.URL.Path, body)
		v.skewSigned = err == nil && ok && v.key != nil
		return v, refuse(http.StatusUnauthorized, codeTimestampSkew, "timestamp is more than %d seconds from server time", int(SkewWindow/time.Second)), nil
	}

	ok, err := protocol.Verify(hmacKey, sig, ts, nonce, r.Method, r.URL.Path, body)
	valid := err == nil && ok
	if s.mark != nil && s.mark.MarkFloor(v.signedAt) {
		// Signed before the high-water mark minus the window: refused
		// for its timestamp whatever the wall clock says, so a nonce the
		// pruner deleted below the mark cannot be replayed after a step
		// back (docs/operations.md, "Signed ingest"). A valid signature
		// from an environment key is contact, and its agreement with the
		// clock may override the mark (then it is judged again).
		if !valid || v.key == nil || !s.mark.MarkAgreed(v.key.EnvironmentSlug, v.signedAt) || s.mark.MarkFloor(v.signedAt) {
			v.skewSigned = valid && v.key != nil
			return v, refuse(http.StatusUnauthorized, codeTimestampSkew, "timestamp is more than %d seconds before the newest accepted request's", int(SkewWindow/time.Second)), nil
		}
	}
	if !valid {
		return v, refuse(http.StatusUnauthorized, "bad_signature", "signature does not match"), nil
	}
	v.nonce = nonce
	return v, nil, nil
}

// claim runs inside the write transaction before anything else is written:
// it claims the nonce under the request's stored key id and rechecks that the key was
// not revoked since verification. Either refusal rolls back the unit, so the
// nonce stays unclaimed.
func (s *Service) claim(ctx context.Context, tx storage.Tx, v Verified) error {
	err := storage.ClaimNonce(ctx, tx, v.storedKeyID, v.nonce, v.signedAt)
	if errors.Is(err, storage.ErrConflict) {
		return refuse(http.StatusConflict, "nonce_replayed", "nonce already used for this key")
	}
	if err != nil {
		return err
	}
	s.nonces.Claimed(v.signedAt)
	if v.key == nil {
		return nil
	}
	st, err := storage.IngestKeyStatus(ctx, tx, v.key.ID)
	if err != nil {
		return err
	}
	if st == storage.KeyRevoked {
		s.keys.evict(v.key.ID)
		return refuse(http.StatusUnauthorized, "key_revoked", "key has been revoked")
	}
	return nil
}
