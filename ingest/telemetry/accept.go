package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// Limits are the per-deployment bounds on telemetry (docs/operations.md,
// "Telemetry").
type Limits struct {
	// MaxReceipts caps the retry receipts one deployment may hold; past it
	// every new window is refused (ErrTelemetryQuota). Receipts are never
	// removed except by erase, so the cap bounds what one deployment can
	// ever write.
	MaxReceipts int64
	// OpenSessions caps the sessions of one deployment that have not ended,
	// and the sessions it opened in the last OpeningWindow, ended or not;
	// a window that would open one more is refused (ErrSessionQuota). 0
	// means unlimited.
	OpenSessions int64
	// OpeningWindow is how far back opened sessions are counted against
	// OpenSessions (DefaultOpeningWindow); 0 counts open sessions only.
	OpeningWindow time.Duration
}

// DefaultMaxReceipts is 14 days of minute windows (20,160): an agent that
// streams without a break for a deployment's longest life fits; a
// deployment that has written that many cannot write more.
const DefaultMaxReceipts = 14 * 24 * 60

// DefaultOpenSessions is the default bound on open sessions per
// deployment: an agent runs one Monitor session at a time, and restarts
// leave a few unfinished ones behind until the deployment ends.
const DefaultOpenSessions = 8

// DefaultOpeningWindow is how far back the sessions a deployment opened
// are counted against OpenSessions: an honest agent opens one session per
// start, so OpenSessions starts in an hour is already a crash loop, while
// windows that each open and close their own session (final: true) can no
// longer multiply sessions (docs/operations.md, "Quotas").
const DefaultOpeningWindow = time.Hour

// DefaultLimits returns the documented defaults.
func DefaultLimits() Limits {
	return Limits{MaxReceipts: DefaultMaxReceipts, OpenSessions: DefaultOpenSessions, OpeningWindow: DefaultOpeningWindow}
}

// SessionQuotaError is ErrSessionQuota for a deployment that opened
// OpenSessions sessions within OpeningWindow: RetryAfter is when the
// oldest of them leaves the window. errors.Is(err, ErrSessionQuota) holds.
type SessionQuotaError struct {
	// RetryAfter is the time until a window may open a session again.
	RetryAfter time.Duration
}

func (e *SessionQuotaError) Error() string {
	return ErrSessionQuota.Error() + " (sessions opened in the last hour)"
}

// Is makes errors.Is(e, ErrSessionQuota) hold.
func (e *SessionQuotaError) Is(target error) bool { return target == ErrSessionQuota }

// Refusals of Accept. Each is a documented ingest answer
// (docs/operations.md, "Telemetry"); nothing is written when one is
// returned.
var (
	// ErrUnknownDeployment: the key's environment has no such deployment
	// (a heartbeat creates it). 404 deployment_not_found.
	ErrUnknownDeployment = errors.New("deployment does not exist in this environment")
	// ErrWindowConflict: a window of the same identity was accepted with a
	// different body. 409 window_conflict.
	ErrWindowConflict = errors.New("a different window with this identity was already accepted")
	// ErrWindowTooOld: the window ended more than protocol.MaxWindowAge ago.
	// 422 window_too_old.
	ErrWindowTooOld = errors.New("window is older than two hours")
	// ErrWindowInFuture: the window ends later than the clock-skew window
	// allows. 422 window_in_future.
	ErrWindowInFuture = errors.New("window ends in the future")
	// ErrDeploymentEnded: the deployment ended and the window starts after
	// its end, or the final-window grace has passed. 409 deployment_ended.
	ErrDeploymentEnded = errors.New("deployment has ended")
	// ErrTelemetryQuota: the deployment holds MaxReceipts receipts.
	// 429 telemetry_quota.
	ErrTelemetryQuota = errors.New("deployment reached its telemetry window quota")
	// ErrSessionQuota: the window would open more than OpenSessions open
	// sessions, or the OpenSessions+1st session within OpeningWindow
	// (then as a *SessionQuotaError). 429 session_quota.
	ErrSessionQuota = errors.New("deployment reached its open telemetry session quota")
)

// Admission is one validated window to admit.
type Admission struct {
	// EnvironmentID is the environment the request may write to (the
	// key's binding, checked against the body by ingest).
	EnvironmentID int64
	Window        *protocol.WindowV1
	// Now is the server's clock.
	Now time.Time
	// SkewWindow is the clock skew tolerated for a window's end
	// (ingest.SkewWindow, 300 s).
	SkewWindow time.Duration
	Limits     Limits
	// BodyHash is Window.Canonical's hash when the caller already computed
	// it outside the writer (the ingest handler does, so the single writer
	// never spends time encoding); zero means Accept computes it.
	BodyHash [32]byte
}

// Result is what Accept did.
type Result struct {
	// Deduplicated is true for an exact retry: nothing new was written.
	Deduplicated bool
	// SessionCreated is true when the window opened its session.
	SessionCreated bool
	// Anomalies lists the anomaly rules the window raised (rule names).
	Anomalies []string
}

// Accept admits one window inside the writer's unit q, in the order of
// docs/operations.md, "Telemetry": the deployment must exist; a window
// whose identity has a receipt is an exact retry (deduplicated) or a
// changed one (ErrWindowConflict) — checked before the age rules, so a
// replay is judged by its receipt forever, even after retention folded its
// detail; then age, future, deployment end, the receipt cap and the open
// session cap. An admitted window writes its receipt, its detail row, its
// session (created, or counted with its version incremented and any
// terminal summary cleared) and its anomalies. Errors: the sentinels above
// (nothing written), or a storage fault.
func Accept(ctx context.Context, q storage.Querier, a Admission) (Result, error) {
	w := a.Window
	env, dep, sess := a.EnvironmentID, w.DeploymentID, w.SessionID
	start := w.WindowStart.UTC()
	end := start.Add(window)
	st, err := storage.DeploymentTelemetry(ctx, q, env, dep)
	if errors.Is(err, storage.ErrNotFound) {
		return Result{}, ErrUnknownDeployment
	}
	if err != nil {
		return Result{}, err
	}
	sum := a.BodyHash
	if sum == ([32]byte{}) {
		_, sum = CanonicalWindow(w)
	}
	switch prev, err := storage.TelemetryReceiptHash(ctx, q, env, dep, sess, start); {
	case err == nil && prev == sum:
		return Result{Deduplicated: true}, nil
	case err == nil:
		return Result{}, ErrWindowConflict
	case !errors.Is(err, storage.ErrNotFound):
		return Result{}, err
	}
	switch {
	case end.Before(a.Now.Add(-protocol.MaxWindowAge)):
		return Result{}, ErrWindowTooOld
	case end.After(a.Now.Add(a.SkewWindow)):
		return Result{}, ErrWindowInFuture
	}
	ended := st.Status == storage.DeploymentEnded
	if ended && (!start.Before(st.EndedAt) || a.Now.After(st.EndedAt.Add(FinalWindowGrace))) {
		return Result{}, ErrDeploymentEnded
	}
	if a.Limits.MaxReceipts > 0 && st.Receipts >= a.Limits.MaxReceipts {
		return Result{}, ErrTelemetryQuota
	}
	var res Result
	_, err = storage.TelemetrySessionByID(ctx, q, env, dep, sess)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		res.SessionCreated = true
		if a.Limits.OpenSessions > 0 {
			// Sessions opened recently count whether or not they ended,
			// and also for an ended deployment (whose new sessions are
			// born ended): a window that opens and closes its own session
			// cannot multiply sessions.
			c, err := storage.CountTelemetrySessions(ctx, q, env, dep, a.Now.Add(-a.Limits.OpeningWindow))
			if err != nil {
				return Result{}, err
			}
			if !ended && c.Open >= a.Limits.OpenSessions {
				return Result{}, ErrSessionQuota
			}
			if a.Limits.OpeningWindow > 0 && c.Opened >= a.Limits.OpenSessions {
				return Result{}, &SessionQuotaError{RetryAfter: c.OldestOpened.Add(a.Limits.OpeningWindow).Sub(a.Now)}
			}
		}
	case err != nil:
		return Result{}, err
	}
	if err := storage.InsertTelemetryReceipt(ctx, q, storage.TelemetryReceipt{
		EnvironmentID: env, DeploymentID: dep, SessionID: sess, WindowStart: start, BodyHash: sum, ReceivedAt: a.Now,
	}); err != nil {
		return Result{}, fmt.Errorf("telemetry receipt: %w", err)
	}
	metrics := metricSet(w)
	if err := storage.InsertTelemetryWindow(ctx, q, storage.TelemetryWindow{
		EnvironmentID: env, DeploymentID: dep, SessionID: sess, WindowStart: start, ReceivedAt: a.Now, Final: w.Final, Metrics: metrics,
	}); err != nil {
		return Result{}, fmt.Errorf("telemetry window: %w", err)
	}
	if _, err := storage.RecordSessionWindow(ctx, q, env, dep, sess, start, end, a.Now, w.Final); err != nil {
		return Result{}, err
	}
	if ended && res.SessionCreated {
		// A final window of a session first seen after its deployment
		// ended: the session is born ended, as EndDeployment would have
		// left it.
		if err := storage.EndTelemetrySession(ctx, q, env, dep, sess, st.EndedAt, storage.SessionEndDeploymentEnded); err != nil {
			return Result{}, err
		}
	}
	raised, err := evaluateAnomalies(ctx, q, env, dep, sess, start, &metrics, !ended)
	if err != nil {
		return Result{}, err
	}
	res.Anomalies = raised
	return res, nil
}
