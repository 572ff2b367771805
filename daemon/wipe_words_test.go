package daemon_test

import (
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// TestWipeRefusalNamesItsParameter: a state-cache wipe without the right
// phrase is refused 422 confirmation_mismatch in words that name the
// query parameter the phrase goes in, confirmation (docs/operations.md,
// "Jobs"), not the MCP tool's confirm argument.
func TestWipeRefusalNamesItsParameter(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	for _, tc := range []struct{ name, path string }{
		{"without a box", "/admin-api/pulumi-state/cache"},
		{"wrong phrase", "/admin-api/pulumi-state/cache?confirmation=wipe+everything"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, code, body := rawAdmin(t, p, "DELETE", tc.path, "")
			if status != 422 || code != "confirmation_mismatch" {
				t.Fatalf("DELETE %s: %d %s, want 422 confirmation_mismatch: %s", tc.path, status, code, body)
			}
			if !strings.Contains(body, `confirmation must be exactly \"wipe \"`) || strings.Contains(body, "confirm must") {
				t.Errorf("the refusal does not name the confirmation parameter: %s", body)
			}
		})
	}
}
