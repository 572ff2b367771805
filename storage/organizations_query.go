package storage

import (
	"context"
	"fmt"
	"time"
)

// Organization kinds (docs/operations.md, "Customer organizations").
const (
	// OrgPlatform is the operator's own organization (PlatformOrgID).
	OrgPlatform = "platform"
	// OrgCustomer is a customer organization: its deployments are reaped
	// only with its own provider token.
	OrgCustomer = "customer"
)

// CreateOrganization inserts a customer organization (the platform
// organization is created by migration 0001 and is the only one of its
// kind). Errors: ErrConflict when the slug exists.
func CreateOrganization(ctx context.Context, q Querier, slug, name string, now time.Time) (Organization, error) {
	var o Organization
	err := q.QueryRowContext(ctx,
		`INSERT INTO organizations (slug, name, kind, created_at) VALUES (?, ?, 'customer', ?)
		 RETURNING id, slug, name, kind`, slug, name, ms(now)).Scan(&o.ID, &o.Slug, &o.Name, &o.Kind)
	if isUniqueViolation(err) {
		return Organization{}, ErrConflict
	}
	if err != nil {
		return Organization{}, fmt.Errorf("insert organization: %w", err)
	}
	return o, nil
}

// OrganizationBySlug returns the organization with slug. Errors:
// ErrNotFound.
func OrganizationBySlug(ctx context.Context, q Querier, slug string) (Organization, error) {
	return organizationWhere(ctx, q, `slug = ?`, slug)
}

// organizationWhere returns the one organization matching cond. Errors:
// ErrNotFound.
func organizationWhere(ctx context.Context, q Querier, cond string, arg any) (Organization, error) {
	var o Organization
	if err := q.QueryRowContext(ctx, `SELECT id, slug, name, kind FROM organizations WHERE `+cond, arg).
		Scan(&o.ID, &o.Slug, &o.Name, &o.Kind); err != nil {
		return Organization{}, notFound(err)
	}
	return o, nil
}

// CreateEnvironmentInOrg inserts an active environment in organization
// orgID (CreateEnvironment is the platform organization's). Errors:
// ErrConflict when the slug exists.
func CreateEnvironmentInOrg(ctx context.Context, q Querier, orgID int64, slug, name string, now time.Time) (Environment, error) {
	row := q.QueryRowContext(ctx,
		`INSERT INTO environments (org_id, slug, name, status, created_at, updated_at)
		 VALUES (?, ?, ?, 'active', ?, ?) RETURNING `+environmentCols,
		orgID, slug, name, ms(now), ms(now))
	e, err := scanEnvironment(row)
	if isUniqueViolation(err) {
		return Environment{}, ErrConflict
	}
	if err != nil {
		return Environment{}, fmt.Errorf("insert environment: %w", err)
	}
	return e, nil
}

// OrgEvent is an organization-level lifecycle event: it has no
// environment, so it exists before the organization's first environment
// (docs/operations.md, "Customer organizations").
type OrgEvent struct {
	// ID is the stable event id.
	ID string
	// OrgID is the organization.
	OrgID int64
	// Kind, Reason, Message and OccurredAt as in LifecycleEvent.
	Kind, Reason, Message string
	OccurredAt            time.Time
}

// InsertOrgEvent records ev unless an event with its id exists (INSERT OR
// IGNORE) and reports whether it inserted a row; inside a writer unit
// OccurredAt is stored as the writer's event time (Writer.SetEventTime). Errors: a database
// fault, including a foreign-key failure for an unknown organization.
func InsertOrgEvent(ctx context.Context, q Querier, ev OrgEvent) (inserted bool, err error) {
	res, err := q.ExecContext(ctx,
		`INSERT OR IGNORE INTO lifecycle_events (id, org_id, environment_id, deployment_id, kind, reason, message, occurred_at)
		 VALUES (?, ?, NULL, NULL, ?, ?, ?, ?)`,
		ev.ID, ev.OrgID, ev.Kind, ev.Reason, ev.Message, ms(eventTime(q, ev.OccurredAt)))
	if err != nil {
		return false, fmt.Errorf("insert organization event: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("insert organization event: %w", err)
	}
	return n == 1, nil
}

// DeploymentOwner is whose provider account a deployment's droplet lives
// in: its environment's organization, and whether it is managed (managed
// deployments run in the platform's account; docs/operations.md,
// "Customer organizations").
type DeploymentOwner struct {
	OrgID   int64
	Managed bool
}

// DeploymentOwnerOf returns a deployment's owner. Errors: ErrNotFound.
func DeploymentOwnerOf(ctx context.Context, q Querier, environmentID int64, deploymentID string) (DeploymentOwner, error) {
	var o DeploymentOwner
	var managed int
	if err := q.QueryRowContext(ctx,
		`SELECT e.org_id, d.managed FROM deployments d JOIN environments e ON e.id = d.environment_id
		 WHERE d.environment_id = ? AND d.id = ?`, environmentID, deploymentID).Scan(&o.OrgID, &managed); err != nil {
		return DeploymentOwner{}, notFound(err)
	}
	o.Managed = managed == 1
	return o, nil
}

// OrganizationByID returns the organization with id. Errors: ErrNotFound.
func OrganizationByID(ctx context.Context, q Querier, id int64) (Organization, error) {
	return organizationWhere(ctx, q, `id = ?`, id)
}
