package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Deployment sources (deployments.source; docs/operations.md, "Cost
// reconciliation").
const (
	// SourceAgent: created by an agent's first heartbeat.
	SourceAgent = "agent"
	// SourceInventory: adopted by inventory reconciliation from a
	// chalupa-tagged droplet no agent reported.
	SourceInventory = "inventory"
)

// CostDeployment is what cost reconciliation reads of a deployment: its
// identity, droplet, life and captured rates.
type CostDeployment struct {
	// EnvironmentID, OrgID and EnvironmentSlug place the deployment.
	EnvironmentID   int64
	OrgID           int64
	EnvironmentSlug string
	// ID is the deployment id (scoped to its environment).
	ID string
	// DropletID is 0 when unknown.
	DropletID int64
	// Size is the size slug ("" when unknown).
	Size string
	// Status is active or ended; Source agent or inventory.
	Status, Source string
	// LaunchedAt is the first heartbeat's arrival (or, for an adopted
	// droplet, its creation); EndedAt is zero while active.
	LaunchedAt, EndedAt time.Time
	// DropletCreatedAt is the droplet's creation as the provider reported
	// it (zero when never observed).
	DropletCreatedAt time.Time
	// HourlyUSD and MonthlyUSD are the rates captured at first
	// observation; Priced is false until then.
	HourlyUSD, MonthlyUSD float64
	Priced                bool
}

// BillingStart is when the provider started billing the deployment's
// droplet: its creation time when observed, else the deployment's launch.
func (d CostDeployment) BillingStart() time.Time {
	if !d.DropletCreatedAt.IsZero() && d.DropletCreatedAt.Before(d.LaunchedAt) {
		return d.DropletCreatedAt
	}
	return d.LaunchedAt
}

const costDeploymentCols = `d.environment_id, e.org_id, e.slug, d.id, d.droplet_id, d.size, d.status, d.source,
	d.launched_at, d.ended_at, d.droplet_created_at, d.hourly_rate_usd, d.monthly_rate_usd`

func scanCostDeployment(row interface{ Scan(...any) error }) (CostDeployment, error) {
	var d CostDeployment
	var drop, ended, created sql.NullInt64
	var launched int64
	var hourly, monthly sql.NullFloat64
	if err := row.Scan(&d.EnvironmentID, &d.OrgID, &d.EnvironmentSlug, &d.ID, &drop, &d.Size, &d.Status, &d.Source,
		&launched, &ended, &created, &hourly, &monthly); err != nil {
		return CostDeployment{}, err
	}
	d.DropletID = drop.Int64
	d.LaunchedAt = time.UnixMilli(launched).UTC()
	d.EndedAt, d.DropletCreatedAt = fromMS(ended), fromMS(created)
	d.HourlyUSD, d.MonthlyUSD, d.Priced = hourly.Float64, monthly.Float64, hourly.Valid
	return d, nil
}

// queryCostDeployments lists deployments matching where (with args), in
// environment and launch order, at most limit (0: all).
func queryCostDeployments(ctx context.Context, q Querier, limit int, where string, args ...any) ([]CostDeployment, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := q.QueryContext(ctx,
		`SELECT `+costDeploymentCols+` FROM deployments d JOIN environments e ON e.id = d.environment_id WHERE `+where+
			` ORDER BY d.environment_id, d.launched_at, d.id LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list cost deployments: %w", err)
	}
	defer rows.Close()
	var out []CostDeployment
	for rows.Next() {
		d, err := scanCostDeployment(rows)
		if err != nil {
			return nil, fmt.Errorf("list cost deployments: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// CostDeploymentsInRange returns every deployment whose life overlaps
// [from, to): launched (or its droplet created) before to, and active or
// ended at or after from. Ended deployments are included: a month's
// estimate keeps its sunk cycles.
func CostDeploymentsInRange(ctx context.Context, q Querier, from, to time.Time) ([]CostDeployment, error) {
	return queryCostDeployments(ctx, q, 0,
		`min(d.launched_at, coalesce(d.droplet_created_at, d.launched_at)) < ? AND (d.status = 'active' OR d.ended_at >= ?)`,
		ms(to), ms(from))
}

// inAccount returns the condition (and its argument) selecting the
// deployments whose droplets live in organization orgID's provider
// account: the platform's account holds the platform organization's
// deployments and every managed one; a customer's account holds its
// organization's deployments that are not managed (docs/operations.md,
// "Customer organizations").
func inAccount(orgID int64) (string, int64) {
	if orgID == PlatformOrgID {
		return `(e.org_id = ? OR d.managed = 1)`, PlatformOrgID
	}
	return `(e.org_id = ? AND d.managed = 0)`, orgID
}

// ActiveCostDeployments returns every active deployment whose droplet
// lives in organization orgID's provider account (the deployments an
// inventory pass of that account may end or price; see inAccount).
func ActiveCostDeployments(ctx context.Context, q Querier, orgID int64) ([]CostDeployment, error) {
	cond, arg := inAccount(orgID)
	return queryCostDeployments(ctx, q, 0, `d.status = 'active' AND `+cond, arg)
}

// UnpricedCostDeployments returns up to limit deployments, active or
// ended, whose droplet lives in organization orgID's provider account and
// whose rate was never captured.
func UnpricedCostDeployments(ctx context.Context, q Querier, orgID int64, limit int) ([]CostDeployment, error) {
	cond, arg := inAccount(orgID)
	return queryCostDeployments(ctx, q, limit, `d.hourly_rate_usd IS NULL AND `+cond, arg)
}

// DropletKnown reports whether any deployment, in any environment and of
// any status, names droplet id.
func DropletKnown(ctx context.Context, q Querier, dropletID int64) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM deployments WHERE droplet_id = ? LIMIT 1`, dropletID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("droplet known: %w", err)
	}
	return true, nil
}

// KnownDropletIDs returns every droplet id any deployment names, in any
// environment and of any status (one indexed scan: inventory's prefilter,
// re-checked per droplet by AdoptDroplet inside the writer).
func KnownDropletIDs(ctx context.Context, q Querier) (map[int64]bool, error) {
	rows, err := q.QueryContext(ctx, `SELECT DISTINCT droplet_id FROM deployments WHERE droplet_id IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("known droplets: %w", err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("known droplets: %w", err)
		}
		out[id] = true
	}
	return out, rows.Err()
}

// AdoptedDroplet is a chalupa-tagged droplet inventory turns into a
// deployment.
type AdoptedDroplet struct {
	// EnvironmentID is the environment its tag names.
	EnvironmentID int64
	// DeploymentID is the id given to it ("droplet-<id>").
	DeploymentID string
	// DropletID, Region and Size describe the droplet.
	DropletID    int64
	Region, Size string
	// CreatedAt is the droplet's creation: the deployment's launch.
	CreatedAt time.Time
	// HourlyUSD and MonthlyUSD are its size's prices now (captured once).
	HourlyUSD, MonthlyUSD float64
	// ObservedAt is when inventory saw it.
	ObservedAt time.Time
}

// AdoptDroplet creates an active deployment of source inventory for a
// droplet, with its rate captured, unless some deployment already names
// the droplet or the id is taken in the environment (adopted false,
// nothing written). It does not touch the environment's status. Run it
// inside a writer unit, so the check and the insert see the same state.
// In an environment with a session policy the adopted deployment expires
// at its droplet's creation + the maximum (docs/operations.md, "Session
// policies").
func AdoptDroplet(ctx context.Context, q Querier, a AdoptedDroplet) (adopted bool, err error) {
	known, err := DropletKnown(ctx, q, a.DropletID)
	if err != nil || known {
		return false, err
	}
	res, err := q.ExecContext(ctx,
		`INSERT OR IGNORE INTO deployments (environment_id, id, droplet_id, region, size, status, launched_at, source,
		     hourly_rate_usd, monthly_rate_usd, rate_captured_at, droplet_created_at, agent_version, session_expires_at)
		 VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, 'inventory', ?7, ?8, ?9, ?10, '', `+sessionCapSQL("?1", "?6")+`)`,
		a.EnvironmentID, a.DeploymentID, a.DropletID, a.Region, a.Size, ms(a.CreatedAt),
		a.HourlyUSD, a.MonthlyUSD, ms(a.ObservedAt), ms(a.CreatedAt))
	if err != nil {
		return false, fmt.Errorf("adopt droplet: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("adopt droplet: %w", err)
	}
	return n == 1, nil
}

// CaptureRate stores a deployment's launch-time rate (USD per hour and per
// month) and, when known, its droplet's creation time, only if no rate was
// captured before: a rate is never rewritten. captured reports whether it
// wrote.
func CaptureRate(ctx context.Context, q Querier, environmentID int64, id string, hourly, monthly float64, dropletCreated, at time.Time) (captured bool, err error) {
	res, err := q.ExecContext(ctx,
		`UPDATE deployments SET hourly_rate_usd = ?, monthly_rate_usd = ?, rate_captured_at = ?,
		     droplet_created_at = coalesce(droplet_created_at, ?)
		 WHERE environment_id = ? AND id = ? AND hourly_rate_usd IS NULL`,
		hourly, monthly, ms(at), msPtr(dropletCreated), environmentID, id)
	if err != nil {
		return false, fmt.Errorf("capture rate: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("capture rate: %w", err)
	}
	return n == 1, nil
}

// CostVolume is one row of cost_volumes.
type CostVolume struct {
	// ID is the provider's volume id.
	ID string
	// EnvironmentID is the environment its tag names.
	EnvironmentID int64
	// Name and SizeGiB are as last listed.
	Name    string
	SizeGiB int64
	// USDPerGiBMonth is the storage rate captured at first observation.
	USDPerGiBMonth float64
	// CreatedAt is the provider's creation time (billing starts there).
	CreatedAt time.Time
	// FirstSeenAt and LastSeenAt bound inventory's observations; GoneAt is
	// set when a complete listing no longer held it (zero while present).
	FirstSeenAt, LastSeenAt, GoneAt time.Time
}

// ObserveVolume records that a complete listing held volume v at
// v.LastSeenAt: a new volume is inserted with its rate, a known one gets
// its size, name and last-seen time (its rate and creation are never
// rewritten); a volume once marked gone that reappears is present again.
func ObserveVolume(ctx context.Context, q Querier, v CostVolume) error {
	if _, err := q.ExecContext(ctx,
		`INSERT INTO cost_volumes (id, environment_id, name, size_gib, usd_per_gib_month, created_at, first_seen_at, last_seen_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		 ON CONFLICT (id) DO UPDATE SET name = excluded.name, size_gib = excluded.size_gib,
		     last_seen_at = excluded.last_seen_at, gone_at = NULL`,
		v.ID, v.EnvironmentID, v.Name, v.SizeGiB, v.USDPerGiBMonth, ms(v.CreatedAt), ms(v.LastSeenAt), ms(v.LastSeenAt)); err != nil {
		return fmt.Errorf("observe volume: %w", err)
	}
	return nil
}

// MarkVolumesGone sets gone_at = at on every present volume of the given
// environments whose id is not in present (the complete listing), and
// returns how many it marked.
func MarkVolumesGone(ctx context.Context, q Querier, environmentIDs []int64, present map[string]bool, at time.Time) (int, error) {
	n := 0
	for _, env := range environmentIDs {
		rows, err := q.QueryContext(ctx, `SELECT id FROM cost_volumes WHERE environment_id = ? AND gone_at IS NULL`, env)
		if err != nil {
			return n, fmt.Errorf("list volumes: %w", err)
		}
		var gone []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return n, fmt.Errorf("list volumes: %w", err)
			}
			if !present[id] {
				gone = append(gone, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return n, fmt.Errorf("list volumes: %w", err)
		}
		for _, id := range gone {
			if _, err := q.ExecContext(ctx, `UPDATE cost_volumes SET gone_at = ? WHERE id = ? AND gone_at IS NULL`, ms(at), id); err != nil {
				return n, fmt.Errorf("mark volume gone: %w", err)
			}
			n++
		}
	}
	return n, nil
}

// CostVolumesInRange returns every volume whose life overlaps [from, to).
func CostVolumesInRange(ctx context.Context, q Querier, from, to time.Time) ([]CostVolume, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT id, environment_id, name, size_gib, usd_per_gib_month, created_at, first_seen_at, last_seen_at, gone_at
		 FROM cost_volumes WHERE created_at < ? AND (gone_at IS NULL OR gone_at >= ?) ORDER BY environment_id, id`,
		ms(to), ms(from))
	if err != nil {
		return nil, fmt.Errorf("list cost volumes: %w", err)
	}
	defer rows.Close()
	var out []CostVolume
	for rows.Next() {
		var v CostVolume
		var created, first, last int64
		var gone sql.NullInt64
		if err := rows.Scan(&v.ID, &v.EnvironmentID, &v.Name, &v.SizeGiB, &v.USDPerGiBMonth, &created, &first, &last, &gone); err != nil {
			return nil, fmt.Errorf("list cost volumes: %w", err)
		}
		v.CreatedAt, v.FirstSeenAt, v.LastSeenAt = time.UnixMilli(created).UTC(), time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
		v.GoneAt = fromMS(gone)
		out = append(out, v)
	}
	return out, rows.Err()
}

// CostSnapshot is one row of cost_snapshots with its per-environment
// month-to-date estimates.
type CostSnapshot struct {
	// ID is assigned on insert.
	ID int64
	// Trigger is "schedule" or "admin".
	Trigger string
	// StartedAt and Duration time the run.
	StartedAt time.Time
	Duration  time.Duration
	// Month is the estimated month, "YYYY-MM" (UTC).
	Month string
	// DropletsSeen and VolumesSeen count the chalupa-tagged resources
	// listed; Adopted, Ended and RatesCaptured what the run did; Unpriced
	// the deployments of the month whose rate is still unknown.
	DropletsSeen, VolumesSeen, Adopted, Ended, RatesCaptured, Unpriced int
	// TotalUSD is the month-to-date estimate over every environment.
	TotalUSD float64
	// Environments holds the estimate per environment id.
	Environments []CostSnapshotEnvironment
}

// CostSnapshotEnvironment is one environment's month-to-date estimate in a
// snapshot (USD).
type CostSnapshotEnvironment struct {
	EnvironmentID int64
	ComputeUSD    float64
	StorageUSD    float64
}

// Cost snapshot triggers.
const (
	CostTriggerSchedule = "schedule"
	CostTriggerAdmin    = "admin"
)

// InsertCostSnapshot stores s and its environments and returns its id.
func InsertCostSnapshot(ctx context.Context, q Querier, s CostSnapshot) (int64, error) {
	var id int64
	if err := q.QueryRowContext(ctx,
		`INSERT INTO cost_snapshots (trigger, started_at, duration_ms, month, droplets_seen, volumes_seen, adopted, ended,
		     rates_captured, unpriced, total_usd)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		s.Trigger, ms(s.StartedAt), s.Duration.Milliseconds(), s.Month, s.DropletsSeen, s.VolumesSeen, s.Adopted, s.Ended,
		s.RatesCaptured, s.Unpriced, s.TotalUSD).Scan(&id); err != nil {
		return 0, fmt.Errorf("insert cost snapshot: %w", err)
	}
	for _, e := range s.Environments {
		if _, err := q.ExecContext(ctx,
			`INSERT INTO cost_snapshot_environments (snapshot_id, environment_id, compute_usd, storage_usd) VALUES (?, ?, ?, ?)`,
			id, e.EnvironmentID, e.ComputeUSD, e.StorageUSD); err != nil {
			return 0, fmt.Errorf("insert cost snapshot environment: %w", err)
		}
	}
	return id, nil
}

// LatestCostSnapshot returns the most recent snapshot (by start time, then
// id), with its environments. Errors: ErrNotFound when there is none.
func LatestCostSnapshot(ctx context.Context, q Querier) (CostSnapshot, error) {
	var s CostSnapshot
	var started, dur int64
	if err := q.QueryRowContext(ctx,
		`SELECT id, trigger, started_at, duration_ms, month, droplets_seen, volumes_seen, adopted, ended, rates_captured,
		        unpriced, total_usd
		 FROM cost_snapshots ORDER BY started_at DESC, id DESC LIMIT 1`).Scan(
		&s.ID, &s.Trigger, &started, &dur, &s.Month, &s.DropletsSeen, &s.VolumesSeen, &s.Adopted, &s.Ended,
		&s.RatesCaptured, &s.Unpriced, &s.TotalUSD); err != nil {
		return CostSnapshot{}, notFound(err)
	}
	s.StartedAt, s.Duration = time.UnixMilli(started).UTC(), time.Duration(dur)*time.Millisecond
	rows, err := q.QueryContext(ctx,
		`SELECT environment_id, compute_usd, storage_usd FROM cost_snapshot_environments WHERE snapshot_id = ? ORDER BY environment_id`, s.ID)
	if err != nil {
		return CostSnapshot{}, fmt.Errorf("read cost snapshot: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e CostSnapshotEnvironment
		if err := rows.Scan(&e.EnvironmentID, &e.ComputeUSD, &e.StorageUSD); err != nil {
			return CostSnapshot{}, fmt.Errorf("read cost snapshot: %w", err)
		}
		s.Environments = append(s.Environments, e)
	}
	return s, rows.Err()
}

// CountCostSnapshots returns how many snapshots are stored.
func CountCostSnapshots(ctx context.Context, q Querier) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM cost_snapshots`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count cost snapshots: %w", err)
	}
	return n, nil
}

// Organization is one row of organizations.
type Organization struct {
	ID   int64
	Slug string
	Name string
	Kind string // platform | customer
}

// ListOrganizations returns every organization ordered by id.
func ListOrganizations(ctx context.Context, q Querier) ([]Organization, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, slug, name, kind FROM organizations ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list organizations: %w", err)
	}
	defer rows.Close()
	var out []Organization
	for rows.Next() {
		var o Organization
		if err := rows.Scan(&o.ID, &o.Slug, &o.Name, &o.Kind); err != nil {
			return nil, fmt.Errorf("list organizations: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}
