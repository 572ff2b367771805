package ingest

import (
	"context"
	"errors"
	"math"
	"net/http"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// MaxTelemetryBody bounds a telemetry window body (bytes): 64 KiB.
const MaxTelemetryBody = 64 << 10

// TelemetryAccepted is the 202 body of POST /api/ingest/telemetry.
type TelemetryAccepted struct {
	Accepted bool `json:"accepted"`
	// Deduplicated is true for an exact retry of a window already accepted:
	// nothing of the window was written again.
	Deduplicated bool `json:"deduplicated"`
}

// telemetryRefusals maps telemetry.Accept's refusals to their answers
// (docs/operations.md, "Telemetry").
var telemetryRefusals = []struct {
	err    error
	status int
	code   string
	msg    string
}{
	{telemetry.ErrUnknownDeployment, http.StatusNotFound, "deployment_not_found", "the deployment does not exist in this environment; a heartbeat creates it"},
	{telemetry.ErrWindowConflict, http.StatusConflict, "window_conflict", "a different window with this session and windowStart was already accepted"},
	{telemetry.ErrWindowTooOld, http.StatusUnprocessableEntity, "window_too_old", "the window ended more than two hours ago"},
	{telemetry.ErrWindowInFuture, http.StatusUnprocessableEntity, "window_in_future", "the window ends later than the clock skew allows"},
	{telemetry.ErrDeploymentEnded, http.StatusConflict, "deployment_ended", "the deployment has ended: only windows starting before its end are admitted, for 15 minutes"},
	{telemetry.ErrTelemetryQuota, http.StatusTooManyRequests, "telemetry_quota", "the deployment holds the maximum number of telemetry windows"},
	{telemetry.ErrSessionQuota, http.StatusTooManyRequests, "session_quota", "the deployment has the maximum number of open telemetry sessions"},
}

// Telemetry handles POST /api/ingest/telemetry for a request Authenticate
// verified (with MaxTelemetryBody): one minute window of one telemetry
// session, admitted by telemetry.Accept in the same writer unit as the
// nonce claim. Before the unit, the telemetry rate quotas (per deployment
// and per environment) may refuse it 429 rate_limited with Retry-After, and
// beyond the environment's storage budget a window is 429 storage_quota
// (docs/operations.md, "Quotas"). Success is 202 TelemetryAccepted (an
// exact retry included); every refusal writes nothing.
func (s *Service) Telemetry(ctx context.Context, v Verified) Response {
	var w protocol.WindowV1
	var hash [32]byte
	parse := func(body []byte) *Refusal {
		if rf := DecodeBody(body, &w); rf != nil {
			return rf
		}
		var inv *telemetry.Invalid
		if err := telemetry.ValidateWindow(&w); errors.As(err, &inv) {
			return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", inv.Message)
		} else if err != nil {
			return refuse(http.StatusUnprocessableEntity, "invalid_body", "invalid window")
		}
		// Hashed here, outside the writer's unit.
		_, hash = telemetry.CanonicalWindow(&w)
		return nil
	}
	// Before the writer (docs/operations.md, "Quotas"): the telemetry
	// rates, then the storage budget.
	admit := func() *Refusal {
		if rf := s.admitRate(s.telemetryRate, v, w.EnvironmentSlug, w.DeploymentID); rf != nil {
			return rf
		}
		return s.admitStorage(v, w.EnvironmentSlug, storage.WindowCharge(w.DeploymentID, w.SessionID))
	}
	return s.handleAdmitted(ctx, v, parse, admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		environmentID, err := resolveEnvironment(ctx, tx, v, w.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		res, err := telemetry.Accept(ctx, tx, telemetry.Admission{
			EnvironmentID: environmentID, Window: &w, Now: s.clock.Now().UTC(), SkewWindow: SkewWindow, Limits: s.telemetry, BodyHash: hash,
		})
		for _, r := range telemetryRefusals {
			if errors.Is(err, r.err) {
				rf := refuse(r.status, r.code, "%s", r.msg)
				// Counted and warned as quotas (docs/operations.md, "Quotas").
				switch r.err {
				case telemetry.ErrSessionQuota:
					rf.Quota = QuotaOpenSessions
					var sq *telemetry.SessionQuotaError
					if errors.As(err, &sq) {
						rf.Message = "the deployment opened the maximum number of telemetry sessions in the last hour"
						rf.RetryAfter = max(1, int(math.Ceil(sq.RetryAfter.Seconds())))
					}
				case telemetry.ErrTelemetryQuota:
					rf.Quota = QuotaTelemetryReceipts
				}
				if rf.Quota != "" {
					s.noteQuota(rf, w.EnvironmentSlug, w.DeploymentID)
				}
				return nil, rf
			}
		}
		if err != nil {
			return nil, err
		}
		if res.Deduplicated {
			// Nothing to write: not even the nonce (see noChange).
			return nil, &noChange{body: TelemetryAccepted{Accepted: true, Deduplicated: true}}
		}
		if err := s.checkStorage(ctx, tx, environmentID, w.EnvironmentSlug, storage.WindowCharge(w.DeploymentID, w.SessionID)); err != nil {
			return nil, err
		}
		return TelemetryAccepted{Accepted: true}, nil
	})
}
