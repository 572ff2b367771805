package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/sshdeliver"
	"github.com/chalupa-run/chalupa/storage"
)

// Event kinds of an agent upgrade, recorded on the box's droplet's
// deployment (docs/operations.md, "Agent install", under Upgrade).
const (
	EventAgentUpgradeStarted = "agent-upgrade-started"
	EventAgentUpgraded       = "agent-upgraded"
	EventAgentUpgradeFailed  = "agent-upgrade-failed"
)

// agentUpgradeHandlers upgrade the agent on a box's running droplet over
// SSH with the configured release (docs/operations.md, "Agent install",
// under Upgrade). They hold the database, the release and the deliverer
// (chalupa's SSH identity); no DigitalOcean token.
type agentUpgradeHandlers struct {
	db        *storage.DB
	clock     clockwork.Clock
	release   agentrelease.Release
	deliverer *sshdeliver.Deliverer
	port      int
	log       zerolog.Logger
}

func (h *agentUpgradeHandlers) register(o *operations) {
	handleOp(o, adminapi.OpUpgradeBoxAgent, h.upgrade)
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
// unknown), records agent-upgrade-started, runs the upgrade over
// SSH and records agent-upgraded or agent-upgrade-failed; a failure is 502
// agent_upgrade_failed with the failure's kind and the droplet id (never an
// address or URL).
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
	dropletID := box.Resources.DropletID
	if dropletID == 0 || box.Launch.DropletID != dropletID || box.Launch.IPv4 == "" {
		return adminapi.BoxAgentUpgrade{}, fail(http.StatusConflict, "no_droplet", "the box has no running droplet with a known address: run converge up first")
	}
	out := adminapi.BoxAgentUpgrade{Box: box.Name, DropletID: dropletID, Version: h.release.Version}
	if err := h.event(ctx, box, EventAgentUpgradeStarted, fmt.Sprintf("agent upgrade to %s started on droplet %d", h.release.Version, dropletID)); err != nil {
		return out, err
	}
	res, uerr := h.deliverer.UpgradeAgent(ctx, net.JoinHostPort(box.Launch.IPv4, strconv.Itoa(h.port)), dropletID, h.release)
	out.Arch, out.Before, out.After = res.Arch, res.Before, res.After
	// The droplet changed (or not) whatever the caller does now: record it.
	ectx := context.WithoutCancel(ctx)
	if uerr != nil {
		h.log.Warn().Err(uerr).Str("box", box.Name).Int64("droplet", dropletID).Msg("agent upgrade failed")
		if err := h.event(ectx, box, EventAgentUpgradeFailed, fmt.Sprintf("agent upgrade to %s failed on droplet %d: %v", h.release.Version, dropletID, uerr)); err != nil {
			return out, err
		}
		return out, fail(http.StatusBadGateway, "agent_upgrade_failed", uerr.Error())
	}
	msg := fmt.Sprintf("agent on droplet %d (%s) upgraded: %s -> %s", dropletID, res.Arch, res.Before, res.After)
	if err := h.event(ectx, box, EventAgentUpgraded, msg); err != nil {
		return out, err
	}
	h.log.Info().Str("box", box.Name).Int64("droplet", dropletID).Str("before", res.Before).Str("after", res.After).Msg("agent upgraded")
	return out, nil
}

// event records a lifecycle event of kind on the box's droplet's
// deployment, or on its environment when converge recorded no deployment.
// The id is unique per event (kind, droplet, time).
func (h *agentUpgradeHandlers) event(ctx context.Context, box storage.Box, kind, msg string) error {
	now := h.clock.Now()
	dep := pulumiexec.DeploymentID(box.Resources.DropletID)
	return h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		ok, err := storage.DeploymentExists(ctx, tx, box.EnvironmentID, dep)
		if err != nil {
			return err
		}
		ev := storage.LifecycleEvent{ID: fmt.Sprintf("%s:%s:%d", kind, dep, now.UnixNano()), EnvironmentID: box.EnvironmentID,
			Kind: kind, Message: msg, OccurredAt: now}
		if ok {
			ev.DeploymentID = dep
		}
		_, err = storage.InsertLifecycleEvent(ctx, tx, ev)
		return err
	})
}
