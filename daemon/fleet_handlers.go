package daemon

import (
	"context"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// fleetEndedLimit is how many ended deployments per environment the fleet
// view shows (active ones are always all shown): enough for recent history
// without letting a long-lived environment grow the answer without bound.
const fleetEndedLimit = 20

// fleetHandlers read the fleet view.
type fleetHandlers struct {
	db *storage.DB
}

func (h *fleetHandlers) register(o *operations) {
	handleOp(o, adminapi.OpListFleet, h.list)
}

func (h *fleetHandlers) list(ctx context.Context, _ none) (adminapi.Fleet, error) {
	envs, err := storage.Fleet(ctx, h.db.Read, fleetEndedLimit)
	if err != nil {
		return adminapi.Fleet{}, err
	}
	out := adminapi.Fleet{Environments: make([]adminapi.FleetEnvironment, 0, len(envs))}
	for _, e := range envs {
		fe := adminapi.FleetEnvironment{Slug: e.Slug, Name: e.Name, Status: e.Status, Keys: e.KeyCounts,
			Deployments: make([]adminapi.FleetDeployment, 0, len(e.Deployments))}
		for _, d := range e.Deployments {
			fe.Deployments = append(fe.Deployments, adminapi.FleetDeployment{
				ID: d.ID, DropletID: d.DropletID, Region: d.Region, Size: d.Size, Status: d.Status,
				LaunchedAt: d.LaunchedAt, EndedAt: d.EndedAt, LastHeartbeatAt: d.LastHeartbeatAt,
				IdleDeadlineAt: d.IdleDeadlineAt, SessionExpiresAt: d.SessionExpiresAt,
				CIActive: d.CIActive, AgentVersion: d.AgentVersion,
			})
		}
		out.Environments = append(out.Environments, fe)
	}
	return out, nil
}
