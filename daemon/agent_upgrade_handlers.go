package daemon

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/storage"
)

// Event kinds of an agent upgrade, recorded on the box's droplet's
// deployment (docs/operations.md, "Agent install", under Upgrade).
const (
	EventAgentUpgradeStarted = agentrollout.EventStarted
	EventAgentUpgraded       = agentrollout.EventUpgraded
	EventAgentUpgradeFailed  = agentrollout.EventFailed
)

// maxListedRollouts bounds the rollouts adminListJobs lists.
const maxListedRollouts = 10

// agentUpgradeHandlers upgrade the agent on a box's running droplet, and
// run rollouts of it, through the rollout manager (docs/operations.md,
// "Agent install", under Upgrade). They hold the database, the release and
// the manager (chalupa's SSH identity); no DigitalOcean token.
type agentUpgradeHandlers struct {
	db       *storage.DB
	release  agentrelease.Release
	rollouts *agentrollout.Manager
	log      zerolog.Logger
}

func (h *agentUpgradeHandlers) register(o *operations) {
	handleOp(o, adminapi.OpUpgradeBoxAgent, h.upgrade)
	handleOp(o, adminapi.OpStartAgentRollout, h.start)
	handleOp(o, adminapi.OpGetAgentRollout, h.get)
}

// releaseProblems is the 422 for a release that cannot be installed: it
// names the variables at fault, never their values.
func releaseProblems(problems []error) error {
	var vars []string
	for _, p := range problems {
		var pr agentrelease.Problem
		switch {
		case errors.As(p, &pr):
			vars = append(vars, pr.Var)
		case errors.Is(p, agentrelease.ErrNotConfigured):
			vars = append(vars, agentrelease.EnvVersion, agentrelease.EnvReleaseURL, agentrelease.EnvSHA256AMD64, agentrelease.EnvSHA256ARM64)
		}
	}
	return fail(http.StatusUnprocessableEntity, "agent_release_invalid",
		"the agent release is not installable: set "+strings.Join(vars, ", ")+" (an immutable version, the release's https URL and both digests from its checksums.txt)")
}

// upgrade checks the release (422 naming the variables; nothing written),
// finds the box's droplet (404; 409 agent_off when the box does not carry
// the agent, 409 no_droplet when it has no droplet or its address is
// unknown, 409 agent_upgrading when an upgrade of it runs) and upgrades it
// (agentrollout.Upgrader.Box: done when the new agent reports, restored
// otherwise); a failure is 502 agent_upgrade_failed with the account
// (never an address or URL). A droplet already on the version answers 200
// with outcome skipped.
func (h *agentUpgradeHandlers) upgrade(ctx context.Context, req adminapi.UpgradeBoxAgentRequest) (adminapi.BoxAgentUpgrade, error) {
	if problems := h.release.Check(); len(problems) > 0 {
		return adminapi.BoxAgentUpgrade{}, releaseProblems(problems)
	}
	box, err := storage.BoxByRef(ctx, h.db.Read, req.Box)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.BoxAgentUpgrade{}, errBoxNotFound
	}
	if err != nil {
		return adminapi.BoxAgentUpgrade{}, err
	}
	// A box without the agent has no unit to restart: an upgrade would
	// leave a stray root binary and fail at the restart
	// (docs/operations.md, "Agent install", under Upgrade).
	if !box.Config.Agent {
		return adminapi.BoxAgentUpgrade{}, fail(http.StatusConflict, "agent_off", "the box does not carry the agent (--agent=false): there is nothing to upgrade")
	}
	if agentrollout.SkipReason(box) != "" {
		return adminapi.BoxAgentUpgrade{}, fail(http.StatusConflict, "no_droplet", "the box has no running droplet with a known address: run converge up first")
	}
	res, err := h.rollouts.UpgradeBox(ctx, box)
	switch {
	case errors.Is(err, agentrollout.ErrBusy):
		return adminapi.BoxAgentUpgrade{}, fail(http.StatusConflict, "agent_upgrading", "an upgrade of this box's agent is running: see admin box show and its events")
	case err != nil:
		return adminapi.BoxAgentUpgrade{}, err
	}
	out := adminapi.BoxAgentUpgrade{Box: box.Name, DropletID: box.Resources.DropletID, Version: h.release.Version,
		Arch: res.Arch, Before: res.Before, After: res.After, Outcome: res.Status, Detail: res.Detail}
	if res.Status == agentrollout.StatusFailed {
		return out, fail(http.StatusBadGateway, "agent_upgrade_failed", res.Detail)
	}
	return out, nil
}

// start checks the body's tags (422 invalid_rollout), the release (422), the scope (422 invalid_rollout: one
// environment or all; 404 environment_not_found) and the batch (422
// invalid_rollout outside 1–adminapi.MaxRolloutBatch), and starts a
// rollout over the scope's boxes in `box list` order (409
// rollout_in_progress while one runs).
func (h *agentUpgradeHandlers) start(ctx context.Context, req adminapi.StartAgentRolloutRequest) (adminapi.AgentRollout, error) {
	// The body's tags first (docs/operations.md, "OpenAPI"): a malformed
	// slug or a batch out of range is the body's fault whatever the
	// release.
	if err := checkShapeAs(req, nil, shapeAnswer{http.StatusUnprocessableEntity, "invalid_rollout"}); err != nil {
		return adminapi.AgentRollout{}, err
	}
	if problems := h.release.Check(); len(problems) > 0 {
		return adminapi.AgentRollout{}, releaseProblems(problems)
	}
	if (req.Environment == "") == !req.All {
		return adminapi.AgentRollout{}, fail(http.StatusUnprocessableEntity, "invalid_rollout", `name one environment, or "all":true`)
	}
	batch := req.Batch
	if batch == 0 {
		batch = adminapi.DefaultRolloutBatch
	}
	if batch < 1 || batch > adminapi.MaxRolloutBatch {
		return adminapi.AgentRollout{}, fail(http.StatusUnprocessableEntity, "invalid_rollout", "batch must be between 1 and 50")
	}
	if req.Environment != "" {
		if _, err := storage.EnvironmentBySlug(ctx, h.db.Read, req.Environment); errors.Is(err, storage.ErrNotFound) {
			return adminapi.AgentRollout{}, fail(http.StatusNotFound, "environment_not_found", "no such environment")
		} else if err != nil {
			return adminapi.AgentRollout{}, err
		}
	}
	boxes, err := storage.ListBoxes(ctx, h.db.Read, req.Environment)
	if err != nil {
		return adminapi.AgentRollout{}, err
	}
	r, err := h.rollouts.Start(ctx, req.Environment, boxes, batch)
	switch {
	case errors.Is(err, agentrollout.ErrRolloutRunning):
		return adminapi.AgentRollout{}, fail(http.StatusConflict, "rollout_in_progress", "an agent rollout is running: one at a time (see admin jobs)")
	case err != nil:
		return adminapi.AgentRollout{}, err
	}
	h.log.Info().Str("rollout", r.ID).Str("version", r.Version).Int("boxes", len(boxes)).Int("batch", batch).Msg("agent rollout started")
	return apiRollout(r), nil
}

// get answers one rollout (404 not_found).
func (h *agentUpgradeHandlers) get(ctx context.Context, req adminapi.GetAgentRolloutRequest) (adminapi.AgentRollout, error) {
	r, err := storage.AgentRolloutByID(ctx, h.db.Read, req.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.AgentRollout{}, fail(http.StatusNotFound, "not_found", "no such agent rollout")
	}
	if err != nil {
		return adminapi.AgentRollout{}, err
	}
	return apiRollout(r), nil
}

// listRollouts is the newest rollouts for adminListJobs.
func listRollouts(ctx context.Context, db *storage.DB) ([]adminapi.AgentRollout, error) {
	list, err := storage.ListAgentRollouts(ctx, db.Read, maxListedRollouts)
	if err != nil {
		return nil, err
	}
	var out []adminapi.AgentRollout
	for _, r := range list {
		out = append(out, apiRollout(r))
	}
	return out, nil
}

func apiRollout(r storage.AgentRollout) adminapi.AgentRollout {
	out := adminapi.AgentRollout{ID: r.ID, Environment: r.Environment, Version: r.Version, Batch: r.Batch, Status: r.Status,
		Error: r.Error, Summary: adminapi.DecodeRolloutSummary(r.Summary), CreatedAt: r.CreatedAt}
	if !r.FinishedAt.IsZero() {
		f := r.FinishedAt
		out.FinishedAt = &f
	}
	return out
}
