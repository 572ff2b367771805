package daemon

import (
	"context"
	"errors"
	"net/http"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// organizationHandlers create and list customer organizations and store,
// rotate and revoke their DigitalOcean provider tokens (docs/operations.md,
// "Customer organizations"). They hold the database and the provider token
// store; no answer ever carries a token.
type organizationHandlers struct {
	db     *storage.DB
	tokens *ingest.ProviderTokens
	clock  clockwork.Clock
}

func (h *organizationHandlers) register(o *operations) {
	handleOp(o, adminapi.OpCreateOrganization, h.create)
	handleOp(o, adminapi.OpListOrganizations, h.list)
	handleOp(o, adminapi.OpSetProviderToken, h.setToken)
	handleOp(o, adminapi.OpRevokeProviderToken, h.revokeToken)
}

func (h *organizationHandlers) create(ctx context.Context, req adminapi.CreateOrganizationRequest) (adminapi.Organization, error) {
	const nameRule = "name must be at most 200 bytes of valid UTF-8 without control, bidi or invisible format characters"
	// The slug and name rules of the request's schema tags; a name
	// refusal keeps this handler's one message for both of its rules.
	if err := checkShape(req); err != nil {
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.code == "invalid_name" {
			return adminapi.Organization{}, fail(http.StatusBadRequest, "invalid_name", nameRule)
		}
		return adminapi.Organization{}, err
	}
	if req.Name == "" {
		req.Name = req.Slug
	}
	// Not a tag: JSON Schema's maxLength counts characters, this bytes
	// (docs/operations.md, "OpenAPI").
	if len(req.Name) > maxEnvironmentName {
		return adminapi.Organization{}, fail(http.StatusBadRequest, "invalid_name", nameRule)
	}
	var org storage.Organization
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		org, err = storage.CreateOrganization(ctx, tx, req.Slug, req.Name, h.clock.Now())
		return err
	})
	if errors.Is(err, storage.ErrConflict) {
		return adminapi.Organization{}, fail(http.StatusConflict, "organization_exists", "an organization with this slug already exists")
	}
	if err != nil {
		return adminapi.Organization{}, err
	}
	return adminapi.Organization{Slug: org.Slug, Name: org.Name, Kind: org.Kind}, nil
}

func (h *organizationHandlers) list(ctx context.Context, _ none) (adminapi.OrganizationList, error) {
	orgs, err := storage.ListOrganizations(ctx, h.db.Read)
	if err != nil {
		return adminapi.OrganizationList{}, err
	}
	states, err := h.tokens.States(ctx)
	if err != nil {
		return adminapi.OrganizationList{}, err
	}
	out := adminapi.OrganizationList{Organizations: make([]adminapi.Organization, 0, len(orgs))}
	for _, o := range orgs {
		a := adminapi.Organization{Slug: o.Slug, Name: o.Name, Kind: o.Kind}
		if st, ok := states[o.ID]; ok {
			w := tokenWire(st)
			a.ProviderToken = &w
		}
		out.Organizations = append(out.Organizations, a)
	}
	return out, nil
}

func (h *organizationHandlers) setToken(ctx context.Context, req adminapi.SetProviderTokenRequest) (adminapi.ProviderTokenStatus, error) {
	// The slug's pattern is its parameter's `schema` tag (checkParams).
	// The token by its tag (docs/operations.md, "OpenAPI"); the message
	// names the field, never the token.
	if err := checkShapeAs(req, nil, shapeAnswer{http.StatusBadRequest, "invalid_token"}); err != nil {
		return adminapi.ProviderTokenStatus{}, err
	}
	st, err := h.tokens.Set(ctx, req.OrganizationSlug, []byte(req.Token))
	if err != nil {
		return adminapi.ProviderTokenStatus{}, tokenError(err)
	}
	return tokenWire(st), nil
}

func (h *organizationHandlers) revokeToken(ctx context.Context, req adminapi.RevokeProviderTokenRequest) (adminapi.ProviderTokenStatus, error) {
	st, err := h.tokens.Revoke(ctx, req.OrganizationSlug)
	if err != nil {
		return adminapi.ProviderTokenStatus{}, tokenError(err)
	}
	return tokenWire(st), nil
}

// tokenError maps ProviderTokens' refusals to API errors whose messages
// never repeat the token.
func tokenError(err error) error {
	switch {
	case errors.Is(err, ingest.ErrBadProviderToken):
		return fail(http.StatusBadRequest, "invalid_token", ingest.ErrBadProviderToken.Error())
	case errors.Is(err, ingest.ErrOrganizationNotFound):
		return fail(http.StatusNotFound, "organization_not_found", "no organization with this slug")
	case errors.Is(err, ingest.ErrNotCustomer):
		return fail(http.StatusConflict, "not_customer", "the platform organization's credential is the platform write token, never a stored token")
	case errors.Is(err, ingest.ErrNoProviderToken):
		return fail(http.StatusNotFound, "no_provider_token", "the organization has no stored provider token")
	}
	return err
}

func tokenWire(st ingest.ProviderTokenState) adminapi.ProviderTokenStatus {
	return adminapi.ProviderTokenStatus{Organization: st.OrgSlug, Status: st.Status, Generation: st.Generation,
		RotatedAt: st.RotatedAt, RevokedAt: st.RevokedAt}
}
