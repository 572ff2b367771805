package daemon

import (
	"context"
	"errors"
	"net/http"
	"unicode"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/internal/slug"
	"github.com/chalupa-run/chalupa/storage"
)

// maxEnvironmentName bounds an environment's display name (bytes).
const maxEnvironmentName = 200

// environmentHandlers create and list environments.
type environmentHandlers struct {
	db    *storage.DB
	clock clockwork.Clock
}

func (h *environmentHandlers) register(o *operations) {
	handleOp(o, adminapi.OpCreateEnvironment, h.create)
	handleOp(o, adminapi.OpListEnvironments, h.list)
}

func (h *environmentHandlers) create(ctx context.Context, req adminapi.CreateEnvironmentRequest) (adminapi.Environment, error) {
	if !slug.Valid(req.Slug) {
		return adminapi.Environment{}, fail(http.StatusBadRequest, "invalid_slug", "slug must match "+slug.Pattern)
	}
	if req.Name == "" {
		req.Name = req.Slug
	}
	if len(req.Name) > maxEnvironmentName {
		return adminapi.Environment{}, fail(http.StatusBadRequest, "invalid_name", "name must be at most 200 bytes")
	}
	if !displayableName(req.Name) {
		return adminapi.Environment{}, fail(http.StatusBadRequest, "invalid_name", "name must be valid UTF-8 without control, bidi or invisible format characters")
	}
	if req.Organization != "" && !slug.Valid(req.Organization) {
		return adminapi.Environment{}, fail(http.StatusBadRequest, "invalid_slug", "organization must match "+slug.Pattern)
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
	return toAPIEnvironment(environment, orgSlug), nil
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
	slugs := make(map[int64]string, len(orgs))
	for _, o := range orgs {
		slugs[o.ID] = o.Slug
	}
	out := adminapi.EnvironmentList{Environments: make([]adminapi.Environment, 0, len(envs))}
	for _, e := range envs {
		out.Environments = append(out.Environments, toAPIEnvironment(e, slugs[e.OrgID]))
	}
	return out, nil
}

func toAPIEnvironment(e storage.Environment, orgSlug string) adminapi.Environment {
	return adminapi.Environment{Organization: orgSlug, Slug: e.Slug, Name: e.Name, Status: e.Status, CreatedAt: e.CreatedAt}
}

// displayableName reports whether name is safe to print on an operator's
// terminal: valid UTF-8, no control characters (NUL, ESC, newline, DEL, C1),
// no bidi controls (U+202E and kin reorder what the operator reads) and no
// other invisible format characters (zero-width space, soft hyphen, BOM:
// Unicode category Cf), which make two different names look alike.
// encoding/json turns invalid UTF-8 in a request into U+FFFD, so that rune
// is refused too: it is what invalid bytes sent by a client look like here.
func displayableName(name string) bool {
	if !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}
