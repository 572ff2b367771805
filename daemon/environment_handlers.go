package daemon

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/wake"
	"github.com/chalupa-run/chalupa/storage"
)

// maxEnvironmentName bounds an environment's display name (bytes).
const maxEnvironmentName = 200

// environmentHandlers create and list environments and set their session
// policies.
type environmentHandlers struct {
	db    *storage.DB
	clock clockwork.Clock
	// deadlines wakes the reaper for an expiry a new policy brought
	// forward.
	deadlines *wake.Threshold
	// storageBudget is CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES (bytes; 0
	// unlimited), shown beside each environment's storage.
	storageBudget int64
}

func (h *environmentHandlers) register(o *operations) {
	handleOp(o, adminapi.OpCreateEnvironment, h.create)
	handleOp(o, adminapi.OpListEnvironments, h.list)
	handleOp(o, adminapi.OpSetSessionPolicy, h.setPolicy)
	handleOp(o, adminapi.OpClearSessionPolicy, h.clearPolicy)
}

// setPolicy sets an environment's session policy and applies it to its
// active deployments in the same writer unit (docs/operations.md, "Session
// policies"). Bad input is refused before the writer: nothing is written.
func (h *environmentHandlers) setPolicy(ctx context.Context, req adminapi.SetSessionPolicyRequest) (adminapi.SessionPolicyResult, error) {
	var out adminapi.SessionPolicyResult
	// The slug's pattern is its parameter's `schema` tag (checkParams).
	// kind and maxSessionSeconds by their tags (docs/operations.md,
	// "OpenAPI"), with the codes they had before.
	if err := checkShapeAs(req, map[string]shapeAnswer{
		"kind":              {http.StatusBadRequest, "invalid_kind"},
		"maxSessionSeconds": {http.StatusBadRequest, "invalid_max_session"},
	}, shapeAnswer{http.StatusBadRequest, "bad_body"}); err != nil {
		return out, err
	}
	now := h.clock.Now().UTC()
	var earliest time.Time
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		env, err := storage.EnvironmentBySlug(ctx, tx, req.EnvironmentSlug)
		if err != nil {
			return err
		}
		out.Applied, earliest, err = storage.SetSessionPolicy(ctx, tx, storage.SessionPolicy{
			EnvironmentID: env.ID, Kind: req.Kind, MaxSeconds: req.MaxSessionSeconds, UpdatedAt: now})
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.SessionPolicyResult{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	}
	if err != nil {
		return adminapi.SessionPolicyResult{}, err
	}
	if !earliest.IsZero() && h.deadlines != nil {
		h.deadlines.Notify(earliest)
	}
	out.Environment = req.EnvironmentSlug
	out.Policy = &adminapi.SessionPolicy{Kind: req.Kind, MaxSessionSeconds: req.MaxSessionSeconds, UpdatedAt: now.Truncate(time.Millisecond)}
	return out, nil
}

// clearPolicy removes an environment's session policy; expiries it gave
// stay (docs/operations.md, "Session policies").
func (h *environmentHandlers) clearPolicy(ctx context.Context, req adminapi.ClearSessionPolicyRequest) (adminapi.SessionPolicyResult, error) {
	out := adminapi.SessionPolicyResult{Environment: req.EnvironmentSlug}
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		env, err := storage.EnvironmentBySlug(ctx, tx, req.EnvironmentSlug)
		if err != nil {
			return err
		}
		out.Cleared, err = storage.ClearSessionPolicy(ctx, tx, env.ID)
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.SessionPolicyResult{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	}
	if err != nil {
		return adminapi.SessionPolicyResult{}, err
	}
	return out, nil
}

func (h *environmentHandlers) create(ctx context.Context, req adminapi.CreateEnvironmentRequest) (adminapi.Environment, error) {
	// The slug, organization and name rules of the request's schema tags
	// (the name's displayability among them: 400 invalid_name).
	if err := checkShape(req); err != nil {
		return adminapi.Environment{}, err
	}
	if req.Name == "" {
		req.Name = req.Slug
	}
	// Not a tag: JSON Schema's maxLength counts characters, this bytes
	// (docs/operations.md, "OpenAPI").
	if len(req.Name) > maxEnvironmentName {
		return adminapi.Environment{}, fail(http.StatusBadRequest, "invalid_name", "name must be at most 200 bytes")
	}

	var environment storage.Environment
	orgSlug := storage.OrgPlatform
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		if req.Organization == "" {
			environment, err = storage.CreateEnvironment(ctx, tx, req.Slug, req.Name, h.clock.Now())
			return err
		}
		org, err := storage.OrganizationBySlug(ctx, tx, req.Organization)
		if err != nil {
			return err
		}
		orgSlug = org.Slug
		environment, err = storage.CreateEnvironmentInOrg(ctx, tx, org.ID, req.Slug, req.Name, h.clock.Now())
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.Environment{}, fail(http.StatusNotFound, "organization_not_found", "no organization with this slug")
	}
	if errors.Is(err, storage.ErrConflict) {
		return adminapi.Environment{}, fail(http.StatusConflict, "environment_exists", "an environment with this slug already exists")
	}
	if err != nil {
		return adminapi.Environment{}, err
	}
	out := toAPIEnvironment(environment, orgSlug)
	out.StorageBudgetBytes = h.storageBudget
	return out, nil
}

func (h *environmentHandlers) list(ctx context.Context, _ none) (adminapi.EnvironmentList, error) {
	envs, err := storage.ListEnvironments(ctx, h.db.Read)
	if err != nil {
		return adminapi.EnvironmentList{}, err
	}
	orgs, err := storage.ListOrganizations(ctx, h.db.Read)
	if err != nil {
		return adminapi.EnvironmentList{}, err
	}
	policies, err := storage.ListSessionPolicies(ctx, h.db.Read)
	if err != nil {
		return adminapi.EnvironmentList{}, err
	}
	slugs := make(map[int64]string, len(orgs))
	for _, o := range orgs {
		slugs[o.ID] = o.Slug
	}
	out := adminapi.EnvironmentList{Environments: make([]adminapi.Environment, 0, len(envs))}
	for _, e := range envs {
		env := toAPIEnvironment(e, slugs[e.OrgID])
		env.StorageBudgetBytes = h.storageBudget
		if p, ok := policies[e.ID]; ok {
			env.SessionPolicy = &adminapi.SessionPolicy{Kind: p.Kind, MaxSessionSeconds: p.MaxSeconds, UpdatedAt: p.UpdatedAt}
		}
		out.Environments = append(out.Environments, env)
	}
	return out, nil
}

func toAPIEnvironment(e storage.Environment, orgSlug string) adminapi.Environment {
	return adminapi.Environment{Organization: orgSlug, Slug: e.Slug, Name: e.Name, Status: e.Status, CreatedAt: e.CreatedAt,
		StorageBytes: e.StorageBytes}
}
