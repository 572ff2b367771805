package dofake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// TestAccountAsDocumented: GET /v2/account, the token checks' read-only
// call (docs/operations.md, "Alerts"), answers as DigitalOcean's API
// reference documents it (operation account_get, scope account:read):
// 200 with an "account" object holding every required field
// (droplet_limit, floating_ip_limit, email, uuid, email_verified, status,
// status_message) and the rate-limit headers; 401 in the error shape
// (id and message) for a missing, unknown or revoked token; 403 for a
// token without account:read. It changes nothing at the server.
func TestAccountAsDocumented(t *testing.T) {
	s := dofake.New(t)
	full := s.AddToken("full", dofake.FullAccess...)
	customer := s.AddToken("customer", dofake.CustomerScopes...)
	revoked := s.AddToken("revoked", dofake.ReadOnly...)
	s.RevokeToken("revoked")
	get := func(t *testing.T, token string) (*http.Response, map[string]json.RawMessage) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.URL+"v2/account", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body map[string]json.RawMessage
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("body %q is not a JSON object: %v", b, err)
		}
		return resp, body
	}
	t.Run("200 with the required fields", func(t *testing.T) {
		resp, body := get(t, full)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Limit") == "" || resp.Header.Get("RateLimit-Remaining") == "" || resp.Header.Get("RateLimit-Reset") == "" {
			t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
		}
		var account map[string]json.RawMessage
		if err := json.Unmarshal(body["account"], &account); err != nil {
			t.Fatalf("no account object: %v", err)
		}
		for _, f := range []string{"droplet_limit", "floating_ip_limit", "email", "uuid", "email_verified", "status", "status_message"} {
			if _, ok := account[f]; !ok {
				t.Errorf("account lacks the required field %s: %v", f, account)
			}
		}
	})
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"unknown token", "dop_v1_0000", http.StatusUnauthorized},
		{"revoked token", revoked, http.StatusUnauthorized},
		{"token without account:read", customer, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, tc.token)
			if resp.StatusCode != tc.status || body["id"] == nil || body["message"] == nil {
				t.Errorf("status %d body %v, want %d in the error shape", resp.StatusCode, body, tc.status)
			}
		})
	}
	t.Run("only GETs were recorded, each with its token's label", func(t *testing.T) {
		for _, r := range s.Requests() {
			if r.Method != http.MethodGet || r.Route != dofake.RouteGetAccount {
				t.Errorf("recorded %s", r)
			}
		}
	})
}
