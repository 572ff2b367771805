package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// MaxHeartbeatBody bounds a heartbeat body (bytes): 64 KiB.
const MaxHeartbeatBody = 64 << 10

// Heartbeat field bounds.
const (
	// MaxActivityAge is the oldest activity a heartbeat may report: the
	// age sentAt − lastActivityAt (both on the agent's clock) of at most
	// the longest idle limit, one week. An older activity says nothing the
	// reaper could use, and a 1970 or year-0 one is a broken or forged
	// clock (docs/operations.md, "Heartbeats and deadlines").
	MaxActivityAge = protocol.MaxLimitMinutes * time.Minute
	// SentAtTolerance is how far a heartbeat's sentAt may lie from its
	// signed X-Chalupa-Timestamp (5 s) for its age to be taken against
	// sentAt; beyond it the age is taken against the signed timestamp,
	// the time check 8 held to the signing window. The agent stamps sentAt
	// and signs in the same instant (the signed timestamp is its whole
	// second); protocol.Client signs each retry afresh while the body
	// keeps its sentAt, so a retried heartbeat is judged by when it was
	// signed (docs/operations.md, "Heartbeats and deadlines").
	SentAtTolerance = 5 * time.Second
	// MaxActivityAhead is how far after sentAt a heartbeat's activity may
	// lie (a negative age) and be taken as activity now, age 0: twice the
	// signing window (600 s), the most an agent's clock can step back
	// while its requests stay inside the window on both sides. The agent's
	// activity tracker only moves forward, so after its clock steps back
	// it reports the activity it saw on the old, later clock until the new
	// one catches up; refusing those heartbeats would leave a live
	// droplet's deadline where it was and let the reaper destroy it. An
	// age 0 claims nothing a signer could not claim anyway. Further ahead
	// is a broken or forged clock: 422 (docs/operations.md, "Heartbeats
	// and deadlines").
	MaxActivityAhead = 2 * SkewWindow
)

// validateHeartbeat checks field values (422 invalid_body). Messages name the field,
// never echo its value.
func validateHeartbeat(h *protocol.HeartbeatV1) *Refusal {
	bad := func(msg string) *Refusal { return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", msg) }
	// The rules HeartbeatV1's schema tags declare, which the OpenAPI
	// document carries too (docs/operations.md, "OpenAPI"): the ids,
	// agentVersion, the deployment's dropletId, region and size, the
	// required times and the reaper's idleChecks and limitMinutes.
	if v := apischema.Check(h); v != nil {
		return bad(v.Message())
	}
	// What a schema cannot state: a set but zero time, and the years.
	switch {
	case h.SessionExpiresAt != nil && h.SessionExpiresAt.IsZero():
		return bad("sessionExpiresAt must be a time")
	case !utcYearInRange(h.SentAt) || !utcYearInRange(h.Reaper.LastActivityAt) ||
		(h.SessionExpiresAt != nil && !utcYearInRange(*h.SessionExpiresAt)):
		// An offset can carry an RFC 3339 time outside years 0-9999 once
		// in UTC; stored so, it could never be written as JSON again (the
		// 202 or the fleet view would fail after the write committed).
		return bad("times must fall within the years 0000-9999 in UTC")
	}
	return nil
}

func utcYearInRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

// heartbeatReference is the agent-clock time a heartbeat's activity age is
// measured to: sentAt when it lies within SentAtTolerance of the signed
// timestamp, else the signed timestamp.
func heartbeatReference(sentAt, signedAt time.Time) time.Time {
	if d := sentAt.Sub(signedAt); d > SentAtTolerance || d < -SentAtTolerance {
		return signedAt
	}
	return sentAt
}

// Heartbeat handles POST /api/ingest/heartbeat for a request Authenticate
// verified (with MaxHeartbeatBody): in one writer unit the nonce claim, the body checks, and the deployment and
// heartbeat writes. The first heartbeat of a deployment id creates it; a
// heartbeat for an ended deployment is 409 deployment_ended with nothing
// written. Before the unit, the heartbeat rate quotas (per deployment and
// per environment) may refuse it 429 rate_limited with Retry-After; in the
// unit, a first heartbeat beyond the environment's active-deployment quota
// is 429 deployment_quota (docs/operations.md, "Quotas"). Success is 202
// protocol.HeartbeatAccepted.
//
// The deadline comes from elapsed time (docs/operations.md, "Heartbeats and
// deadlines"): the activity's age, measured on the agent's clock alone to
// sentAt (or to the signed timestamp: heartbeatReference), is taken back
// from the request's arrival on the server's clock, so no offset between
// the two clocks enters it. An age above MaxActivityAge or below
// −MaxActivityAhead is 422 invalid_body; a negative age within that is an
// agent clock that stepped back, taken as age 0. A heartbeat whose transit
// is more than TransitTolerance longer than its deployment's recent median
// is stored but moves nothing, unless its agent's clock stepped back
// (a negative age, which no delayed delivery produces): that heartbeat
// starts the deployment's transit history afresh.
func (s *Service) Heartbeat(ctx context.Context, v Verified) Response {
	var hb protocol.HeartbeatV1
	// activityAt is the activity on the server's clock, transit the
	// heartbeat's time on its way (in the steady frame).
	var activityAt time.Time
	var transit time.Duration
	// stepped marks an activity after sentAt: the agent's clock stepped
	// back, so its earlier transits no longer describe it.
	var stepped bool
	parse := func(body []byte) *Refusal {
		if rf := DecodeBody(body, &hb); rf != nil {
			return rf
		}
		if rf := validateHeartbeat(&hb); rf != nil {
			return rf
		}
		ref := heartbeatReference(hb.SentAt, v.signedAt)
		age := ref.Sub(hb.Reaper.LastActivityAt)
		if age < -MaxActivityAhead {
			return refuse(http.StatusUnprocessableEntity, "invalid_body", "reaper.lastActivityAt must not be more than 10 minutes after sentAt")
		}
		if age < 0 {
			// The agent's clock stepped back under its activity tracker.
			age, stepped = 0, true
		}
		if age > MaxActivityAge {
			return refuse(http.StatusUnprocessableEntity, "invalid_body", "reaper.lastActivityAt must be within 7 days before sentAt")
		}
		activityAt = v.receivedAt.Add(-age).UTC()
		transit = v.steadyAt.Sub(ref)
		return nil
	}
	// The heartbeat rate quotas, checked once the signed body parsed (it
	// names the deployment) and before the writer unit: a flood never
	// reaches the single writer. A body naming another environment than
	// the key's is not counted: the unit refuses it 403.
	admit := func() *Refusal { return s.admitRate(s.heartbeats, v, hb.EnvironmentSlug, hb.Deployment.ID) }
	// decision is the earliest deadline the heartbeat stored, for the
	// reaper's wake-up once the unit committed; stored names the
	// deployment whose transit it was.
	var decision time.Time
	var stored transitKey
	var late bool
	// confirmed is a rotation's key this heartbeat confirmed (the first
	// heartbeat signed with it), with the earlier keys it revoked.
	var confirmed storage.KeyConfirmation
	resp := s.handleAdmitted(ctx, v, parse, admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		environmentID, err := resolveEnvironment(ctx, tx, v, hb.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		now := s.clock.Now().UTC()
		stored = transitKey{environmentID: environmentID, deploymentID: hb.Deployment.ID}
		limit := time.Duration(hb.Reaper.LimitMinutes) * time.Minute
		late = !stepped && s.transits.late(stored, transit)
		rec := storage.Heartbeat{
			DeploymentID:   hb.Deployment.ID,
			EnvironmentID:  environmentID,
			KeyID:          v.storedKeyID,
			ReceivedAt:     v.receivedAt.UTC(),
			SentAt:         hb.SentAt,
			AgentVersion:   hb.AgentVersion,
			DropletID:      hb.Deployment.DropletID,
			Region:         hb.Deployment.Region,
			Size:           hb.Deployment.Size,
			IdleChecks:     hb.Reaper.IdleChecks,
			LimitMinutes:   hb.Reaper.LimitMinutes,
			LastActivityAt: hb.Reaper.LastActivityAt,
			ActivityAt:     activityAt,
			Late:           late,
			CIActive:       hb.Reaper.CIActive,
			// The deadline this heartbeat implies, kept on its row; the
			// deployment's stored deadline never moves back for it.
			IdleDeadlineAt: activityAt.Add(limit),
		}
		if hb.SessionExpiresAt != nil {
			rec.SessionExpiresAt = *hb.SessionExpiresAt
		}
		// The active deployment is updated first; its status is read only
		// when that matched nothing (a first heartbeat, an ended deployment,
		// or another droplet's claim, refused with nothing written).
		applied, err := storage.ApplyHeartbeatWithin(ctx, tx, rec, s.quotas.ActiveDeployments)
		if errors.Is(err, storage.ErrDeploymentEnded) {
			return nil, refuse(http.StatusConflict, "deployment_ended", "deployment has ended; start a new deployment id")
		} else if errors.Is(err, storage.ErrDropletMismatch) {
			return nil, refuse(http.StatusConflict, "droplet_mismatch", "deployment.dropletId differs from the droplet this deployment already reported")
		} else if errors.Is(err, storage.ErrDeploymentQuota) {
			rf := refuse(http.StatusTooManyRequests, "deployment_quota",
				"environment has %d active deployments, its quota; end one or raise the quota", s.quotas.ActiveDeployments)
			rf.Quota = QuotaActiveDeployments
			s.noteQuota(rf, hb.EnvironmentSlug, "")
			return nil, rf
		} else if err != nil {
			return nil, err
		}
		if v.key != nil && v.key.confirmPending {
			if confirmed, err = confirmRotation(ctx, tx, v.key.ID, environmentID, hb.Deployment.ID, now); err != nil {
				return nil, err
			}
		}
		decision = applied.IdleDeadlineAt
		if !applied.SessionExpiresAt.IsZero() && applied.SessionExpiresAt.Before(decision) {
			decision = applied.SessionExpiresAt
		}
		// The stored expiry is earlier than the one asked for (at the
		// schema's millisecond resolution) only when the environment's
		// session policy clamped it.
		clamped := hb.SessionExpiresAt != nil && applied.SessionExpiresAt.Before(hb.SessionExpiresAt.Truncate(time.Millisecond))
		return protocol.HeartbeatAccepted{Accepted: true, IdleDeadlineAt: applied.IdleDeadlineAt, SessionExpiresAt: applied.SessionExpiresAt,
			SessionExpiresAtClamped: clamped, ServerTime: now.Truncate(time.Millisecond)}, nil
	})
	if resp.Status == http.StatusAccepted {
		if confirmed.Confirmed {
			s.keys.confirmed(v.key.ID, confirmed.Revoked)
		}
		if stepped {
			s.transits.restart(stored, transit)
		} else {
			s.transits.add(stored, transit)
		}
		s.observeOffset(v, hb.EnvironmentSlug, hb.Deployment.ID, hb.SentAt, late)
		s.deadlines.Notify(decision)
		if s.contact != nil {
			s.contact.HeartbeatAccepted(hb.EnvironmentSlug)
		}
	}
	return resp
}

// EventKeyRotated is recorded on a deployment when the first heartbeat
// signed with the key a rotation delivered to its droplet revoked the
// droplet's earlier keys (docs/operations.md, "Ingest keys").
const EventKeyRotated = "ingest-key-rotated"

// confirmRotation confirms keyID, a rotation's key awaiting its first
// heartbeat, inside the heartbeat's writer unit: the droplet's earlier
// keys are revoked and an EventKeyRotated recorded on the deployment, or
// nothing happens if another heartbeat confirmed it first. The keyring's
// cache follows once the unit committed (Keyring.confirmed). The event
// names how many keys were revoked, never a key id.
func confirmRotation(ctx context.Context, tx storage.Tx, keyID string, environmentID int64, deployment string, now time.Time) (storage.KeyConfirmation, error) {
	c, err := storage.ConfirmDeliveredKey(ctx, tx, keyID, now)
	if err != nil || !c.Confirmed {
		return c, err
	}
	_, err = storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
		ID:            fmt.Sprintf("%s:%s:%d", EventKeyRotated, deployment, now.UnixNano()),
		EnvironmentID: environmentID, DeploymentID: deployment, Kind: EventKeyRotated, OccurredAt: now,
		Message: fmt.Sprintf("droplet %d signs with the ingest key its rotation delivered; %d earlier key(s) of the droplet revoked", c.DropletID, len(c.Revoked)),
	})
	return c, err
}
