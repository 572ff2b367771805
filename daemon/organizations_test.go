package daemon_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/storage"
)

// tokenSentinel is a provider token a test then searches for in every
// answer, the database file's envelopes and the logs.
const tokenSentinel = "dop_v1_SENTINELc0ffee00112233445566778899aabbccddeeff0011223344556677"

// orgEvents returns the organization-level events of kind.
func orgEvents(t *testing.T, db *storage.DB, kind string) []storage.LifecycleEventRow {
	t.Helper()
	rows, err := storage.ListLifecycleEvents(context.Background(), db.Read, storage.EventFilter{Kind: kind, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []storage.LifecycleEventRow
	for _, r := range rows {
		if r.EnvironmentID == 0 {
			out = append(out, r)
		}
	}
	return out
}

func apiCode(err error) string {
	var ae *adminapi.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// TestOrganizationsAndProviderTokens: organizations are created and
// listed; PUT stores the token as an envelope and never returns it (nor
// logs it), a second PUT rotates it, DELETE revokes it; opt-in and
// rotation record reaper-armed and revocation reaper-warning reason
// manual, before the organization has any environment; a refused PUT
// writes nothing.
func TestOrganizationsAndProviderTokens(t *testing.T) {
	ctx := context.Background()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	db := p.App.DB
	if _, err := p.Admin.CreateOrganization(ctx, adminapi.CreateOrganizationRequest{Slug: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Admin.CreateOrganization(ctx, adminapi.CreateOrganizationRequest{Slug: "acme"}); apiCode(err) != "organization_exists" {
		t.Fatalf("duplicate organization: %v, want organization_exists", err)
	}

	body, err := p.Admin.Call(ctx, adminapi.OpSetProviderToken, adminapi.Params{"slug": "acme"}, []byte(`{"token":"`+tokenSentinel+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), tokenSentinel) || !strings.Contains(string(body), `"status":"active"`) {
		t.Fatalf("PUT answered %s: want the status, never the token", body)
	}
	st, err := p.Admin.SetProviderToken(ctx, "acme", tokenSentinel+"2")
	if err != nil || st.Generation != 2 || st.Status != "active" {
		t.Fatalf("rotation: %+v, %v; want generation 2 active", st, err)
	}
	if n := len(orgEvents(t, db, "reaper-armed")); n != 2 {
		t.Fatalf("%d reaper-armed events, want 2 (opt-in and rotation)", n)
	}

	t.Run("refused PUT writes nothing", func(t *testing.T) {
		for _, tc := range []struct{ slug, token, code string }{
			{"acme", "has a space", "invalid_token"},
			{"acme", "", "invalid_token"},
			{"acme", strings.Repeat("x", 513), "invalid_token"},
			{"platform", tokenSentinel, "not_customer"},
			{"nobody", tokenSentinel, "organization_not_found"},
		} {
			_, err := p.Admin.SetProviderToken(ctx, tc.slug, tc.token)
			if apiCode(err) != tc.code || strings.Contains(err.Error(), tokenSentinel) {
				t.Errorf("PUT %s %q: %v, want %s without the token", tc.slug, tc.token, err, tc.code)
			}
		}
		tokens, err := storage.ListProviderTokens(ctx, db.Read)
		if err != nil || len(tokens) != 1 || tokens[0].Generation != 2 {
			t.Fatalf("tokens after refusals: %+v, %v; want acme's generation 2 only", tokens, err)
		}
		if n := len(orgEvents(t, db, "reaper-armed")); n != 2 {
			t.Fatalf("%d reaper-armed events after refusals, want 2", n)
		}
	})

	t.Run("stored as an envelope", func(t *testing.T) {
		tokens, _ := storage.ListProviderTokens(ctx, db.Read)
		if strings.Contains(string(tokens[0].Envelope), "SENTINEL") {
			t.Fatal("the token is stored in clear")
		}
	})

	for range 2 {
		st, err = p.Admin.RevokeProviderToken(ctx, "acme")
		if err != nil || st.Status != "revoked" {
			t.Fatalf("revoke: %+v, %v", st, err)
		}
	}
	w := orgEvents(t, db, "reaper-warning")
	if len(w) != 1 || w[0].Reason != "manual" {
		t.Fatalf("revocation warnings %+v, want one with reason manual", w)
	}
	if _, err := p.Admin.RevokeProviderToken(ctx, "platform"); apiCode(err) != "not_customer" {
		t.Fatalf("revoke the platform's: %v, want not_customer", err)
	}

	list, err := p.Admin.ListOrganizations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Organizations) != 2 || list.Organizations[1].Slug != "acme" || list.Organizations[1].ProviderToken == nil ||
		list.Organizations[1].ProviderToken.Status != "revoked" || list.Organizations[0].Kind != "platform" {
		t.Fatalf("organizations %+v", list.Organizations)
	}

	env, err := p.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "acme-gpu", Organization: "acme"})
	if err != nil || env.Organization != "acme" {
		t.Fatalf("environment under acme: %+v, %v", env, err)
	}
	if _, err := p.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "x-gpu", Organization: "nobody"}); apiCode(err) != "organization_not_found" {
		t.Fatalf("environment under an unknown organization: %v", err)
	}
	if strings.Contains(p.Logs.String(), "SENTINEL") {
		t.Fatal("the token appears in the daemon's log")
	}
}

// TestCustomerInventory: reconciliation lists a customer organization's
// droplets with that organization's own token only (droplet calls), and
// adopts them into its environments; sizes, prices and volumes come from
// the read token; a revoked token is no longer used.
func TestCustomerInventory(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 7, 10, 12, 0, 0, 0, time.UTC))
	s := dofake.New(t, dofake.WithClock(clock))
	read := s.AddToken("read", dofake.ReadOnly...)
	customer := s.AddToken("cust-acme", dofake.CustomerScopes...)
	d := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock, Env: map[string]string{
		"DIGITALOCEAN_READ_TOKEN": read, "CHALUPA_DO_API_URL": s.URL}})
	if _, err := d.Admin.CreateOrganization(ctx, adminapi.CreateOrganizationRequest{Slug: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "acme-gpu", Organization: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Admin.SetProviderToken(ctx, "acme", customer); err != nil {
		t.Fatal(err)
	}
	s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("acme-gpu"), CreatedAt: clock.Now().Add(-time.Hour)})

	r, err := d.Admin.ReconcileCosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Snapshot.Adopted != 1 {
		t.Fatalf("reconciliation %+v: want the customer's droplet adopted", r)
	}
	var customerCalls int
	for _, req := range s.Requests() {
		switch req.Token {
		case "cust-acme":
			customerCalls++
			if req.Method != "GET" || req.Path != "/v2/droplets" {
				t.Errorf("customer token used for %s %s: droplet listing only", req.Method, req.Path)
			}
		case "read":
		default:
			t.Errorf("request %s %s with token %s", req.Method, req.Path, req.Token)
		}
		if (req.Path == "/v2/sizes" || req.Path == "/v2/volumes") && req.Token != "read" {
			t.Errorf("%s read with %s, want the read token", req.Path, req.Token)
		}
	}
	if customerCalls == 0 {
		t.Fatal("the customer's droplets were not listed with its token")
	}

	if _, err := d.Admin.RevokeProviderToken(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	before := len(s.Requests())
	if _, err := d.Admin.ReconcileCosts(ctx); err != nil {
		t.Fatal(err)
	}
	for _, req := range s.Requests()[before:] {
		if req.Token == "cust-acme" {
			t.Fatalf("revoked token still used: %s %s", req.Method, req.Path)
		}
	}
}
