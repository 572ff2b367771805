package daemon

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// deploymentHandlers end deployment records by the operator's hand
// (docs/operations.md, "Ending a deployment").
type deploymentHandlers struct {
	db    *storage.DB
	clock clockwork.Clock
}

func (h *deploymentHandlers) register(o *operations) {
	handleOp(o, adminapi.OpEndDeployment, h.end)
}

// end ends the deployment through storage.EndDeployment (so its open
// telemetry sessions end with it), records a deployment-ended event with
// reason manual (once: a stable id), and sinks the environment when no
// active deployment is left — all in one writer unit. Ending an ended
// deployment changes nothing and answers alreadyEnded.
func (h *deploymentHandlers) end(ctx context.Context, req adminapi.EndDeploymentRequest) (adminapi.EndedDeployment, error) {
	out := adminapi.EndedDeployment{EnvironmentSlug: req.EnvironmentSlug, DeploymentID: req.DeploymentID}
	notFound := fail(http.StatusNotFound, "deployment_not_found", "no deployment with this id in the environment")
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		env, err := storage.EnvironmentBySlug(ctx, tx, req.EnvironmentSlug)
		if errors.Is(err, storage.ErrNotFound) {
			return fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
		} else if err != nil {
			return err
		}
		now := h.clock.Now().UTC()
		ended, err := storage.EndDeployment(ctx, tx, env.ID, req.DeploymentID, now)
		if errors.Is(err, storage.ErrNotFound) {
			return notFound
		} else if err != nil {
			return err
		}
		if !ended {
			st, err := storage.DeploymentTelemetry(ctx, tx, env.ID, req.DeploymentID)
			if err != nil {
				return err
			}
			out.AlreadyEnded, out.EndedAt = true, st.EndedAt
			return nil
		}
		out.EndedAt = now.Truncate(time.Millisecond)
		if _, err := storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID:            "manual-end:" + req.EnvironmentSlug + ":" + req.DeploymentID,
			EnvironmentID: env.ID, DeploymentID: req.DeploymentID,
			Kind: "deployment-ended", Reason: "manual",
			Message:    "ended by the operator (adminEndDeployment); the droplet was not touched",
			OccurredAt: now,
		}); err != nil {
			return err
		}
		out.EnvironmentSunk, err = storage.SinkEnvironmentIfIdle(ctx, tx, env.ID, now)
		return err
	})
	return out, err
}
