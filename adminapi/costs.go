package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Cost operation ids (docs/operations.md, "Cost reconciliation").
const (
	OpGetCosts       = "adminGetCosts"
	OpReconcileCosts = "adminReconcileCosts"
)

// CostsEstimateNote labels every cost answer: the figures are estimates.
const CostsEstimateNote = "estimates only: the DigitalOcean invoice is authoritative"

var costOperations = []Operation{
	{ID: OpGetCosts, MCP: mcpRead, Method: methodGet, Path: "/api/admin/costs", Status: http.StatusOK,
		Request: typeOf[CostsRequest](), Response: typeOf[Costs](),
		Summary: "month-to-date cost estimate by organization, environment and deployment (?month=YYYY-MM; default: this month, UTC)"},
	{ID: OpReconcileCosts, MCP: mcpMutate, Method: methodPost, Path: "/api/admin/costs/reconcile", Status: http.StatusOK, Mutates: true,
		Response: typeOf[CostReconciliation](),
		Summary:  "run inventory and cost reconciliation now (read token only) and return what it did"},
}

// CostsRequest holds adminGetCosts' query parameter.
type CostsRequest struct {
	// Month is "YYYY-MM" (UTC); "" is the current month.
	Month string `query:"month" json:"-" schema:"pattern=month" refuse:"400 bad_month"`
}

// Costs answers adminGetCosts: the month's estimate as of At. Every USD
// figure is an estimate (Note); the DigitalOcean invoice is authoritative.
type Costs struct {
	Note  string    `json:"note"`
	Month string    `json:"month"`
	At    time.Time `json:"at"`
	// Rule states the billing rule the estimate applies.
	Rule          string             `json:"rule"`
	TotalUSD      float64            `json:"totalUsd"`
	ComputeUSD    float64            `json:"computeUsd"`
	StorageUSD    float64            `json:"storageUsd"`
	Unpriced      int                `json:"unpriced"`
	Organizations []CostOrganization `json:"organizations"`
	Environments  []CostEnvironment  `json:"environments"`
	Deployments   []CostDeployment   `json:"deployments"`
	Volumes       []CostVolume       `json:"volumes"`
	// LastReconciliation is the most recent stored snapshot, if any.
	LastReconciliation *CostSnapshot `json:"lastReconciliation,omitempty"`
}

// CostOrganization is one organization's month-to-date estimate (USD).
type CostOrganization struct {
	Slug       string  `json:"slug"`
	ComputeUSD float64 `json:"computeUsd"`
	StorageUSD float64 `json:"storageUsd"`
	TotalUSD   float64 `json:"totalUsd"`
}

// CostEnvironment is one environment's month-to-date estimate (USD).
type CostEnvironment struct {
	Slug         string  `json:"slug"`
	Organization string  `json:"organization"`
	ComputeUSD   float64 `json:"computeUsd"`
	StorageUSD   float64 `json:"storageUsd"`
	TotalUSD     float64 `json:"totalUsd"`
	Deployments  int     `json:"deployments"`
	Unpriced     int     `json:"unpriced"`
}

// CostDeployment is one deployment's month-to-date compute estimate,
// ended (sunk) cycles included. HourlyUSD and MonthlyUSD are the rates
// captured at first observation (absent while unpriced).
type CostDeployment struct {
	Environment string    `json:"environment"`
	ID          string    `json:"id"`
	DropletID   int64     `json:"dropletId,omitempty"`
	Size        string    `json:"size,omitempty"`
	Status      string    `json:"status"`
	Source      string    `json:"source"`
	BilledFrom  time.Time `json:"billedFrom"`
	EndedAt     time.Time `json:"endedAt,omitzero"`
	HourlyUSD   float64   `json:"hourlyUsd,omitempty"`
	MonthlyUSD  float64   `json:"monthlyUsd,omitempty"`
	Priced      bool      `json:"priced"`
	ComputeUSD  float64   `json:"computeUsd"`
}

// CostVolume is one volume's month-to-date storage estimate.
type CostVolume struct {
	Environment    string    `json:"environment"`
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	SizeGiB        int64     `json:"sizeGib"`
	USDPerGiBMonth float64   `json:"usdPerGibMonth"`
	CreatedAt      time.Time `json:"createdAt"`
	GoneAt         time.Time `json:"goneAt,omitzero"`
	StorageUSD     float64   `json:"storageUsd"`
}

// CostSnapshot is one stored reconciliation run (operational evidence).
type CostSnapshot struct {
	ID            int64     `json:"id"`
	Trigger       string    `json:"trigger"`
	StartedAt     time.Time `json:"startedAt"`
	DurationMs    int64     `json:"durationMs"`
	Month         string    `json:"month"`
	DropletsSeen  int       `json:"dropletsSeen"`
	VolumesSeen   int       `json:"volumesSeen"`
	Adopted       int       `json:"adopted"`
	Ended         int       `json:"ended"`
	RatesCaptured int       `json:"ratesCaptured"`
	Unpriced      int       `json:"unpriced"`
	TotalUSD      float64   `json:"totalUsd"`
}

// CostReconciliation answers adminReconcileCosts: what the run did and
// the month-to-date estimate after it, per environment.
type CostReconciliation struct {
	Note     string       `json:"note"`
	Snapshot CostSnapshot `json:"snapshot"`
	// Lookups counts droplets fetched one by one; Deferred the checks a
	// per-run cap left for the next run.
	Lookups  int `json:"lookups"`
	Deferred int `json:"deferred"`
	// AccountErrors lists customer accounts the provider refused (their
	// organizations were left untouched).
	AccountErrors []string          `json:"accountErrors,omitempty"`
	Environments  []CostEnvironment `json:"environments"`
}

// GetCosts calls adminGetCosts for month ("YYYY-MM"; "" for this month).
func (c *Client) GetCosts(ctx context.Context, month string) (Costs, error) {
	return call[Costs](ctx, c, OpGetCosts, CostsRequest{Month: month})
}

// ReconcileCosts calls adminReconcileCosts. It waits for a scheduled run
// in progress to end, then runs its own.
func (c *Client) ReconcileCosts(ctx context.Context) (CostReconciliation, error) {
	return call[CostReconciliation](ctx, c, OpReconcileCosts, nil)
}
