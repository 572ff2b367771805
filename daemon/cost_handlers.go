package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// costHandlers read cost estimates and run reconciliation on demand
// (docs/operations.md, "Cost reconciliation"). They hold the database, the
// clock and the reconciler (nil while DIGITALOCEAN_READ_TOKEN is unset);
// never a write token.
type costHandlers struct {
	db    *storage.DB
	clock clockwork.Clock
	// rec is the loop's own worker: an on-demand run waits for a
	// scheduled one and never overlaps it.
	rec *cost.Reconciler
	// rule is the configured billing rule (estimates without a reconciler).
	rule cost.Rule
}

func (h *costHandlers) register(o *operations) {
	handleOp(o, adminapi.OpGetCosts, h.get)
	handleOp(o, adminapi.OpReconcileCosts, h.reconcile)
}

// ruleText states the billing rule an estimate applies.
func ruleText(r cost.Rule) string {
	return fmt.Sprintf("per %s, at least %s or $%.2f per droplet, capped per calendar month (UTC) at the monthly price (%g h); rates captured at first observation",
		r.Granularity, r.MinimumBilled, r.MinimumChargeUSD, r.CapHours)
}

func (h *costHandlers) get(ctx context.Context, req adminapi.CostsRequest) (adminapi.Costs, error) {
	now := h.clock.Now().UTC()
	start, _ := cost.MonthBounds(now)
	if req.Month != "" {
		s, _, err := cost.ParseMonth(req.Month)
		if err != nil {
			return adminapi.Costs{}, fail(http.StatusBadRequest, "bad_month", "month must be YYYY-MM")
		}
		start = s
	}
	rule := h.rule
	if h.rec != nil {
		rule = h.rec.Rule()
	}
	est, err := cost.EstimateMonth(ctx, h.db.Read, rule, start, now)
	if err != nil {
		return adminapi.Costs{}, err
	}
	out := adminapi.Costs{Note: adminapi.CostsEstimateNote, Month: est.Month, At: now, Rule: ruleText(rule),
		TotalUSD: est.TotalUSD(), ComputeUSD: est.ComputeUSD, StorageUSD: est.StorageUSD, Unpriced: est.Unpriced,
		Organizations: []adminapi.CostOrganization{}, Deployments: []adminapi.CostDeployment{}, Volumes: []adminapi.CostVolume{}}
	orgSlug := map[int64]string{}
	for _, o := range est.Organizations {
		orgSlug[o.OrgID] = o.Slug
		out.Organizations = append(out.Organizations, adminapi.CostOrganization{Slug: o.Slug, ComputeUSD: o.ComputeUSD,
			StorageUSD: o.StorageUSD, TotalUSD: o.ComputeUSD + o.StorageUSD})
	}
	out.Environments = apiEnvironments(est.Environments, orgSlug)
	envSlug := map[int64]string{}
	for _, e := range est.Environments {
		envSlug[e.EnvironmentID] = e.Slug
	}
	for _, d := range est.Deployments {
		out.Deployments = append(out.Deployments, adminapi.CostDeployment{Environment: d.EnvironmentSlug, ID: d.ID,
			DropletID: d.DropletID, Size: d.Size, Status: d.Status, Source: d.Source, BilledFrom: d.BillingStart(),
			EndedAt: d.EndedAt, HourlyUSD: d.HourlyUSD, MonthlyUSD: d.MonthlyUSD, Priced: d.Priced, ComputeUSD: d.ComputeUSD})
	}
	for _, v := range est.Volumes {
		out.Volumes = append(out.Volumes, adminapi.CostVolume{Environment: envSlug[v.EnvironmentID], ID: v.ID, Name: v.Name,
			SizeGiB: v.SizeGiB, USDPerGiBMonth: v.USDPerGiBMonth, CreatedAt: v.CreatedAt, GoneAt: v.GoneAt, StorageUSD: v.StorageUSD})
	}
	snap, err := storage.LatestCostSnapshot(ctx, h.db.Read)
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return adminapi.Costs{}, err
	default:
		s := apiSnapshot(snap)
		out.LastReconciliation = &s
	}
	return out, nil
}

func (h *costHandlers) reconcile(ctx context.Context, _ none) (adminapi.CostReconciliation, error) {
	if h.rec == nil {
		return adminapi.CostReconciliation{}, fail(http.StatusConflict, "provider_not_configured",
			"DIGITALOCEAN_READ_TOKEN is not set: inventory and cost reconciliation need it")
	}
	rep, err := h.rec.Reconcile(ctx, storage.CostTriggerAdmin)
	var de *digitalocean.Error
	switch {
	case errors.As(err, &de):
		// digitalocean client errors hold no token or URL (docs/operations.md,
		// "DigitalOcean API"): safe to show.
		return adminapi.CostReconciliation{}, fail(http.StatusBadGateway, "provider_error",
			de.Error()+"; nothing was written")
	case err != nil:
		return adminapi.CostReconciliation{}, err
	}
	orgSlug := map[int64]string{}
	for _, o := range rep.Estimate.Organizations {
		orgSlug[o.OrgID] = o.Slug
	}
	return adminapi.CostReconciliation{
		Note: adminapi.CostsEstimateNote,
		Snapshot: adminapi.CostSnapshot{ID: rep.SnapshotID, Trigger: rep.Trigger, StartedAt: rep.StartedAt,
			DurationMs: rep.Duration.Milliseconds(), Month: rep.Estimate.Month, DropletsSeen: rep.DropletsSeen,
			VolumesSeen: rep.VolumesSeen, Adopted: rep.Adopted, Ended: rep.Ended, RatesCaptured: rep.RatesCaptured,
			Unpriced: rep.Estimate.Unpriced, TotalUSD: rep.Estimate.TotalUSD()},
		Lookups: rep.Lookups, Deferred: rep.Deferred, AccountErrors: rep.AccountErrors,
		Environments: apiEnvironments(rep.Estimate.Environments, orgSlug),
	}, nil
}

func apiEnvironments(envs []cost.EnvironmentCost, orgSlug map[int64]string) []adminapi.CostEnvironment {
	out := make([]adminapi.CostEnvironment, 0, len(envs))
	for _, e := range envs {
		out = append(out, adminapi.CostEnvironment{Slug: e.Slug, Organization: orgSlug[e.OrgID], ComputeUSD: e.ComputeUSD,
			StorageUSD: e.StorageUSD, TotalUSD: e.TotalUSD(), Deployments: e.Deployments, Unpriced: e.Unpriced})
	}
	return out
}

func apiSnapshot(s storage.CostSnapshot) adminapi.CostSnapshot {
	return adminapi.CostSnapshot{ID: s.ID, Trigger: s.Trigger, StartedAt: s.StartedAt, DurationMs: s.Duration.Milliseconds(),
		Month: s.Month, DropletsSeen: s.DropletsSeen, VolumesSeen: s.VolumesSeen, Adopted: s.Adopted, Ended: s.Ended,
		RatesCaptured: s.RatesCaptured, Unpriced: s.Unpriced, TotalUSD: s.TotalUSD}
}
