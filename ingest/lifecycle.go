package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// MaxLifecycleBody bounds a lifecycle event body (bytes): 16 KiB, far above
// the few hundred bytes an event takes.
const MaxLifecycleBody = 16 << 10

// MaxEventsPerDeployment caps the producer lifecycle events one deployment
// can hold (429 event_quota beyond it): an honest droplet reports a handful
// (launched, booted, a shutdown per agent stop) plus two per CI job, so
// 4,000 is a CI job every five minutes for a week; it bounds what one
// leaked environment key writes per deployment, as the telemetry receipt
// cap does (docs/operations.md, "Lifecycle events and runs").
const MaxEventsPerDeployment = 4000

// LaunchedLimitMinutes is the idle limit of a deployment a `launched` event
// creates: the agent's default (docs/operations.md, "Agent"). Its idle
// deadline starts at the event, so a droplet whose agent never reports is
// still reaped; the first heartbeat replaces the limit with the agent's.
const LaunchedLimitMinutes = 30

// SunkCheckTimeout bounds the provider lookup a `sunk` event makes on the
// request path (docs/operations.md, "Lifecycle events and runs"): past it
// the event is answered with the droplet unchecked and inventory
// reconciliation settles it.
const SunkCheckTimeout = 5 * time.Second

// eventKinds maps each kind to whether it is admitted for an ended
// deployment: what happens at or after the end (a shutdown, the end of a
// CI job, the teardown) is history worth keeping; a launch, boot or CI
// start of an ended deployment is not (409 deployment_ended).
var eventKinds = map[string]bool{
	protocol.EventLaunched: false, protocol.EventBooted: false, protocol.EventCIStarted: false,
	protocol.EventCIFinished: true, protocol.EventShutdown: true, protocol.EventSunk: true,
}

// Kinds chalupa records itself in answer to a `sunk` event, besides
// EventReaperWarning (a droplet that still exists: the deployment stays on
// the reaper's list).
const (
	// EventDeploymentEnded is recorded when a `sunk` event's droplet is
	// gone (404) and the deployment ended.
	EventDeploymentEnded = "deployment-ended"
)

// Droplet check outcomes of a `sunk` event (LifecycleAccepted.Droplet).
const (
	// DropletGone: the provider answered 404; the deployment ended.
	DropletGone = "gone"
	// DropletExists: the droplet still exists; the deployment stays active
	// and a reaper-warning is recorded.
	DropletExists = "exists"
	// DropletUnchecked: no read token, no droplet id recorded for the
	// deployment, the lookup failed or timed out, or another check was
	// running; inventory reconciliation (or the reaper) settles it.
	DropletUnchecked = "unchecked"
)

// LifecycleAccepted is the 202 body of POST /api/ingest/lifecycle.
type LifecycleAccepted struct {
	Accepted bool `json:"accepted"`
	// Deduplicated is true for a retry of an event already recorded with
	// the same body: nothing was written.
	Deduplicated bool `json:"deduplicated"`
	// Created is true when a `launched` event created the deployment.
	Created bool `json:"created,omitempty"`
	// Droplet is the provider check of a `sunk` event for an active
	// deployment: gone, exists or unchecked.
	Droplet string `json:"droplet,omitempty"`
}

// DropletOwner says whose provider account holds a deployment's droplet:
// the platform's (the platform organization's deployments, and every
// managed deployment) or a customer organization's (docs/operations.md,
// "Customer organizations").
type DropletOwner struct {
	// OrgID is the deployment's environment's organization.
	OrgID int64
	// Managed deployments run in the platform's account whatever their
	// organization.
	Managed bool
}

// Customer reports whether the droplet lives in a customer organization's
// own account, where only that organization's token may look (never the
// platform's: a platform lookup there answers 404 for a live droplet).
func (o DropletOwner) Customer() bool {
	return o.OrgID != storage.PlatformOrgID && !o.Managed
}

// DropletLookup reports whether a droplet exists at the provider, looked
// up in its owner's account: the platform read token for the platform's,
// the organization's own active token for a customer's
// (docs/operations.md, "Lifecycle events and runs"). Errors: the lookup
// failed or no credential may look (the answer is unknown).
type DropletLookup func(ctx context.Context, owner DropletOwner, dropletID int64) (exists bool, err error)

// validateLifecycleEvent checks an event's values against now (422
// invalid_body). Messages name the field, never echo its value.
func validateLifecycleEvent(e *protocol.LifecycleEventV1, now time.Time) *Refusal {
	bad := func(msg string) *Refusal { return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", msg) }
	// The rules LifecycleEventV1's schema tags declare, which the OpenAPI
	// document carries too (docs/operations.md, "OpenAPI"): among them
	// kind's enum, the keys of eventKinds (TestEventKindsAreTheTag);
	// occurredAt; the deployment's dropletId, region and size.
	if v := apischema.Check(e); v != nil {
		return bad(v.Message())
	}
	// What a schema cannot state: the years, the server's clock, and
	// managed's tie to the kind.
	switch {
	case !utcYearInRange(e.OccurredAt):
		return bad("occurredAt is required")
	case e.OccurredAt.After(now.Add(SkewWindow)):
		return bad("occurredAt is in the future")
	case e.Deployment.Managed && e.Kind != protocol.EventLaunched:
		return bad("deployment.managed applies to launched events only")
	}
	return nil
}

// lifecycleHash is the SHA-256 of the event's canonical encoding: the
// decoded fields re-encoded in a fixed order, times in UTC at the stored
// millisecond resolution, so two bodies that say the same thing hash alike.
func lifecycleHash(e *protocol.LifecycleEventV1) [32]byte {
	c := *e
	c.OccurredAt = c.OccurredAt.UTC().Truncate(time.Millisecond)
	b, _ := json.Marshal(c) // a struct of strings, numbers and a time: cannot fail
	return sha256.Sum256(b)
}

// storedEventID is where a producer's event id is stored: scoped to its
// environment (one environment's key can neither collide with nor probe
// another's ids) and apart from the ids chalupa records itself.
func storedEventID(environmentID int64, id string) string {
	return "agent:" + strconv.FormatInt(environmentID, 10) + ":" + id
}

// Lifecycle handles POST /api/ingest/lifecycle for a request Authenticate
// verified (with MaxLifecycleBody): one producer lifecycle event, recorded
// under its stable id in the same writer unit as the nonce claim. The same
// id with the same canonical body is 202 deduplicated with nothing written
// (not even the nonce); with another body 409 event_conflict. `launched`
// creates the deployment if no heartbeat did (409 droplet_mismatch,
// deployment_ended; 429 deployment_quota); other kinds need the deployment
// (404 deployment_not_found) and, for launched, booted and ci-started, an
// active one (409 deployment_ended); beyond the environment's storage
// budget an event is 429 storage_quota ("Quotas"). A `sunk` event for an active
// deployment is recorded, then checked with the provider (SunkCheckTimeout,
// one check at a time): only a droplet that is gone ends the deployment,
// through storage.EndDeployment (docs/operations.md, "Lifecycle events and
// runs"). Before the unit, the lifecycle rate quotas may refuse it 429
// rate_limited with Retry-After (docs/operations.md, "Quotas").
func (s *Service) Lifecycle(ctx context.Context, v Verified) Response {
	var ev protocol.LifecycleEventV1
	var hash [32]byte
	parse := func(body []byte) *Refusal {
		if rf := DecodeBody(body, &ev); rf != nil {
			return rf
		}
		if rf := validateLifecycleEvent(&ev, s.clock.Now()); rf != nil {
			return rf
		}
		hash = lifecycleHash(&ev)
		return nil
	}
	var environmentID int64
	var checkDroplet int64
	var check bool
	var created bool
	// Before the writer (docs/operations.md, "Quotas"): the lifecycle rates,
	// then the storage budget.
	admit := func() *Refusal {
		if rf := s.admitRate(s.lifecycleRate, v, ev.EnvironmentSlug, ev.Deployment.ID); rf != nil {
			return rf
		}
		return s.admitStorage(v, ev.EnvironmentSlug, storage.ProducerEventCharge(storage.LifecycleEvent{
			ID: ev.ID, DeploymentID: ev.Deployment.ID, Kind: ev.Kind, Message: eventMessage(&ev)}))
	}
	resp := s.handleAdmitted(ctx, v, parse, admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		var err error
		environmentID, err = resolveEnvironment(ctx, tx, v, ev.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		id := storedEventID(environmentID, ev.ID)
		if stored, err := storage.LifecycleEventHash(ctx, tx, id); err == nil {
			if stored == hash {
				return nil, &noChange{body: LifecycleAccepted{Accepted: true, Deduplicated: true}}
			}
			return nil, refuse(http.StatusConflict, "event_conflict", "a different event with this id was already recorded")
		} else if !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		now := s.clock.Now().UTC()
		notFound := refuse(http.StatusNotFound, "deployment_not_found", "the deployment does not exist in this environment; a heartbeat or a launched event creates it")
		if ev.Kind == protocol.EventLaunched {
			created, err = storage.ApplyLaunch(ctx, tx, storage.Launch{
				EnvironmentID: environmentID, DeploymentID: ev.Deployment.ID, DropletID: ev.Deployment.DropletID,
				Region: ev.Deployment.Region, Size: ev.Deployment.Size, Managed: ev.Deployment.Managed,
				At: now, LimitMinutes: LaunchedLimitMinutes,
			}, s.quotas.ActiveDeployments)
			switch {
			case errors.Is(err, storage.ErrDeploymentEnded):
				return nil, refuse(http.StatusConflict, "deployment_ended", "deployment has ended; start a new deployment id")
			case errors.Is(err, storage.ErrDropletMismatch):
				return nil, refuse(http.StatusConflict, "droplet_mismatch", "deployment.dropletId differs from the droplet this deployment already reported")
			case errors.Is(err, storage.ErrDeploymentQuota):
				rf := refuse(http.StatusTooManyRequests, "deployment_quota",
					"environment has %d active deployments, its quota; end one or raise the quota", s.quotas.ActiveDeployments)
				rf.Quota = QuotaActiveDeployments
				s.noteQuota(rf, ev.EnvironmentSlug, "")
				return nil, rf
			case err != nil:
				return nil, err
			}
		} else {
			status, dropletID, err := storage.DeploymentDroplet(ctx, tx, environmentID, ev.Deployment.ID)
			if errors.Is(err, storage.ErrNotFound) {
				return nil, notFound
			} else if err != nil {
				return nil, err
			}
			if status == storage.DeploymentEnded && !eventKinds[ev.Kind] {
				return nil, refuse(http.StatusConflict, "deployment_ended", "deployment has ended; only ci-finished, shutdown and sunk are recorded for it")
			}
			if ev.Deployment.DropletID != 0 && dropletID != 0 && ev.Deployment.DropletID != dropletID {
				return nil, refuse(http.StatusConflict, "droplet_mismatch", "deployment.dropletId differs from the droplet this deployment already reported")
			}
			if ev.Kind == protocol.EventSunk && status == storage.DeploymentActive {
				// Only the droplet the deployment recorded (a heartbeat's or
				// a launched event's) is looked up, never one the sunk event
				// names: any droplet of the environment can sign a sunk, and
				// naming a gone droplet must not end a live deployment.
				check, checkDroplet = true, dropletID
			}
		}
		rec := storage.LifecycleEvent{
			ID: id, EnvironmentID: environmentID, DeploymentID: ev.Deployment.ID, Kind: ev.Kind,
			Message: eventMessage(&ev), OccurredAt: ev.OccurredAt,
		}
		if _, err := storage.RecordProducerEvent(ctx, tx, rec, hash, MaxEventsPerDeployment); errors.Is(err, storage.ErrEventQuota) {
			return nil, refuse(http.StatusTooManyRequests, "event_quota", "the deployment holds the maximum number of lifecycle events (%d)", MaxEventsPerDeployment)
		} else if err != nil {
			return nil, err
		}
		if err := s.checkStorage(ctx, tx, environmentID, ev.EnvironmentSlug, storage.ProducerEventCharge(rec)); err != nil {
			return nil, err
		}
		return LifecycleAccepted{Accepted: true, Created: created}, nil
	})
	if resp.Status != http.StatusAccepted || !check {
		return resp
	}
	body := resp.Body.(LifecycleAccepted)
	body.Droplet = s.settleSunk(ctx, environmentID, ev.Deployment.ID, ev.ID, checkDroplet)
	resp.Body = body
	return resp
}

// eventMessage is the operator-facing text of a producer event: ids and
// provider slugs only.
func eventMessage(ev *protocol.LifecycleEventV1) string {
	msg := "reported by the agent"
	if ev.Deployment.DropletID != 0 {
		msg += fmt.Sprintf("; droplet %d", ev.Deployment.DropletID)
	}
	if ev.Deployment.Managed {
		msg += "; managed"
	}
	return msg
}

// settleSunk checks a sunk deployment's droplet with the provider, bounded
// by SunkCheckTimeout and to one check at a time, and acts on the answer:
// gone ends the deployment (storage.EndDeployment, a deployment-ended event
// with reason provider, the environment sunk when it was the last active
// one); still there records a reaper-warning. It returns the outcome
// (DropletGone, DropletExists or DropletUnchecked).
func (s *Service) settleSunk(ctx context.Context, environmentID int64, deploymentID, eventID string, dropletID int64) string {
	if s.droplets == nil || dropletID == 0 {
		return DropletUnchecked
	}
	select {
	case s.sunkChecks <- struct{}{}:
		defer func() { <-s.sunkChecks }()
	default:
		// Another check is running: a flood of sunk events (every droplet
		// holds the key) must not turn into a flood of provider calls.
		return DropletUnchecked
	}
	// Settled even if the agent hangs up: the lookup is bounded anyway.
	ctx = context.WithoutCancel(ctx)
	owner, err := storage.DeploymentOwnerOf(ctx, s.db.Read, environmentID, deploymentID)
	if err != nil {
		s.log.Warn().Err(err).Str("deployment", deploymentID).Msg("sunk event: deployment owner unknown; inventory reconciliation settles it")
		return DropletUnchecked
	}
	cctx, cancel := context.WithTimeout(ctx, SunkCheckTimeout)
	exists, err := s.droplets(cctx, DropletOwner{OrgID: owner.OrgID, Managed: owner.Managed}, dropletID)
	cancel()
	if err != nil {
		s.log.Warn().Err(err).Str("deployment", deploymentID).Msg("sunk event: droplet lookup failed; inventory reconciliation settles it")
		return DropletUnchecked
	}
	now := s.clock.Now().UTC()
	outcome := DropletExists
	err = s.db.Writer.Do(ctx, func(tx storage.Tx) error {
		if exists {
			_, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
				ID:            fmt.Sprintf("sunk-live:%d:%s:%s", environmentID, deploymentID, eventID),
				EnvironmentID: environmentID, DeploymentID: deploymentID, Kind: EventReaperWarning,
				Message:    fmt.Sprintf("a sunk event was reported but droplet %d still exists at DigitalOcean; the deployment stays active", dropletID),
				OccurredAt: now,
			})
			return err
		}
		outcome = DropletGone
		ended, err := storage.EndDeployment(ctx, tx, environmentID, deploymentID, now)
		if err != nil || !ended {
			return err
		}
		if _, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID:            fmt.Sprintf("sunk-ended:%d:%s", environmentID, deploymentID),
			EnvironmentID: environmentID, DeploymentID: deploymentID, Kind: EventDeploymentEnded, Reason: "provider",
			Message:    fmt.Sprintf("sunk reported and droplet %d no longer exists at DigitalOcean (404); deployment ended", dropletID),
			OccurredAt: now,
		}); err != nil {
			return err
		}
		_, err = storage.SinkEnvironmentIfIdle(ctx, tx, environmentID, now)
		return err
	})
	if err != nil {
		s.log.Error().Err(err).Str("deployment", deploymentID).Msg("sunk event: settle")
		return DropletUnchecked
	}
	return outcome
}
