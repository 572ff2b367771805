package cost

import (
	"context"
	"sort"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// DeploymentCost is one deployment's month-to-date estimate.
type DeploymentCost struct {
	storage.CostDeployment
	// ComputeUSD is its estimated compute charge in the month.
	ComputeUSD float64
}

// VolumeCost is one volume's month-to-date storage estimate.
type VolumeCost struct {
	storage.CostVolume
	// StorageUSD is its estimated storage charge in the month.
	StorageUSD float64
}

// EnvironmentCost sums an environment's month-to-date estimate (USD).
type EnvironmentCost struct {
	EnvironmentID int64
	Slug          string
	OrgID         int64
	// ComputeUSD sums its deployments, ended ones included; StorageUSD
	// its volumes, present or gone.
	ComputeUSD, StorageUSD float64
	// Deployments counts the deployments in the month; Unpriced those
	// whose rate is still unknown (counted at 0 USD).
	Deployments, Unpriced int
}

// TotalUSD is compute plus storage.
func (e EnvironmentCost) TotalUSD() float64 { return e.ComputeUSD + e.StorageUSD }

// OrganizationCost sums an organization's environments (USD).
type OrganizationCost struct {
	OrgID                  int64
	Slug                   string
	ComputeUSD, StorageUSD float64
}

// Estimate is the month-to-date estimate of one calendar month (UTC) as of
// At: by deployment, volume, environment and organization. Figures are
// estimates; the DigitalOcean invoice is authoritative.
type Estimate struct {
	// Month is "YYYY-MM"; Start and End bound it.
	Month      string
	Start, End time.Time
	// At is the time the estimate runs to (usage after it is not
	// counted).
	At            time.Time
	Deployments   []DeploymentCost
	Volumes       []VolumeCost
	Environments  []EnvironmentCost
	Organizations []OrganizationCost
	// ComputeUSD and StorageUSD are the totals.
	ComputeUSD, StorageUSD float64
	// Unpriced counts deployments without a captured rate.
	Unpriced int
}

// TotalUSD is compute plus storage over everything.
func (e Estimate) TotalUSD() float64 { return e.ComputeUSD + e.StorageUSD }

// EstimateMonth computes the estimate of the month starting at monthStart
// (its first instant, UTC) as of now, from the stored deployments (active
// and ended, with their captured rates) and volumes, under rule. It reads
// only the database.
func EstimateMonth(ctx context.Context, q storage.Querier, rule Rule, monthStart, now time.Time) (Estimate, error) {
	start, end := MonthBounds(monthStart)
	est := Estimate{Month: MonthName(start), Start: start, End: end, At: now}
	deps, err := storage.CostDeploymentsInRange(ctx, q, start, end)
	if err != nil {
		return Estimate{}, err
	}
	vols, err := storage.CostVolumesInRange(ctx, q, start, end)
	if err != nil {
		return Estimate{}, err
	}
	envs, err := storage.ListEnvironments(ctx, q)
	if err != nil {
		return Estimate{}, err
	}
	orgs, err := storage.ListOrganizations(ctx, q)
	if err != nil {
		return Estimate{}, err
	}
	byEnv := map[int64]*EnvironmentCost{}
	envCost := func(id int64) *EnvironmentCost {
		if e, ok := byEnv[id]; ok {
			return e
		}
		e := &EnvironmentCost{EnvironmentID: id}
		for _, x := range envs {
			if x.ID == id {
				e.Slug, e.OrgID = x.Slug, x.OrgID
			}
		}
		byEnv[id] = e
		return e
	}
	for _, d := range deps {
		usd := 0.0
		if d.Priced {
			usd = rule.Charge(d.HourlyUSD, d.MonthlyUSD, d.BillingStart(), d.EndedAt, now, start, end)
		}
		if usd == 0 && !d.Priced && d.BillingStart().After(now) {
			continue
		}
		est.Deployments = append(est.Deployments, DeploymentCost{CostDeployment: d, ComputeUSD: usd})
		e := envCost(d.EnvironmentID)
		e.ComputeUSD += usd
		e.Deployments++
		est.ComputeUSD += usd
		if !d.Priced {
			e.Unpriced++
			est.Unpriced++
		}
	}
	for _, v := range vols {
		usd := rule.VolumeCharge(v.SizeGiB, v.USDPerGiBMonth, v.CreatedAt, v.GoneAt, now, start, end)
		est.Volumes = append(est.Volumes, VolumeCost{CostVolume: v, StorageUSD: usd})
		envCost(v.EnvironmentID).StorageUSD += usd
		est.StorageUSD += usd
	}
	byOrg := map[int64]*OrganizationCost{}
	for _, e := range byEnv {
		est.Environments = append(est.Environments, *e)
		o, ok := byOrg[e.OrgID]
		if !ok {
			o = &OrganizationCost{OrgID: e.OrgID}
			for _, x := range orgs {
				if x.ID == e.OrgID {
					o.Slug = x.Slug
				}
			}
			byOrg[e.OrgID] = o
		}
		o.ComputeUSD += e.ComputeUSD
		o.StorageUSD += e.StorageUSD
	}
	sort.Slice(est.Environments, func(i, j int) bool { return est.Environments[i].Slug < est.Environments[j].Slug })
	for _, o := range byOrg {
		est.Organizations = append(est.Organizations, *o)
	}
	sort.Slice(est.Organizations, func(i, j int) bool { return est.Organizations[i].OrgID < est.Organizations[j].OrgID })
	return est, nil
}
